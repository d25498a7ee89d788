//! `conntrack.*`: the conntrack limit, its hash size, and the timeouts,
//! applied once at start by the kernel modes, with upstream kube-proxy's
//! rules (docs/operations.md, "Conntrack and OOM settings").
//!
//! - `nf_conntrack_max` = max(`maxPerCore` x the node's CPUs, `min`), left
//!   alone when `maxPerCore` is 0, and only ever raised (upstream since
//!   kubernetes#142035). The hash size (`/sys/module/nf_conntrack/parameters/hashsize`)
//!   is raised to a quarter of that when smaller, unless sysfs is mounted
//!   read-only.
//! - Both are global: outside the initial network namespace the kernel makes
//!   `nf_conntrack_max` read-only and refuses the hash size. kproxy then
//!   skips both with a warning saying so, where upstream exits if the limit
//!   needs raising.
//! - The TCP and UDP timeouts and `tcp_be_liberal` are per network
//!   namespace: each non-zero one is written, in whole seconds, when it
//!   differs from the kernel's.
//!
//! Nothing here is fatal: a setting that cannot be applied is a warning and
//! kproxy runs on (an unprivileged container's `/proc/sys` is read-only).

use std::time::Duration;

use tracing::{debug, info, warn};

use crate::sysctl::{KernelFiles, SysctlError};

/// The conntrack settings of the configuration; zero leaves a sysctl alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConntrackSettings {
    /// `conntrack.maxPerCore`; 0 leaves the limit alone, whatever `min` says.
    pub max_per_core: u32,
    /// `conntrack.min`: the limit's floor.
    pub min: u32,
    /// `conntrack.tcpEstablishedTimeout`.
    pub tcp_established_timeout: Duration,
    /// `conntrack.tcpCloseWaitTimeout`.
    pub tcp_close_wait_timeout: Duration,
    /// `conntrack.tcpBeLiberal`: sets `nf_conntrack_tcp_be_liberal` to 1.
    pub tcp_be_liberal: bool,
    /// `conntrack.udpTimeout`.
    pub udp_timeout: Duration,
    /// `conntrack.udpStreamTimeout`.
    pub udp_stream_timeout: Duration,
}

/// The limit's sysctl.
const MAX: &str = "net/netfilter/nf_conntrack_max";
/// The conntrack hash table's size, under `/sys`.
const HASHSIZE: &str = "module/nf_conntrack/parameters/hashsize";

/// One setting's fate, as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written: what it held before (`None`: unreadable) and now.
    Set { setting: String, from: Option<u64>, to: u64 },
    /// Already as wanted (for the limit and hash size: at least as large).
    Kept { setting: String, value: u64 },
    /// Not written, and why.
    Skipped { setting: String, wanted: u64, reason: Skip },
}

/// Why a setting was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Global, and kproxy runs outside the initial network namespace.
    NotInitialNamespace,
    /// sysfs is mounted read-only (upstream's docker#24000 case).
    SysfsReadOnly,
    /// `/proc/sys` is mounted read-only (an unprivileged container).
    ProcSysReadOnly,
    /// The sysctl does not exist: `nf_conntrack` is not loaded.
    NotLoaded,
    /// A timeout under one second would be written as 0.
    UnderOneSecond,
    /// Any other failure, in words.
    Failed(String),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NotInitialNamespace => f.write_str(
                "the kernel lets only the initial network namespace change it, and kproxy runs in another one; set it on the node",
            ),
            Skip::SysfsReadOnly => {
                f.write_str("/sys is mounted read-only: cannot modify conntrack limits, problems may arise later")
            }
            Skip::ProcSysReadOnly => f.write_str(
                "/proc/sys is mounted read-only (an unprivileged container); run privileged or set it on the node",
            ),
            Skip::NotLoaded => f.write_str("nf_conntrack is not loaded; a restart after kproxy's first sync applies it"),
            Skip::UnderOneSecond => f.write_str("under one second; the kernel counts whole seconds"),
            Skip::Failed(error) => f.write_str(error),
        }
    }
}

/// The `nf_conntrack_max` wanted on a node with `cpus` CPUs: `maxPerCore`
/// times the CPUs, at least `min`; `None` when `maxPerCore` is 0.
pub fn conntrack_max(settings: &ConntrackSettings, cpus: usize) -> Option<u64> {
    if settings.max_per_core == 0 {
        return None;
    }
    let scaled = u64::from(settings.max_per_core).saturating_mul(cpus as u64);
    Some(scaled.max(u64::from(settings.min)))
}

/// The node's CPU count: the online CPUs under `/sys`, else what this
/// process may use.
pub fn node_cpus(files: &KernelFiles) -> usize {
    files.online_cpus().unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Applies `settings` through `files` on a node with `cpus` CPUs, logging
/// each setting changed (info, old -> new) or skipped (warn, with the
/// reason), and returns what happened to each.
pub fn apply_conntrack_settings(files: &KernelFiles, settings: &ConntrackSettings, cpus: usize) -> Vec<Outcome> {
    let mut out = Vec::new();
    if let Some(max) = conntrack_max(settings, cpus) {
        limits(files, max, &mut out);
    }
    // Upstream's order: the TCP timeouts, be_liberal, the UDP timeouts.
    let tcp = [
        ("net/netfilter/nf_conntrack_tcp_timeout_established", settings.tcp_established_timeout),
        ("net/netfilter/nf_conntrack_tcp_timeout_close_wait", settings.tcp_close_wait_timeout),
    ];
    let udp = [
        ("net/netfilter/nf_conntrack_udp_timeout", settings.udp_timeout),
        ("net/netfilter/nf_conntrack_udp_timeout_stream", settings.udp_stream_timeout),
    ];
    timeouts(files, &tcp, &mut out);
    if settings.tcp_be_liberal {
        out.push(set_exact(files, "net/netfilter/nf_conntrack_tcp_be_liberal", 1));
    }
    timeouts(files, &udp, &mut out);
    for outcome in &out {
        log(outcome);
    }
    out
}

/// Each non-zero timeout, in whole seconds.
fn timeouts(files: &KernelFiles, timeouts: &[(&str, Duration)], out: &mut Vec<Outcome>) {
    for &(key, timeout) in timeouts.iter().filter(|(_, t)| !t.is_zero()) {
        // Upstream truncates to whole seconds; a sub-second timeout would
        // become 0 and expire every entry at once, so kproxy leaves it.
        out.push(match timeout.as_secs() {
            0 => Outcome::Skipped { setting: dotted(key), wanted: 0, reason: Skip::UnderOneSecond },
            seconds => set_exact(files, key, seconds),
        });
    }
}

/// `nf_conntrack_max` raised to `max`, then the hash size to `max / 4`.
fn limits(files: &KernelFiles, max: u64, out: &mut Vec<Outcome>) {
    let setting = dotted(MAX);
    let current = files.read_int(MAX);
    let wanted_hashsize = max / 4;
    match files.writable(MAX) {
        None => {
            out.push(Outcome::Skipped { setting, wanted: max, reason: Skip::NotLoaded });
            return;
        }
        // Outside the initial namespace the kernel shows the global limit
        // read-only, and refuses a hash size (EOPNOTSUPP): neither is tried.
        Some(false) => {
            out.push(at_least(setting, current, max).unwrap_or_else(|(setting, _)| Outcome::Skipped {
                setting,
                wanted: max,
                reason: Skip::NotInitialNamespace,
            }));
            let hashsize = files.read_sys_int(HASHSIZE);
            out.push(at_least(hashsize_name(), hashsize, wanted_hashsize).unwrap_or_else(|(setting, _)| {
                Outcome::Skipped { setting, wanted: wanted_hashsize, reason: Skip::NotInitialNamespace }
            }));
            return;
        }
        Some(true) => {}
    }
    let limit =
        at_least(setting, current, max).unwrap_or_else(|(setting, from)| match files.write(MAX, &max.to_string()) {
            Ok(()) => Outcome::Set { setting, from, to: max },
            Err(e) => Outcome::Skipped { setting, wanted: max, reason: skip(&e, Skip::ProcSysReadOnly) },
        });
    let raised = !matches!(limit, Outcome::Skipped { .. });
    out.push(limit);
    // As upstream: a limit that could not be raised leaves the hash size
    // (it would be sized for a limit the node does not have).
    if !raised {
        return;
    }
    let hashsize = files.read_sys_int(HASHSIZE);
    out.push(at_least(hashsize_name(), hashsize, wanted_hashsize).unwrap_or_else(|(setting, from)| {
        if files.sysfs_read_only() == Some(true) {
            return Outcome::Skipped { setting, wanted: wanted_hashsize, reason: Skip::SysfsReadOnly };
        }
        match files.write_sys(HASHSIZE, &wanted_hashsize.to_string()) {
            Ok(()) => Outcome::Set { setting, from, to: wanted_hashsize },
            Err(e) => Outcome::Skipped { setting, wanted: wanted_hashsize, reason: skip(&e, Skip::SysfsReadOnly) },
        }
    }));
}

/// `Kept` when `current` is at least `wanted`; otherwise the setting's
/// name and current value (if read) for the caller to raise it.
fn at_least(setting: String, current: Result<u64, SysctlError>, wanted: u64) -> Result<Outcome, (String, Option<u64>)> {
    match current {
        Ok(value) if value >= wanted => Ok(Outcome::Kept { setting, value }),
        Ok(value) => Err((setting, Some(value))),
        Err(_) => Err((setting, None)),
    }
}

/// Sysctl `key` set to exactly `value` (lower or higher) when it differs.
fn set_exact(files: &KernelFiles, key: &str, value: u64) -> Outcome {
    let setting = dotted(key);
    let from = match files.read_int(key) {
        Ok(current) if current == value => return Outcome::Kept { setting, value },
        Ok(current) => Some(current),
        Err(e) if is_not_found(&e) => return Outcome::Skipped { setting, wanted: value, reason: Skip::NotLoaded },
        Err(_) => None,
    };
    match files.write(key, &value.to_string()) {
        Ok(()) => Outcome::Set { setting, from, to: value },
        Err(e) => Outcome::Skipped { setting, wanted: value, reason: skip(&e, Skip::ProcSysReadOnly) },
    }
}

/// Why a write failed; `read_only` is the reason for EROFS on this file
/// system.
fn skip(error: &SysctlError, read_only: Skip) -> Skip {
    let Some(io) = error.io() else { return Skip::Failed(error.to_string()) };
    match io.kind() {
        std::io::ErrorKind::ReadOnlyFilesystem => read_only,
        std::io::ErrorKind::NotFound => Skip::NotLoaded,
        _ if io.raw_os_error() == Some(libc::EOPNOTSUPP) => Skip::NotInitialNamespace,
        _ => Skip::Failed(error.chain()),
    }
}

fn is_not_found(error: &SysctlError) -> bool {
    error.io().is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
}

/// `net.netfilter.nf_conntrack_max`, as sysctl(8) spells it.
fn dotted(key: &str) -> String {
    key.replace('/', ".")
}

fn hashsize_name() -> String {
    format!("/sys/{HASHSIZE}")
}

fn log(outcome: &Outcome) {
    match outcome {
        Outcome::Set { setting, from: Some(from), to } => info!(%setting, from, to, "conntrack setting changed"),
        Outcome::Set { setting, from: None, to } => info!(%setting, to, "conntrack setting changed"),
        Outcome::Kept { setting, value } => debug!(%setting, value, "conntrack setting already as wanted"),
        Outcome::Skipped { setting, wanted, reason } => {
            warn!(%setting, wanted, %reason, "conntrack setting not applied")
        }
    }
}

#[cfg(test)]
mod tests;
