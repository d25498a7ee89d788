//! What can go wrong running the iptables tools.

use std::process::ExitStatus;
use std::time::Duration;

/// An iptables tool could not be found, run, or refused its input.
#[derive(Debug, thiserror::Error)]
pub enum IptablesError {
    /// A configuration value names no backend.
    #[error("unknown iptables backend `{0}`: expected auto, legacy or nft")]
    UnknownBackend(String),
    /// Neither backend has all its tools installed.
    #[error("no iptables backend is installed: {missing} not found on PATH (the Debian package is `iptables`)")]
    NoBackend {
        /// The first missing tool of each backend, e.g. "iptables-legacy-restore and iptables-nft-restore".
        missing: String,
    },
    /// A tool of the backend in use is not installed.
    #[error("`{tool}` is not installed (not found on PATH)")]
    MissingTool { tool: String },
    /// The tool exists but could not be started.
    #[error("cannot start `{tool}`")]
    Spawn {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    /// Writing the payload to the tool's stdin failed although the tool succeeded.
    #[error("writing the payload to `{command}` failed")]
    Write {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The tool ran longer than allowed and was killed.
    #[error("`{command}` did not finish within {timeout:?} and was killed")]
    Timeout { command: String, timeout: Duration },
    /// The tool exited unsuccessfully (not a restore payload refusal).
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed { command: String, status: ExitStatus, stderr: String },
    /// The nft backend's chains could not be listed over netlink (the
    /// error names the family, tables and step).
    #[error(transparent)]
    ListChains(kproxy_netlink::nft::DumpError),
    /// The blocking task that lists them panicked or was cancelled.
    #[error("the iptables-nft chain listing task did not finish")]
    ListTask(#[source] tokio::task::JoinError),
    /// `*-restore` refused the payload; nothing of the refused table was committed.
    #[error("`{command}` refused the payload ({status}): {stderr}{}", quoted(*line, offending.as_deref()))]
    Refused {
        command: String,
        status: ExitStatus,
        /// The tool's first stderr lines, joined with " | ".
        stderr: String,
        /// The payload line the tool blamed, 1-based, if it said.
        line: Option<usize>,
        /// That line of the payload.
        offending: Option<String>,
    },
}

fn quoted(line: Option<usize>, offending: Option<&str>) -> String {
    match (line, offending) {
        (Some(line), Some(text)) => format!("; payload line {line}: `{text}`"),
        (Some(line), None) => format!("; payload line {line} (past the end of the payload)"),
        _ => String::new(),
    }
}
