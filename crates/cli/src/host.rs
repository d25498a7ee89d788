//! Facts about the host kproxy runs on.

use std::net::IpAddr;

use tracing::warn;

/// The host name as upstream uses it for the node name: trimmed, lowercase.
pub fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    name.trim().to_lowercase()
}

/// The host's addresses; empty (with a warning) if they cannot be read, in
/// which case node ports are served only on the Node's own addresses.
pub async fn addresses() -> Vec<IpAddr> {
    match kproxy_netlink::host_addresses().await {
        Ok(addresses) => addresses,
        Err(e) => {
            warn!(error = %e, "cannot list this host's addresses; node ports use the Node object's addresses only");
            Vec::new()
        }
    }
}
