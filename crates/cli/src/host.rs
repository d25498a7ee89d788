//! Facts about the host kproxy runs on.

use std::net::IpAddr;

use kproxy_config::ProxyMode;

use tracing::warn;

/// The host name as upstream uses it for the node name: trimmed, lowercase.
pub fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    name.trim().to_lowercase()
}

/// The host's addresses that may serve node ports in `mode`; empty (with a
/// warning) if they cannot be read, in which case node ports are served
/// only on the Node object's addresses. Never the addresses on
/// `kube-ipvs0` (the IPVS mode's service addresses, also when another mode
/// starts on a node the IPVS mode left); in IPVS mode neither loopback nor
/// IPv6 link-local addresses, as upstream's IPVS mode.
pub async fn addresses(mode: Option<ProxyMode>) -> Vec<IpAddr> {
    let mut addresses = match kproxy_netlink::host_addresses().await {
        Ok(addresses) => addresses,
        Err(e) => {
            warn!(error = %e, "cannot list this host's addresses; node ports use the Node object's addresses only");
            return Vec::new();
        }
    };
    if let Ok(Some(index)) = kproxy_netlink::links::link_index(kproxy_dataplane::IPVS_INTERFACE).await {
        match kproxy_netlink::links::addresses(index).await {
            Ok(service_addresses) => addresses.retain(|ip| !service_addresses.contains(ip)),
            Err(e) => warn!(error = %e, "cannot list kube-ipvs0's addresses; node ports may be served on them"),
        }
    }
    if mode == Some(ProxyMode::Ipvs) {
        addresses.retain(|ip| match ip {
            IpAddr::V4(v4) => !v4.is_loopback(),
            IpAddr::V6(v6) => !(v6.is_loopback() || v6.is_unicast_link_local()),
        });
    }
    addresses
}
