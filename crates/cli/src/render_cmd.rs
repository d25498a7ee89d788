//! `kproxy render`: the rules `run` would apply, as an `nft -f` script.

use std::process::ExitCode;

use kproxy_model::Changes;

use crate::args::RenderArgs;
use crate::state_cmd::load_state;

/// Prints the script of a first full sync (it replaces kproxy's tables);
/// loading it with `nft -f` programs what `run` would.
pub fn render(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_state(&args.common)?;
    let config = crate::mode::nftables_config(&loaded.config);
    let planned = kproxy_nftables::plan(loaded.builder.state(), &Changes::default(), true, &config, None);
    print!("{}", kproxy_nftables::render::plan(&planned.plan));
    for skipped in &planned.skips {
        eprintln!("not programmed: {skipped}");
    }
    Ok(loaded.exit_code())
}
