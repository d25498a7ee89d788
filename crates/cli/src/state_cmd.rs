//! `kproxy state`: what this node programs: from a manifest folder, one
//! list of the API server's objects, or the running kproxy.

use std::process::ExitCode;

use kproxy_admin::StateReport;
use kproxy_config::{Config, ProxyMode};
use kproxy_source::manifests::Folder;
use kproxy_state::StateBuilder;

use crate::args::{Common, Output, StateArgs};
use crate::live::Source;
use crate::setup::{load_config, state_config};
use crate::table;

/// A manifest folder read once into the state, for the offline commands.
pub struct Loaded {
    pub config: Config,
    pub builder: StateBuilder,
    /// Documents that had to be skipped (already reported on stderr).
    pub skipped: usize,
}

impl Loaded {
    /// 0, or 1 when some documents had to be skipped.
    pub fn exit_code(&self) -> ExitCode {
        if self.skipped == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
    }
}

/// Reads the folder of `--manifests` (reporting bad documents on stderr),
/// else one list of the API server (`--kubeconfig`), and folds everything
/// into the state, with `config` read from the same flags.
pub fn load_objects(common: &Common, config: Config) -> anyhow::Result<Loaded> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let host_addresses = runtime.block_on(crate::host::addresses(config.mode));
    // What `run` would do of the annotations: the configured mode's, or
    // the nftables mode's (the default where kproxy can program).
    let support = crate::mode::support(&config, Some(mode(&config)))?;
    let mut state_config = state_config(&config, host_addresses, config.mode, support);
    let Some(dir) = &common.manifests else {
        // As `run` reads the API: the cluster's controller writes the
        // slices, and a Node that does not exist is not this node.
        state_config.endpoint_controller = false;
        state_config.node_required = true;
        let events = runtime.block_on(crate::cluster::list(&config, &state_config.node_name))?;
        let mut builder = StateBuilder::new(state_config);
        events.into_iter().for_each(|event| builder.apply(event));
        builder.take_changes();
        return Ok(Loaded { config, builder, skipped: 0 });
    };
    let mut folder = Folder::new(dir).map_err(|e| crate::UsageError(format!("--manifests {e}")))?;
    let mut builder = StateBuilder::new(state_config);
    let reload = folder.reload()?;
    for event in reload.events {
        builder.apply(event);
    }
    builder.take_changes();
    for error in &reload.errors {
        eprintln!("error: {error}");
    }
    for warning in reload.warnings.iter().chain(&reload.unknown_fields) {
        eprintln!("warning: {warning}");
    }
    for kept in &reload.kept {
        eprintln!("note: {kept}: kept from the file's last valid version");
    }
    if !reload.errors.is_empty() {
        eprintln!("{} document(s) skipped", reload.errors.len());
    }
    Ok(Loaded { config, builder, skipped: reload.errors.len() })
}

/// The mode the offline commands compute for: the configured one, else
/// [`crate::setup::UNSET_MODE`] (what `run` picks where it can program).
pub fn mode(config: &Config) -> ProxyMode {
    config.mode.unwrap_or(crate::setup::UNSET_MODE)
}

/// Prints the state and what the mode would not program of it (the
/// document `/state` serves); exits 1 when some documents had to be
/// skipped (the state printed is then what kproxy would serve without
/// them). Without a source, the running kproxy's (see [`crate::live`]).
pub fn state(args: StateArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.common)?;
    if let Source::Running(addr) = crate::live::source(&args.common, args.running.address, &config)? {
        return crate::live::state(addr, args.output);
    }
    let loaded = load_objects(&args.common, config)?;
    let state = loaded.builder.state();
    let mode = mode(&loaded.config);
    let skips = crate::not_programmed::for_mode(&loaded.config, Some(mode))?.not_programmed(state);
    let report = StateReport::new(mode.as_str(), state, skips);
    match args.output {
        Output::Table => crate::output::print(&table::render(&report))?,
        Output::Json => crate::output::print(&format!("{}\n", serde_json::to_string_pretty(&report)?))?,
    }
    let code = loaded.exit_code();
    // The process exits next: freeing every record one by one would only
    // add time (a tenth of `kproxy state` on a 10k-service folder).
    std::mem::forget(loaded);
    Ok(code)
}
