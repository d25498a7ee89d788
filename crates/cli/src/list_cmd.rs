//! `kproxy list`: what this node serves, as `ipvsadm -Ln` prints it: a
//! running kproxy's `/list` (with connection counts where its mode has
//! them), or, with `--manifests` or `--kubeconfig`, the list the planned
//! state implies.

use std::process::ExitCode;

use anyhow::Context;
use kproxy_admin::listing::{VirtualServer, from_state, render};

use crate::args::{ListArgs, Output};
use crate::live::Source;
use crate::setup::load_config;
use crate::state_cmd::load_objects;

pub fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.common)?;
    let (servers, code) = match crate::live::source(&args.common, args.running.address, &config)? {
        Source::Running(addr) => {
            let body = crate::live::get(addr, "/list")?;
            let servers: Vec<VirtualServer> =
                serde_json::from_str(&body).with_context(|| format!("{addr}/list: not the list kproxy serves"))?;
            (servers, ExitCode::SUCCESS)
        }
        _ => {
            let loaded = load_objects(&args.common, config)?;
            let mode = crate::state_cmd::mode(&loaded.config);
            let default = crate::mode::support(&loaded.config, Some(mode))?.default_scheduler;
            let forward = crate::forwarding::forward(&loaded.config, mode);
            (from_state(loaded.builder.state(), default, forward.as_ref()), loaded.exit_code())
        }
    };
    match args.output {
        Output::Table => crate::output::print(&render(&servers))?,
        // Re-encoded, so the output is /list's shape whatever the running
        // kproxy's version (older snake_case keys read and written anew).
        Output::Json => crate::output::print(&format!("{}\n", serde_json::to_string_pretty(&servers)?))?,
    }
    Ok(code)
}
