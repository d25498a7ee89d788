//! One service port's rules, following upstream's `syncProxyRules` loop
//! body: the dispatch rules it adds to the shared chains and its own
//! `KUBE-SVC/SVL/EXT/FW/SEP` chains.

use std::net::IpAddr;

use kproxy_model::{Endpoint, FrontendKind, IpNet, ModeSupport, Scheduler, ServicePort, TrafficPolicy, WeightSupport};

use crate::config::{LocalMatch, PlanConfig};
use crate::names::{
    KUBE_EXTERNAL_SERVICES, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL, KUBE_SERVICES, PortChains,
    endpoint_chain, port_name_string, protocol_lower,
};
use crate::payload::Rule;
use crate::ruleset::Ruleset;

/// What every port's rules need besides the port.
pub(crate) struct Context<'a> {
    pub config: &'a PlanConfig,
    pub local: &'a LocalMatch,
    /// This node's addresses of the family (for `loadBalancerSourceRanges`
    /// that include the node itself).
    pub node_ips: &'a [IpAddr],
}

/// Upstream's `computeProbability`: `%0.10f` of `1/n`.
pub fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

/// What upstream's loop body computes about one port before writing rules.
struct Shape<'p> {
    port: &'p ServicePort,
    name: String,
    proto: &'static str,
    chains: PortChains,
    external_local: bool,
    has_endpoints: bool,
    has_internal: bool,
    has_external: bool,
    uses_cluster: bool,
    uses_local: bool,
    uses_ext: bool,
    uses_fw: bool,
    /// The verdict and comment for frontends without usable endpoints:
    /// REJECT when the port has none at all, else DROP (a Local policy
    /// without local endpoints).
    filter_target: &'static str,
    filter_comment: String,
}

impl<'p> Shape<'p> {
    fn new(port: &'p ServicePort) -> Self {
        let name = port_name_string(&port.name);
        let external_accessible = port.frontends.iter().any(|f| f.kind.is_external()) || port.node_port.is_some();
        let internal_local = port.internal_traffic_policy == TrafficPolicy::Local;
        let external_local = port.external_traffic_policy == TrafficPolicy::Local;
        let has_endpoints = !port.cluster_endpoints.is_empty() || !port.local_endpoints.is_empty();
        let has_lb = port.frontends_of(FrontendKind::LoadBalancerIp).next().is_some();
        let (filter_target, filter_comment) = if has_endpoints {
            ("DROP", format!("{name} has no local endpoints"))
        } else {
            ("REJECT", format!("{name} has no endpoints"))
        };
        Self {
            proto: protocol_lower(&port.name),
            chains: PortChains::of(&port.name),
            external_local,
            has_endpoints,
            has_internal: !port.internal_endpoints().is_empty(),
            has_external: !port.external_endpoints().is_empty(),
            // Upstream's UsesClusterEndpoints / UsesLocalEndpoints: the
            // cluster chain also serves an eTP Local service's short-circuit.
            uses_cluster: !port.cluster_endpoints.is_empty() && (!internal_local || external_accessible),
            uses_local: !port.local_endpoints.is_empty() && (internal_local || (external_local && external_accessible)),
            uses_ext: has_endpoints && external_accessible,
            uses_fw: has_endpoints && has_lb && port.load_balancer_source_ranges.is_some(),
            filter_target,
            filter_comment,
            name,
            port,
        }
    }

    fn internal_chain(&self) -> &str {
        if self.port.internal_traffic_policy == TrafficPolicy::Local {
            &self.chains.local
        } else {
            &self.chains.cluster
        }
    }

    /// `-m P -p P -d IP --dport N` after `comment`, in `chain`.
    fn frontend(&self, chain: &str, comment: impl Into<String>, ip: IpAddr, port: u16) -> Rule {
        Rule::new(chain).comment(comment).proto(self.proto).dst(ip).dport(port)
    }

    /// The filter verdict for an external frontend without usable endpoints.
    fn external_filter(&self, ip: IpAddr, port: u16) -> Rule {
        self.frontend(KUBE_EXTERNAL_SERVICES, &self.filter_comment, ip, port).jump(self.filter_target)
    }
}

/// Writes `port`'s rules into `out`. Endpoints are picked at random
/// (upstream's `statistic`), whatever `kproxy.io/scheduler` asks: the state
/// gives another scheduler as the default and says so ([`support`]), and
/// weights do not count here.
pub(crate) fn port_rules(port: &ServicePort, cx: &Context<'_>, out: &mut Ruleset) {
    shared_rules(port, cx, out);
    own_rules(port, cx, out);
}

/// Only `port`'s parts of the fixed chains (KUBE-SERVICES, KUBE-NODEPORTS,
/// ...): what [`port_rules`] writes there, without the endpoint work.
pub(crate) fn shared_rules(port: &ServicePort, cx: &Context<'_>, out: &mut Ruleset) {
    let shape = Shape::new(port);
    dispatch(&shape, cx, out);
    node_ports(&shape, out);
}

/// Only `port`'s own `KUBE-SVC/SVL/EXT/FW/SEP` chains, as [`port_rules`]
/// writes them.
pub(crate) fn own_rules(port: &ServicePort, cx: &Context<'_>, out: &mut Ruleset) {
    own_chains(&Shape::new(port), cx, out);
}

/// What this mode does of kproxy's annotations, for the state: `random`
/// only, no weights, no health checks.
pub fn support() -> ModeSupport {
    ModeSupport {
        mode: "iptables",
        default_scheduler: Scheduler::Random,
        schedulers: vec![Scheduler::Random],
        weights: WeightSupport::Ignored,
        health_checks: false,
    }
}

/// The port's rules in KUBE-SERVICES (nat and filter), KUBE-PROXY-FIREWALL
/// and KUBE-EXTERNAL-SERVICES, for its cluster, external and LB IPs.
fn dispatch(s: &Shape<'_>, cx: &Context<'_>, out: &mut Ruleset) {
    let (port, name) = (s.port, &s.name);
    for ip in port.cluster_ips() {
        if s.has_internal {
            out.nat
                .push(s.frontend(KUBE_SERVICES, format!("{name} cluster IP"), ip, port.port).jump(s.internal_chain()));
        } else {
            out.filter.push(s.frontend(KUBE_SERVICES, &s.filter_comment, ip, port.port).jump(s.filter_target));
        }
    }
    for f in port.frontends_of(FrontendKind::ExternalIp) {
        if s.has_endpoints {
            out.nat
                .push(s.frontend(KUBE_SERVICES, format!("{name} external IP"), f.ip, f.port).jump(&s.chains.external));
        }
        if !s.has_external {
            out.filter.push(s.external_filter(f.ip, f.port));
        }
    }
    let lb_chain = if s.uses_fw { &s.chains.firewall } else { &s.chains.external };
    for f in port.frontends_of(FrontendKind::LoadBalancerIp) {
        if s.has_endpoints {
            out.nat.push(s.frontend(KUBE_SERVICES, format!("{name} loadbalancer IP"), f.ip, f.port).jump(lb_chain));
        }
        if s.uses_fw {
            let comment = format!("{name} traffic not accepted by {}", s.chains.firewall);
            out.filter.push(s.frontend(KUBE_PROXY_FIREWALL, comment, f.ip, f.port).jump("DROP"));
        } else if let (false, Some(ranges)) = (s.has_endpoints, &port.load_balancer_source_ranges) {
            // Without endpoints nothing is DNATed, so KUBE-PROXY-FIREWALL
            // itself tells allowed sources (on to the REJECT) from denied
            // ones (dropped), as SEMANTICS.md asks; upstream rejects both.
            let comment = format!("{name} loadbalancer IP");
            for cidr in ranges {
                out.filter.push(s.frontend(KUBE_PROXY_FIREWALL, &comment, f.ip, f.port).src(cidr).jump("RETURN"));
            }
            if ranges.iter().any(|r| cx.node_ips.iter().any(|ip| r.contains(ip))) {
                out.filter.push(s.frontend(KUBE_PROXY_FIREWALL, &comment, f.ip, f.port).src(f.ip).jump("RETURN"));
            }
            let comment = format!("{name} traffic not accepted by loadBalancerSourceRanges");
            out.filter.push(s.frontend(KUBE_PROXY_FIREWALL, comment, f.ip, f.port).jump("DROP"));
        }
    }
    if !s.has_external {
        for f in port.frontends_of(FrontendKind::LoadBalancerIp) {
            out.filter.push(s.external_filter(f.ip, f.port));
        }
    }
}

/// KUBE-NODEPORTS (nat: the node port; filter: the health-check port) and
/// the node port's filter verdict.
fn node_ports(s: &Shape<'_>, out: &mut Ruleset) {
    if let Some(node_port) = s.port.node_port {
        if s.has_endpoints {
            let rule = Rule::new(KUBE_NODEPORTS).comment(&s.name).proto(s.proto).dport(node_port);
            out.nat.push(rule.jump(&s.chains.external));
        }
        if !s.has_external {
            out.filter.push(
                Rule::new(KUBE_EXTERNAL_SERVICES)
                    .comment(&s.filter_comment)
                    .args(["-m", "addrtype", "--dst-type", "LOCAL"])
                    .proto(s.proto)
                    .dport(node_port)
                    .jump(s.filter_target),
            );
        }
    }
    if let Some(hc) = s.port.health_check_node_port {
        out.filter.push(
            Rule::new(KUBE_NODEPORTS)
                .comment(format!("{} health check node port", s.name))
                .proto("tcp")
                .dport(hc)
                .jump("ACCEPT"),
        );
    }
}

/// The port's `KUBE-SVC/SVL/EXT/FW/SEP` chains.
fn own_chains(s: &Shape<'_>, cx: &Context<'_>, out: &mut Ruleset) {
    let port = s.port;
    if s.has_internal {
        for ip in port.cluster_ips() {
            let masq = s.frontend(s.internal_chain(), format!("{} cluster IP", s.name), ip, port.port);
            if cx.config.masquerade_all {
                out.nat.push(masq.jump(KUBE_MARK_MASQ));
            } else if let Some(not_local) = &cx.local.if_not_local {
                // Off-cluster clients routed to a service IP: the reply must
                // come back through this node.
                out.nat.push(masq.args(not_local.iter().cloned()).jump(KUBE_MARK_MASQ));
            }
        }
    }
    if s.uses_ext {
        external_chain(s, cx, out);
    }
    if s.uses_fw {
        firewall_chain(s, cx, out);
    }
    if s.uses_cluster {
        endpoint_dispatch(s, &s.chains.cluster, &port.cluster_endpoints, out);
    }
    if s.uses_local {
        endpoint_dispatch(s, &s.chains.local, &port.local_endpoints, out);
    }
    let mut reachable: Vec<&Endpoint> = Vec::new();
    if s.uses_cluster {
        reachable.extend(&port.cluster_endpoints);
    }
    if s.uses_local {
        reachable.extend(&port.local_endpoints);
    }
    reachable.sort();
    reachable.dedup_by(|a, b| a.addr() == b.addr());
    for ep in reachable {
        endpoint_chain_rules(s, ep, out);
    }
}

/// `KUBE-EXT-*`: masquerade under Cluster policy; under Local policy, send
/// pods and the node itself to the cluster chain (SEMANTICS.md step 4) and
/// everyone else to the local one.
fn external_chain(s: &Shape<'_>, cx: &Context<'_>, out: &mut Ruleset) {
    let (ext, name) = (&s.chains.external, &s.name);
    out.nat.declare(ext);
    // masqueradeAll is not applied here: it covers cluster IPs only, and
    // never overrides externalTrafficPolicy: Local (SEMANTICS.md, as
    // upstream).
    let masquerade = |comment: String| Rule::new(ext).comment(comment);
    if !s.external_local {
        out.nat.push(masquerade(format!("masquerade traffic for {name} external destinations")).jump(KUBE_MARK_MASQ));
    } else {
        if let (Some(if_local), true) = (&cx.local.if_local, s.uses_cluster) {
            let comment = format!("pod traffic for {name} external destinations");
            out.nat.push(Rule::new(ext).comment(comment).args(if_local.iter().cloned()).jump(&s.chains.cluster));
        }
        // The node's own traffic gets a local source address (the LB IP may
        // be local), so it is masqueraded.
        let local_src = ["-m", "addrtype", "--src-type", "LOCAL"];
        let comment = format!("masquerade LOCAL traffic for {name} external destinations");
        out.nat.push(Rule::new(ext).comment(comment).args(local_src).jump(KUBE_MARK_MASQ));
        if s.uses_cluster {
            let comment = format!("route LOCAL traffic for {name} external destinations");
            out.nat.push(Rule::new(ext).comment(comment).args(local_src).jump(&s.chains.cluster));
        }
    }
    if s.has_external {
        let policy = if s.external_local { &s.chains.local } else { &s.chains.cluster };
        out.nat.push(Rule::new(ext).jump(policy));
    }
}

/// `KUBE-FW-*`: accept listed sources (and the LB IPs themselves when a
/// range holds this node, for VIPs that loop back), fall through otherwise
/// to KUBE-PROXY-FIREWALL's DROP.
fn firewall_chain(s: &Shape<'_>, cx: &Context<'_>, out: &mut Ruleset) {
    let chains = &s.chains;
    let ranges: &[IpNet] = s.port.load_balancer_source_ranges.as_deref().unwrap_or(&[]);
    let base = || Rule::new(&chains.firewall).comment(format!("{} loadbalancer IP", s.name));
    let mut allow_from_node = false;
    for cidr in ranges {
        out.nat.push(base().src(cidr).jump(&chains.external));
        allow_from_node |= cx.node_ips.iter().any(|ip| cidr.contains(ip));
    }
    if allow_from_node {
        for f in s.port.frontends_of(FrontendKind::LoadBalancerIp) {
            out.nat.push(base().src(f.ip).jump(&chains.external));
        }
    }
    let comment = format!("other traffic to {} will be dropped by KUBE-PROXY-FIREWALL", s.name);
    out.nat.push(Rule::new(&chains.firewall).comment(comment));
}

/// Upstream's `writeServiceToEndpointRules`: affinity checks first, then
/// the statistic cascade (`1/n`, `1/(n-1)`, ..., the last unconditional).
fn endpoint_dispatch(s: &Shape<'_>, chain: &str, endpoints: &[Endpoint], out: &mut Ruleset) {
    let (port, name) = (s.port, &s.name);
    if let Some(affinity) = port.session_affinity {
        for ep in endpoints {
            let sep = endpoint_chain(&port.name, ep);
            out.nat.push(
                Rule::new(chain)
                    .comment(format!("{name} -> {}", ep.addr()))
                    .args(["-m", "recent", "--name", &sep, "--rcheck", "--seconds"])
                    .arg(affinity.timeout_seconds.to_string())
                    .arg("--reap")
                    .jump(&sep),
            );
        }
    }
    let n = endpoints.len();
    for (i, ep) in endpoints.iter().enumerate() {
        let mut rule = Rule::new(chain).comment(format!("{name} -> {}", ep.addr()));
        if i + 1 < n {
            rule = rule.args(["-m", "statistic", "--mode", "random", "--probability"]).arg(probability(n - i));
        }
        out.nat.push(rule.jump(&endpoint_chain(&port.name, ep)));
    }
}

/// `KUBE-SEP-*`: hairpin masquerade, affinity bookkeeping, DNAT.
fn endpoint_chain_rules(s: &Shape<'_>, ep: &Endpoint, out: &mut Ruleset) {
    let (port, name, proto) = (s.port, s.name.as_str(), s.proto);
    let sep = endpoint_chain(&port.name, ep);
    out.nat.push(Rule::new(&sep).comment(name).src(ep.ip).jump(KUBE_MARK_MASQ));
    let mut dnat = Rule::new(&sep).comment(name);
    if port.session_affinity.is_some() {
        dnat = dnat.args(["-m", "recent", "--name", &sep, "--set"]);
    }
    out.nat.push(dnat.proto(proto).jump("DNAT").arg("--to-destination").arg(ep.addr().to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_use_upstreams_ten_decimals() {
        assert_eq!(probability(2), "0.5000000000");
        assert_eq!(probability(3), "0.3333333333");
        assert_eq!(probability(7), "0.1428571429");
    }
}
