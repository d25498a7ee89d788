//! `kproxy state`: what this node would program, from a manifest folder.

use std::process::ExitCode;

use kproxy_source::manifests::Folder;
use kproxy_state::StateBuilder;

use crate::args::{Output, StateArgs};
use crate::setup::{load_config, manifests_dir, state_config};
use crate::table;

/// Prints the state; exits 1 when some documents had to be skipped (the
/// state printed is then what kproxy would serve without them).
pub fn state(args: StateArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.common)?;
    let dir = manifests_dir(&args.common)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let host_addresses = runtime.block_on(crate::host::addresses());
    let mut builder = StateBuilder::new(state_config(&config, config.mode, host_addresses));

    let mut folder = Folder::new(dir).map_err(|e| crate::UsageError(format!("--manifests {e}")))?;
    let reload = folder.reload()?;
    for event in reload.events {
        builder.apply(event);
    }
    builder.take_changes();

    match args.output {
        Output::Table => print!("{}", table::render(builder.state(), &builder.ignored_services())),
        Output::Json => println!("{}", serde_json::to_string_pretty(builder.state())?),
    }
    for error in &reload.errors {
        eprintln!("error: {error}");
    }
    for kept in &reload.kept {
        eprintln!("note: {kept}: kept from the file's last valid version");
    }
    if reload.errors.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{} document(s) skipped", reload.errors.len());
        Ok(ExitCode::FAILURE)
    }
}
