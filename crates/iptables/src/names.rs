//! Chain names: upstream kube-proxy's, byte for byte, so operators' tooling
//! (`iptables-save | grep KUBE-SVC-...`, dashboards, runbooks) keeps working.
//!
//! The per-service names hash the service port name the way upstream's
//! `portProtoHash` / `servicePortEndpointChainName` do:
//! `base32(sha256("ns/name:port" + "tcp"))[..16]`, the protocol in lower
//! case, the port name left out (with its colon) for an unnamed port, and for
//! `KUBE-SEP-` the endpoint's `ip:port` (`[ip]:port` for IPv6) appended.

use kproxy_model::{Endpoint, ServicePortName};
use sha2::{Digest, Sha256};

/// nat and filter: per-frontend dispatch.
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
/// nat: node ports; filter: health-check node ports.
pub const KUBE_NODEPORTS: &str = "KUBE-NODEPORTS";
/// nat: masquerade what KUBE-MARK-MASQ marked.
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
/// nat: sets the masquerade mark.
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// filter: REJECT/DROP for external frontends without usable endpoints.
pub const KUBE_EXTERNAL_SERVICES: &str = "KUBE-EXTERNAL-SERVICES";
/// filter: INVALID drop and accepting marked / established forwarded traffic.
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
/// filter: DROP for load-balancer traffic `KUBE-FW-*` did not accept.
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// filter: kubelet's localnet guard, written when localhost node ports are on.
pub const KUBE_FIREWALL: &str = "KUBE-FIREWALL";

/// Prefixes of the per-service nat chains (upstream's `isServiceChainName`).
pub const SERVICE_CHAIN_PREFIXES: [&str; 5] = ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"];

/// Chains only upstream's IPVS mode makes (its `KUBE-SERVICES`,
/// `KUBE-POSTROUTING`, ... share the iptables mode's names); nat's
/// `KUBE-FIREWALL` is old IPVS versions' source-range chain, not kubelet's
/// filter chain of that name.
const IPVS_MODE_CHAINS: [(&str, &str); 6] = [
    ("nat", "KUBE-NODE-PORT"),
    ("nat", "KUBE-LOAD-BALANCER"),
    ("nat", "KUBE-FIREWALL"),
    ("filter", "KUBE-SOURCE-RANGES-FIREWALL"),
    ("filter", "KUBE-IPVS-FILTER"),
    ("filter", "KUBE-IPVS-OUT-FILTER"),
];

/// Chains of upstream's iptables mode (and kproxy's) outside the
/// per-service ones: the dispatch and fixed chains, and the canary.
const IPTABLES_MODE_CHAINS: [(&str, &str); 12] = [
    ("nat", "KUBE-SERVICES"),
    ("nat", "KUBE-NODEPORTS"),
    ("nat", "KUBE-POSTROUTING"),
    ("nat", "KUBE-MARK-MASQ"),
    ("nat", "KUBE-PROXY-CANARY"),
    ("filter", "KUBE-SERVICES"),
    ("filter", "KUBE-EXTERNAL-SERVICES"),
    ("filter", "KUBE-FORWARD"),
    ("filter", "KUBE-NODEPORTS"),
    ("filter", "KUBE-PROXY-FIREWALL"),
    ("filter", "KUBE-PROXY-CANARY"),
    ("mangle", "KUBE-PROXY-CANARY"),
];

/// Per-service chain prefixes any kube-proxy version wrote: today's, and
/// `KUBE-XLB-` (the Local-policy chain before 1.24).
const PROXY_SERVICE_PREFIXES: [&str; 6] = ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-", "KUBE-XLB-"];

/// Whether `chain` in `table` is a service proxy's: one that upstream
/// kube-proxy's iptables or IPVS mode, or kproxy's iptables mode, makes.
/// Never kubelet's chains (`KUBE-FIREWALL` in filter, `KUBE-KUBELET-CANARY`,
/// `KUBE-IPTABLES-HINT`, `KUBE-MARK-DROP`), which the kubelet still uses
/// when the proxy changes.
pub fn is_proxy_chain(table: &str, chain: &str) -> bool {
    IPTABLES_MODE_CHAINS.contains(&(table, chain))
        || is_ipvs_mode_chain(table, chain)
        || (table == "nat" && PROXY_SERVICE_PREFIXES.iter().any(|p| chain.starts_with(p)))
}

/// Whether `chain` in `table` is one only upstream's IPVS mode makes, or a
/// per-service chain no kproxy version writes (`KUBE-XLB-`): stale under
/// the iptables mode too.
pub fn is_ipvs_mode_chain(table: &str, chain: &str) -> bool {
    IPVS_MODE_CHAINS.contains(&(table, chain)) || (table == "nat" && chain.starts_with("KUBE-XLB-"))
}

/// Upstream's `ServicePortName.String()`: `ns/name:port`, or `ns/name` for
/// an unnamed port (the protocol is not part of it).
pub fn port_name_string(name: &ServicePortName) -> String {
    if name.port.is_empty() { name.service.to_string() } else { format!("{}:{}", name.service, name.port) }
}

/// The protocol as upstream feeds it to the hash and to `-p`/`-m`.
pub fn protocol_lower(name: &ServicePortName) -> &'static str {
    match name.protocol {
        kproxy_model::Protocol::Tcp => "tcp",
        kproxy_model::Protocol::Udp => "udp",
        kproxy_model::Protocol::Sctp => "sctp",
    }
}

/// The four per-service-port chain names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortChains {
    /// `KUBE-SVC-`: endpoints for Cluster policy.
    pub cluster: String,
    /// `KUBE-SVL-`: endpoints for Local policy.
    pub local: String,
    /// `KUBE-EXT-`: external frontends (policy and short-circuit).
    pub external: String,
    /// `KUBE-FW-`: `loadBalancerSourceRanges`.
    pub firewall: String,
}

impl PortChains {
    pub fn of(name: &ServicePortName) -> Self {
        let hash = port_proto_hash(&port_name_string(name), protocol_lower(name));
        Self {
            cluster: format!("KUBE-SVC-{hash}"),
            local: format!("KUBE-SVL-{hash}"),
            external: format!("KUBE-EXT-{hash}"),
            firewall: format!("KUBE-FW-{hash}"),
        }
    }
}

/// `KUBE-SEP-` chain of one endpoint of one service port.
pub fn endpoint_chain(name: &ServicePortName, endpoint: &Endpoint) -> String {
    let input = format!("{}{}{}", port_name_string(name), protocol_lower(name), endpoint.addr());
    format!("KUBE-SEP-{}", &base32_sha256(&input)[..16])
}

/// Upstream's `portProtoHash`.
pub fn port_proto_hash(port_name: &str, protocol: &str) -> String {
    base32_sha256(&format!("{port_name}{protocol}"))[..16].to_owned()
}

/// RFC 4648 base32 (standard alphabet, as Go's `base32.StdEncoding`) of the
/// SHA-256 of `input`; callers keep 16 characters, so padding never shows.
fn base32_sha256(input: &str) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(input.as_bytes());
    let mut out = String::with_capacity(56);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in digest {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((buffer >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((buffer << (5 - bits)) & 31) as usize]));
    }
    out
}

/// Is `chain` one of the per-service chains kproxy (or upstream) creates?
pub fn is_service_chain(chain: &str) -> bool {
    SERVICE_CHAIN_PREFIXES.iter().any(|p| chain.starts_with(p))
}

#[cfg(test)]
mod tests {
    use kproxy_model::{Protocol, ServiceName};

    use super::*;

    #[test]
    fn proxy_chains_are_kube_proxys_of_every_mode_and_never_kubelets() {
        for (table, chain) in [
            ("nat", "KUBE-SVC-NPX46M4PTMTKRN6Y"),
            ("nat", "KUBE-XLB-AAAA"),
            ("nat", "KUBE-MARK-MASQ"),
            ("filter", "KUBE-IPVS-FILTER"),
            ("mangle", "KUBE-PROXY-CANARY"),
            ("nat", "KUBE-FIREWALL"),
        ] {
            assert!(is_proxy_chain(table, chain), "{table} {chain}");
        }
        for (table, chain) in [
            ("filter", "KUBE-FIREWALL"),
            ("mangle", "KUBE-KUBELET-CANARY"),
            ("mangle", "KUBE-IPTABLES-HINT"),
            ("nat", "KUBE-MARK-DROP"),
            ("filter", "KUBE-SVC-AAAA"),
            ("nat", "CNI-HOSTPORT-DNAT"),
        ] {
            assert!(!is_proxy_chain(table, chain), "{table} {chain}");
        }
        assert!(is_ipvs_mode_chain("nat", "KUBE-LOAD-BALANCER"));
        assert!(!is_ipvs_mode_chain("nat", "KUBE-SERVICES"), "the iptables mode's too");
    }

    fn name(ns: &str, svc: &str, port: &str) -> ServicePortName {
        ServicePortName::new(ServiceName::new(ns, svc), port, Protocol::Tcp)
    }

    #[test]
    fn chain_names_match_upstream_proxier_test() {
        // pkg/proxy/iptables/proxier_test.go: ns1/svc1:p80 with endpoint
        // 10.180.0.1:80.
        let n = name("ns1", "svc1", "p80");
        assert_eq!(PortChains::of(&n).cluster, "KUBE-SVC-XPGD46QRK7WJZT7O");
        let ep = Endpoint {
            ip: "10.180.0.1".parse().expect("literal"),
            port: 80,
            ready: true,
            serving: true,
            terminating: false,
            local: false,
        };
        assert_eq!(endpoint_chain(&n, &ep), "KUBE-SEP-SXIVWICOYRO3J4NJ");
    }

    #[test]
    fn the_kubernetes_service_has_its_well_known_chain() {
        assert_eq!(PortChains::of(&name("default", "kubernetes", "https")).cluster, "KUBE-SVC-NPX46M4PTMTKRN6Y");
    }

    #[test]
    fn an_unnamed_port_hashes_without_a_colon() {
        assert_eq!(port_name_string(&name("a", "b", "")), "a/b");
        assert_eq!(PortChains::of(&name("a", "b", "")).cluster, format!("KUBE-SVC-{}", port_proto_hash("a/b", "tcp")));
    }
}
