//! One service port's rules, following upstream's `syncProxyRules` loop
//! body: the dispatch rules it adds to the shared chains and its own
//! `KUBE-SVC/SVL/EXT/FW/SEP` chains.

use std::net::IpAddr;

use kproxy_model::{Endpoint, FrontendKind, IpNet, Scheduler, ServicePort, TrafficPolicy};

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

/// Writes `port`'s rules into `out`; `Err` with the reason when the port
/// cannot be served in iptables mode (nothing is written then).
pub(crate) fn port_rules(port: &ServicePort, cx: &Context<'_>, out: &mut Ruleset) -> Result<(), String> {
    match port.scheduler {
        None | Some(Scheduler::Random) => {}
        Some(other) => {
            return Err(format!(
                "{}: scheduler {other} is not supported in iptables mode (supported: random); not served",
                port.name
            ));
        }
    }
    let name = port_name_string(&port.name);
    let proto = protocol_lower(&port.name);
    let chains = PortChains::of(&port.name);

    let external_accessible = port.frontends.iter().any(|f| f.kind.is_external()) || port.node_port.is_some();
    let internal_local = port.internal_traffic_policy == TrafficPolicy::Local;
    let external_local = port.external_traffic_policy == TrafficPolicy::Local;
    let has_endpoints = !port.cluster_endpoints.is_empty() || !port.local_endpoints.is_empty();
    // Upstream's UsesClusterEndpoints / UsesLocalEndpoints: the cluster
    // chain also serves the short-circuit of an eTP Local service.
    let uses_cluster = !port.cluster_endpoints.is_empty() && (!internal_local || external_accessible);
    let uses_local = !port.local_endpoints.is_empty() && (internal_local || (external_local && external_accessible));
    let has_internal = !port.internal_endpoints().is_empty();
    let has_external = !port.external_endpoints().is_empty();
    let internal_chain = if internal_local { &chains.local } else { &chains.cluster };
    let external_policy_chain = if external_local { &chains.local } else { &chains.cluster };
    let lb_ips: Vec<IpAddr> = port.frontends_of(FrontendKind::LoadBalancerIp).map(|f| f.ip).collect();
    let uses_fw = has_endpoints && !lb_ips.is_empty() && port.load_balancer_source_ranges.is_some();
    let uses_ext = has_endpoints && external_accessible;
    let lb_chain = if uses_fw { &chains.firewall } else { &chains.external };

    let (internal_filter, external_filter) = if has_endpoints {
        (("DROP", format!("{name} has no local endpoints")), ("DROP", format!("{name} has no local endpoints")))
    } else {
        let why = format!("{name} has no endpoints");
        (("REJECT", why.clone()), ("REJECT", why))
    };

    // Dispatch from the shared chains.
    for ip in port.cluster_ips() {
        if has_internal {
            out.nat.push(
                Rule::new(KUBE_SERVICES)
                    .comment(format!("{name} cluster IP"))
                    .proto(proto)
                    .dst(ip)
                    .dport(port.port)
                    .jump(internal_chain),
            );
        } else {
            out.filter.push(
                Rule::new(KUBE_SERVICES)
                    .comment(&internal_filter.1)
                    .proto(proto)
                    .dst(ip)
                    .dport(port.port)
                    .jump(internal_filter.0),
            );
        }
    }
    for f in port.frontends_of(FrontendKind::ExternalIp) {
        if has_endpoints {
            out.nat.push(
                Rule::new(KUBE_SERVICES)
                    .comment(format!("{name} external IP"))
                    .proto(proto)
                    .dst(f.ip)
                    .dport(f.port)
                    .jump(&chains.external),
            );
        }
        if !has_external {
            out.filter.push(
                Rule::new(KUBE_EXTERNAL_SERVICES)
                    .comment(&external_filter.1)
                    .proto(proto)
                    .dst(f.ip)
                    .dport(f.port)
                    .jump(external_filter.0),
            );
        }
    }
    for f in port.frontends_of(FrontendKind::LoadBalancerIp) {
        if has_endpoints {
            out.nat.push(
                Rule::new(KUBE_SERVICES)
                    .comment(format!("{name} loadbalancer IP"))
                    .proto(proto)
                    .dst(f.ip)
                    .dport(f.port)
                    .jump(lb_chain),
            );
        }
        if uses_fw {
            out.filter.push(
                Rule::new(KUBE_PROXY_FIREWALL)
                    .comment(format!("{name} traffic not accepted by {}", chains.firewall))
                    .proto(proto)
                    .dst(f.ip)
                    .dport(f.port)
                    .jump("DROP"),
            );
        }
    }
    if !has_external {
        for f in port.frontends_of(FrontendKind::LoadBalancerIp) {
            out.filter.push(
                Rule::new(KUBE_EXTERNAL_SERVICES)
                    .comment(&external_filter.1)
                    .proto(proto)
                    .dst(f.ip)
                    .dport(f.port)
                    .jump(external_filter.0),
            );
        }
    }
    if let Some(node_port) = port.node_port {
        if has_endpoints {
            out.nat.push(Rule::new(KUBE_NODEPORTS).comment(&name).proto(proto).dport(node_port).jump(&chains.external));
        }
        if !has_external {
            out.filter.push(
                Rule::new(KUBE_EXTERNAL_SERVICES)
                    .comment(&external_filter.1)
                    .args(["-m", "addrtype", "--dst-type", "LOCAL"])
                    .proto(proto)
                    .dport(node_port)
                    .jump(external_filter.0),
            );
        }
    }
    if let Some(hc) = port.health_check_node_port {
        out.filter.push(
            Rule::new(KUBE_NODEPORTS)
                .comment(format!("{name} health check node port"))
                .proto("tcp")
                .dport(hc)
                .jump("ACCEPT"),
        );
    }

    // The port's own chains.
    if has_internal {
        for ip in port.cluster_ips() {
            let masq =
                Rule::new(internal_chain).comment(format!("{name} cluster IP")).proto(proto).dst(ip).dport(port.port);
            if cx.config.masquerade_all {
                out.nat.push(masq.jump(KUBE_MARK_MASQ));
            } else if let Some(not_local) = &cx.local.if_not_local {
                // Off-cluster clients routed to a service IP: the reply must
                // come back through this node.
                out.nat.push(masq.args(not_local.iter().cloned()).jump(KUBE_MARK_MASQ));
            }
        }
    }
    if uses_ext {
        out.nat.declare(&chains.external);
        if !external_local {
            out.nat.push(
                Rule::new(&chains.external)
                    .comment(format!("masquerade traffic for {name} external destinations"))
                    .jump(KUBE_MARK_MASQ),
            );
        } else {
            if let (Some(if_local), true) = (&cx.local.if_local, uses_cluster) {
                out.nat.push(
                    Rule::new(&chains.external)
                        .comment(format!("pod traffic for {name} external destinations"))
                        .args(if_local.iter().cloned())
                        .jump(&chains.cluster),
                );
            }
            out.nat.push(
                Rule::new(&chains.external)
                    .comment(format!("masquerade LOCAL traffic for {name} external destinations"))
                    .args(["-m", "addrtype", "--src-type", "LOCAL"])
                    .jump(KUBE_MARK_MASQ),
            );
            if uses_cluster {
                out.nat.push(
                    Rule::new(&chains.external)
                        .comment(format!("route LOCAL traffic for {name} external destinations"))
                        .args(["-m", "addrtype", "--src-type", "LOCAL"])
                        .jump(&chains.cluster),
                );
            }
        }
        if has_external {
            out.nat.push(Rule::new(&chains.external).jump(external_policy_chain));
        }
    }
    if uses_fw {
        firewall_chain(port, &name, &chains, &lb_ips, cx, out);
    }
    if uses_cluster {
        endpoint_dispatch(port, &name, &chains.cluster, &port.cluster_endpoints, out);
    }
    if uses_local {
        endpoint_dispatch(port, &name, &chains.local, &port.local_endpoints, out);
    }
    let mut reachable: Vec<&Endpoint> = Vec::new();
    if uses_cluster {
        reachable.extend(&port.cluster_endpoints);
    }
    if uses_local {
        reachable.extend(&port.local_endpoints);
    }
    reachable.sort();
    reachable.dedup_by(|a, b| a.addr() == b.addr());
    for ep in reachable {
        endpoint_chain_rules(port, &name, proto, ep, out);
    }
    Ok(())
}

/// `KUBE-FW-*`: accept listed sources (and the LB IPs themselves when a
/// range holds this node, for VIPs that loop back), fall through otherwise
/// to KUBE-PROXY-FIREWALL's DROP.
fn firewall_chain(
    port: &ServicePort,
    name: &str,
    chains: &PortChains,
    lb_ips: &[IpAddr],
    cx: &Context<'_>,
    out: &mut Ruleset,
) {
    let ranges: &[IpNet] = port.load_balancer_source_ranges.as_deref().unwrap_or(&[]);
    let base = || Rule::new(&chains.firewall).comment(format!("{name} loadbalancer IP"));
    let mut allow_from_node = false;
    for cidr in ranges {
        out.nat.push(base().src(cidr).jump(&chains.external));
        allow_from_node |= cx.node_ips.iter().any(|ip| cidr.contains(ip));
    }
    if allow_from_node {
        for ip in lb_ips {
            out.nat.push(base().src(ip).jump(&chains.external));
        }
    }
    out.nat.push(
        Rule::new(&chains.firewall).comment(format!("other traffic to {name} will be dropped by KUBE-PROXY-FIREWALL")),
    );
}

/// Upstream's `writeServiceToEndpointRules`: affinity checks first, then
/// the statistic cascade (`1/n`, `1/(n-1)`, ..., the last unconditional).
fn endpoint_dispatch(port: &ServicePort, name: &str, chain: &str, endpoints: &[Endpoint], out: &mut Ruleset) {
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
fn endpoint_chain_rules(port: &ServicePort, name: &str, proto: &str, ep: &Endpoint, out: &mut Ruleset) {
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
