//! `kproxy render`: the rules of the proxy mode as text (see
//! [`crate::rules::Rules::render`]), planned from a manifest folder or the
//! cluster's objects, or as the running kproxy applied them (its
//! `/render`). A mode without kernel rules (userspace) is refused.

use std::process::ExitCode;

use crate::args::RenderArgs;
use crate::live::Source;
use crate::rules::Rules;
use crate::setup::load_config;
use crate::state_cmd::load_objects;

/// Prints the rules of a first full sync (loading them programs what `run`
/// would); what the planner could not program goes to stderr.
pub fn render(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.common)?;
    if let Source::Running(addr) = crate::live::source(&args.common, args.running.address, &config)? {
        crate::live::check_mode(addr, &args.common)?;
        crate::output::print(&crate::live::get(addr, "/render")?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let loaded = load_objects(&args.common, config)?;
    let rules = Rules::of(crate::state_cmd::mode(&loaded.config), &loaded.config)?;
    let rendered = rules.render(loaded.builder.state());
    for skipped in &rendered.skipped {
        eprintln!("not programmed: {skipped}");
    }
    crate::output::print(&rendered.text)?;
    Ok(loaded.exit_code())
}
