//! `kproxy`: a Kubernetes service proxy.
//!
//! The binary is thin: it parses arguments and configuration, wires the
//! crates together, sets up logging and maps errors to exit codes (0 done,
//! 1 failed, 64 bad usage or configuration; 0 also when the reader of
//! standard output went away, as ripgrep: see [`output`]).

mod args;
mod claim;
mod cleanup_cmd;
mod cluster;
mod coexist;
mod config_out;
mod demo;
mod forwarding;
mod host;
mod inspector;
mod kernel_settings;
mod leftovers;
mod list_cmd;
mod live;
mod logging;
mod mode;
mod node_check;
mod not_programmed;
mod output;
mod render_cmd;
mod rules;
mod run;
mod setup;
mod state_cmd;
#[cfg(test)]
mod support_check;
mod table;
mod trace_cmd;
mod version_cmd;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

/// Bad command line or configuration (sysexits' EX_USAGE).
const EXIT_USAGE: u8 = 64;

/// An error that is the user's to fix (bad flag, bad config): exit 64.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            // Printing help or an error to the terminal; nothing to do if that fails.
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        _ if cli.cleanup => cleanup_cmd::everything(&kproxy_config::Config::default()),
        None => {
            eprintln!(
                "kproxy: a command is required (run, state, render, trace, cleanup, demo, list, version); see kproxy --help"
            );
            return ExitCode::from(EXIT_USAGE);
        }
        Some(Command::Run(args)) => run::run(args),
        Some(Command::State(args)) => state_cmd::state(args),
        Some(Command::Render(args)) => render_cmd::render(args),
        Some(Command::Trace(args)) => trace_cmd::trace(args),
        Some(Command::Cleanup(args)) => cleanup_cmd::cleanup(args),
        Some(Command::Demo(args)) => demo::demo(args),
        Some(Command::List(args)) => list_cmd::list(args),
        Some(Command::Version(args)) => version_cmd::version(&args),
    };
    match result {
        Ok(code) => code,
        // `kproxy render | head -3`: the reader had what it wanted.
        Err(e) if e.downcast_ref::<output::StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kproxy: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() || e.downcast_ref::<kproxy_config::ConfigError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
