//! `kproxy list`: what this node serves, as `ipvsadm -Ln` prints it: a
//! running kproxy's `/list` (with connection counts where its mode has
//! them), or, with `--manifests` or `--kubeconfig`, the list the planned
//! state implies.

use std::process::ExitCode;

use anyhow::Context;
use kproxy_admin::listing::{VirtualServer, from_state, render};
use kproxy_config::ProxyMode;

use crate::args::ListArgs;
use crate::live::Source;
use crate::setup::load_config;
use crate::state_cmd::load_objects;

pub fn list(args: ListArgs) -> anyhow::Result<ExitCode> {
    let config = load_config(&args.common)?;
    if let Source::Running(addr) = crate::live::source(&args.common, args.running.address, &config)? {
        let body = crate::live::get(addr, "/list")?;
        let servers: Vec<VirtualServer> =
            serde_json::from_str(&body).with_context(|| format!("{addr}/list: not the list kproxy serves"))?;
        print!("{}", render(&servers));
        return Ok(ExitCode::SUCCESS);
    }
    let loaded = load_objects(&args.common, config)?;
    let mode = loaded.config.mode.unwrap_or(ProxyMode::Nftables);
    let default = crate::mode::support(&loaded.config, Some(mode))?.default_scheduler;
    print!("{}", render(&from_state(loaded.builder.state(), default)));
    Ok(loaded.exit_code())
}
