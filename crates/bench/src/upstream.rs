//! Upstream kube-proxy's nftables layout for the same state, as the `nft -f`
//! text upstream's knftables would send: the baseline kproxy is compared to.
//!
//! One chain per service port (`service-<hash>-<ns>/<name>/<proto>/<port>`)
//! with an anonymous `numgen random mod N vmap`, one chain per endpoint
//! with its DNAT, `external-`/`local-` chains for node ports and
//! load-balancer IPs, and the `service-ips` / `service-nodeports` verdict
//! maps the `services` chain looks frontends up in. IPv4 only (the
//! workload is). Text only: loading it is the caller's business.

use std::fmt::Write;

use kproxy_model::{Endpoint, FrontendKind, Protocol, ProxyState, ServicePort, TrafficPolicy};
use kproxy_nftables::names::stable_id;

/// Upstream's table, family `ip`.
pub const TABLE: &str = "kube-proxy";
/// Upstream's masquerade mark.
const MASQUERADE_MARK: &str = "0x4000";

/// The whole ruleset of a first sync, in one transaction.
pub fn full(state: &ProxyState, cluster_cidr: &str) -> String {
    let mut w = Writer { out: String::new(), cidr: cluster_cidr.to_owned() };
    w.base();
    for port in state.ipv4.service_ports.values() {
        w.port(port, false);
    }
    w.out
}

/// What upstream's partial sync sends when one service port changed:
/// its chains and its endpoints' chains replaced (added, flushed,
/// refilled), its map elements re-added, and the chains of endpoints it no
/// longer has flushed and deleted.
pub fn change(old: &ServicePort, new: &ServicePort, cluster_cidr: &str) -> String {
    let mut w = Writer { out: String::new(), cidr: cluster_cidr.to_owned() };
    w.port(new, true);
    let kept: Vec<String> = endpoints_of(new).map(|e| endpoint_chain(new, e)).collect();
    for chain in endpoints_of(old).map(|e| endpoint_chain(old, e)).filter(|c| !kept.contains(c)) {
        w.line(format_args!("flush chain ip {TABLE} {chain}"));
        w.line(format_args!("delete chain ip {TABLE} {chain}"));
    }
    w.out
}

struct Writer {
    out: String,
    cidr: String,
}

impl Writer {
    fn line(&mut self, text: std::fmt::Arguments<'_>) {
        let _ = self.out.write_fmt(text);
        self.out.push('\n');
    }

    fn rule(&mut self, chain: &str, rule: std::fmt::Arguments<'_>) {
        self.line(format_args!("add rule ip {TABLE} {chain} {rule}"));
    }

    fn chain(&mut self, chain: &str, replace: bool) {
        self.line(format_args!("add chain ip {TABLE} {chain}"));
        if replace {
            self.line(format_args!("flush chain ip {TABLE} {chain}"));
        }
    }

    fn base(&mut self) {
        self.line(format_args!("add table ip {TABLE} {{ comment \"rules for kube-proxy\" ; }}"));
        for chain in ["mark-for-masquerade", "masquerading", "services", "service-endpoints-check", "reject-chain"] {
            self.chain(chain, false);
        }
        for (chain, kind, hook, priority) in [
            ("nat-prerouting", "nat", "prerouting", -100),
            ("nat-output", "nat", "output", -100),
            ("nat-postrouting", "nat", "postrouting", 100),
            ("filter-forward", "filter", "forward", -110),
            ("filter-output", "filter", "output", -110),
        ] {
            self.line(format_args!(
                "add chain ip {TABLE} {chain} {{ type {kind} hook {hook} priority {priority} ; policy accept ; }}"
            ));
        }
        let frontend = "type ipv4_addr . inet_proto . inet_service : verdict";
        self.line(format_args!(
            "add set ip {TABLE} cluster-ips {{ type ipv4_addr ; comment \"Active ClusterIPs\" ; }}"
        ));
        self.line(format_args!("add map ip {TABLE} service-ips {{ {frontend} ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }}"));
        self.line(format_args!(
            "add map ip {TABLE} service-nodeports {{ type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }}"
        ));
        self.line(format_args!("add map ip {TABLE} no-endpoint-services {{ {frontend} ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }}"));
        self.rule("mark-for-masquerade", format_args!("mark set mark or {MASQUERADE_MARK}"));
        self.rule("masquerading", format_args!("mark and {MASQUERADE_MARK} == 0 return"));
        self.rule("masquerading", format_args!("mark set mark xor {MASQUERADE_MARK}"));
        self.rule("masquerading", format_args!("masquerade fully-random"));
        self.rule("reject-chain", format_args!("reject"));
        self.rule("nat-prerouting", format_args!("jump services"));
        self.rule("nat-output", format_args!("jump services"));
        self.rule("nat-postrouting", format_args!("jump masquerading"));
        self.rule("filter-forward", format_args!("ct state new jump service-endpoints-check"));
        self.rule("filter-output", format_args!("ct state new jump service-endpoints-check"));
        self.rule(
            "service-endpoints-check",
            format_args!("ip daddr . meta l4proto . th dport vmap @no-endpoint-services"),
        );
        self.rule("services", format_args!("ip daddr . meta l4proto . th dport vmap @service-ips"));
        self.rule(
            "services",
            format_args!(
                "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"
            ),
        );
    }

    /// One service port's chains, rules and elements; `replace` flushes
    /// chains that may already exist (a partial sync).
    fn port(&mut self, port: &ServicePort, replace: bool) {
        let proto = protocol(port.name.protocol);
        let service = chain_name("service", port);
        let endpoints: Vec<&Endpoint> = endpoints_of(port).collect();
        for e in &endpoints {
            let chain = endpoint_chain(port, e);
            self.chain(&chain, replace);
            self.rule(&chain, format_args!("ip saddr {} jump mark-for-masquerade", e.ip));
            self.rule(&chain, format_args!("meta l4proto {proto} dnat to {}:{}", e.ip, e.port));
        }
        self.chain(&service, replace);
        let cidr = self.cidr.clone();
        for ip in port.cluster_ips() {
            let masquerade =
                format_args!("ip daddr {ip} {proto} dport {} ip saddr != {cidr} jump mark-for-masquerade", port.port);
            self.rule(&service, masquerade);
        }
        self.pick(&service, port, &port.cluster_endpoints);
        let external = port.frontends.iter().any(|f| f.kind.is_external());
        let external_chain = chain_name("external", port);
        if external {
            self.external(port, &external_chain, &service, replace);
        }
        for f in &port.frontends {
            let target = if f.kind == FrontendKind::ClusterIp { &service } else { &external_chain };
            match f.kind {
                FrontendKind::NodePort => self.line(format_args!(
                    "add element ip {TABLE} service-nodeports {{ {proto} . {} : goto {target} }}",
                    f.port
                )),
                _ => self.line(format_args!(
                    "add element ip {TABLE} service-ips {{ {} . {proto} . {} : goto {target} }}",
                    f.ip, f.port
                )),
            }
            if f.kind == FrontendKind::ClusterIp {
                self.line(format_args!("add element ip {TABLE} cluster-ips {{ {} }}", f.ip));
            }
        }
    }

    /// `numgen random mod N vmap { i : goto endpoint-... }`, or a reject.
    fn pick(&mut self, chain: &str, port: &ServicePort, endpoints: &[Endpoint]) {
        if endpoints.is_empty() {
            self.rule(chain, format_args!("reject"));
            return;
        }
        let targets: Vec<String> =
            endpoints.iter().enumerate().map(|(i, e)| format!("{i} : goto {}", endpoint_chain(port, e))).collect();
        self.rule(chain, format_args!("numgen random mod {} vmap {{ {} }}", endpoints.len(), targets.join(" , ")));
    }

    /// The chain node ports and load-balancer IPs go to: masquerade, or
    /// under `externalTrafficPolicy: Local` short-circuit pods and the node
    /// and pick among local endpoints only.
    fn external(&mut self, port: &ServicePort, chain: &str, service: &str, replace: bool) {
        self.chain(chain, replace);
        if port.external_traffic_policy == TrafficPolicy::Cluster {
            self.rule(chain, format_args!("jump mark-for-masquerade"));
            self.rule(chain, format_args!("goto {service}"));
            return;
        }
        let cidr = self.cidr.clone();
        self.rule(chain, format_args!("ip saddr {cidr} goto {service}"));
        self.rule(chain, format_args!("fib saddr type local jump mark-for-masquerade"));
        self.rule(chain, format_args!("fib saddr type local goto {service}"));
        if port.local_endpoints.is_empty() {
            self.rule(chain, format_args!("drop"));
            return;
        }
        // The local chain exists before the rule that jumps to it.
        let local = chain_name("local", port);
        self.chain(&local, replace);
        self.pick(&local, port, &port.local_endpoints);
        self.rule(chain, format_args!("goto {local}"));
    }
}

/// Every endpoint some chain of the port jumps to, once each.
fn endpoints_of(port: &ServicePort) -> impl Iterator<Item = &Endpoint> {
    let locals = port.local_endpoints.iter().filter(|e| !port.cluster_endpoints.contains(e));
    port.cluster_endpoints.iter().chain(locals)
}

fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Tcp => "tcp",
        Protocol::Udp => "udp",
        Protocol::Sctp => "sctp",
    }
}

/// `ns/name/proto/port`, upstream's readable part of chain names.
fn base_name(port: &ServicePort) -> String {
    let n = &port.name;
    format!("{}/{}/{}/{}", n.service.namespace, n.service.name, protocol(n.protocol), n.port)
}

/// `<prefix>-<HASH>-<ns>/<name>/<proto>/<port>`: upstream prefixes a hash
/// so names stay unique after truncation.
fn chain_name(prefix: &str, port: &ServicePort) -> String {
    let base = base_name(port);
    format!("{prefix}-{}-{base}", hash8(&[prefix, &base]))
}

fn endpoint_chain(port: &ServicePort, e: &Endpoint) -> String {
    let base = format!("{}__{}/{}", base_name(port), e.ip, e.port);
    format!("endpoint-{}-{base}", hash8(&["endpoint", &base]))
}

fn hash8(parts: &[&str]) -> String {
    stable_id(parts)[..8].to_uppercase()
}

#[cfg(test)]
mod tests;
