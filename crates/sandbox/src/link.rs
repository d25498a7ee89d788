//! Waiting until links a sandbox created can carry traffic.
//!
//! A link that was just set up sends nothing until the kernel's linkwatch
//! work has seen its carrier (its qdisc stays the dropping `noop` one), and
//! linkwatch batches non-urgent events for up to a second. `ip link` shows
//! such a link as `NO-CARRIER` even though `LOWER_UP` is already set.

use std::time::{Duration, Instant};

use crate::{Netns, SandboxError};

/// How long a link may take to become ready: above linkwatch's one-second batching.
const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(10);

/// Waits until each of `interfaces` in `ns` is running with carrier and `ns`
/// has no tentative IPv6 address.
pub(crate) fn wait_ready(ns: &Netns, interfaces: &[&str]) -> Result<(), SandboxError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let links = ns.ip_output(&["-o", "link", "show"])?;
        let mut pending: Vec<&str> = interfaces.iter().copied().filter(|name| !is_running(&links, name)).collect();
        if !ns.ip_output(&["-6", "-o", "addr", "show", "tentative"])?.trim().is_empty() {
            pending.push("(tentative IPv6 address)");
        }
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::LinkNotReady {
                netns: ns.name().to_owned(),
                interfaces: pending.join(", "),
                waited: READY_TIMEOUT,
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Whether `ip -o link show` output lists `name` as up, with carrier, and running.
fn is_running(links: &str, name: &str) -> bool {
    links.lines().any(|line| {
        // "4: kpv10@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 ..."
        let mut fields = line.split_whitespace();
        let named = fields.nth(1).is_some_and(|field| field.trim_end_matches(':').split('@').next() == Some(name));
        let flags = fields.next().unwrap_or_default();
        named && flags.contains("LOWER_UP") && !flags.contains("NO-CARRIER")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINKS: &str = "\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN
2: eth0@if2: <NO-CARRIER,BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state DOWN
3: kpbr0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
110: kpv10@if2: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN
";

    #[test]
    fn a_link_is_running_only_with_carrier_seen_by_linkwatch() {
        assert!(is_running(LINKS, "lo"));
        assert!(is_running(LINKS, "kpbr0"));
        assert!(!is_running(LINKS, "eth0"), "NO-CARRIER although LOWER_UP");
        assert!(!is_running(LINKS, "kpv10"), "down");
        assert!(!is_running(LINKS, "kpv1"), "absent");
    }
}
