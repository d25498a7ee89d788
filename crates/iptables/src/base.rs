//! The fixed chains every sync writes, and the jump rules from the built-in
//! chains (upstream's `iptablesJumpChains` / `iptablesKubeletJumpChains`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use kproxy_model::{IpFamily, ServiceName, ServicePort};

use crate::config::PlanConfig;
use crate::names::{
    KUBE_EXTERNAL_SERVICES, KUBE_FIREWALL, KUBE_FORWARD, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_POSTROUTING,
    KUBE_PROXY_FIREWALL, KUBE_SERVICES,
};
use crate::payload::{Rule, Table};
use crate::ruleset::Ruleset;

/// The filter chains, declared in upstream's order.
pub const FILTER_CHAINS: [&str; 5] =
    [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL];
/// The nat chains every sync declares.
pub const NAT_CHAINS: [&str; 4] = [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ];

/// A rule in a built-in chain that sends traffic into kproxy's chains.
///
/// `iptables-restore --noflush` cannot add these idempotently (it would
/// append a duplicate each sync, and listing a built-in chain would flush
/// other software's rules), so, as upstream, the applier ensures each one
/// on every full sync with `iptables -t TABLE -C CHAIN ARGS` and, when that
/// fails, `-I CHAIN ARGS` (prepend). Partial syncs skip them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JumpRule {
    pub table: Table,
    /// The built-in chain (`PREROUTING`, `INPUT`, ...).
    pub chain: &'static str,
    /// Arguments after the chain, unquoted (as passed to `iptables`).
    pub args: Vec<String>,
}

/// Upstream's `iptablesJumpChain`: table, built-in chain, target, comment,
/// extra match arguments.
type JumpSpec = (Table, &'static str, &'static str, &'static str, Option<&'static [&'static str]>);

const NEW_ONLY: &[&str] = &["-m", "conntrack", "--ctstate", "NEW"];

/// Every jump rule kproxy ensures (and `kproxy cleanup` deletes), for the
/// given config: kubelet's KUBE-FIREWALL jumps only with localhost node ports.
pub fn jump_rules(config: &PlanConfig, family: IpFamily) -> Vec<JumpRule> {
    let new = Some(NEW_ONLY);
    let spec: [JumpSpec; 13] = [
        (Table::Filter, "INPUT", KUBE_EXTERNAL_SERVICES, "kubernetes externally-visible service portals", new),
        (Table::Filter, "FORWARD", KUBE_EXTERNAL_SERVICES, "kubernetes externally-visible service portals", new),
        // Not upstream's: the node's own connections to an external frontend
        // without endpoints are rejected too (SEMANTICS.md, "Verdicts").
        (Table::Filter, "OUTPUT", KUBE_EXTERNAL_SERVICES, "kubernetes externally-visible service portals", new),
        (Table::Filter, "INPUT", KUBE_NODEPORTS, "kubernetes health check service ports", None),
        (Table::Filter, "FORWARD", KUBE_SERVICES, "kubernetes service portals", new),
        (Table::Filter, "OUTPUT", KUBE_SERVICES, "kubernetes service portals", new),
        (Table::Filter, "FORWARD", KUBE_FORWARD, "kubernetes forwarding rules", None),
        (Table::Filter, "INPUT", KUBE_PROXY_FIREWALL, "kubernetes load balancer firewall", new),
        (Table::Filter, "OUTPUT", KUBE_PROXY_FIREWALL, "kubernetes load balancer firewall", new),
        (Table::Filter, "FORWARD", KUBE_PROXY_FIREWALL, "kubernetes load balancer firewall", new),
        (Table::Nat, "OUTPUT", KUBE_SERVICES, "kubernetes service portals", None),
        (Table::Nat, "PREROUTING", KUBE_SERVICES, "kubernetes service portals", None),
        (Table::Nat, "POSTROUTING", KUBE_POSTROUTING, "kubernetes postrouting rules", None),
    ];
    let mut rules: Vec<JumpRule> = spec
        .into_iter()
        .map(|(table, chain, target, comment, extra)| {
            let mut args: Vec<String> = extra.unwrap_or(&[]).iter().map(|s| (*s).to_owned()).collect();
            args.extend(["-m", "comment", "--comment", comment, "-j", target].map(str::to_owned));
            JumpRule { table, chain, args }
        })
        .collect();
    if localhost_node_ports(config, family) {
        for chain in ["INPUT", "OUTPUT"] {
            rules.push(JumpRule { table: Table::Filter, chain, args: vec!["-j".into(), KUBE_FIREWALL.into()] });
        }
    }
    rules
}

/// Localhost node ports exist only for IPv4 (upstream: they never work on
/// IPv6).
pub(crate) fn localhost_node_ports(config: &PlanConfig, family: IpFamily) -> bool {
    config.localhost_node_ports && family == IpFamily::V4
}

/// The chains before the services' rules: postrouting masquerade, the
/// mark chain, kubelet's localnet guard.
pub(crate) fn head(config: &PlanConfig, family: IpFamily, out: &mut Ruleset) {
    for chain in FILTER_CHAINS {
        out.filter.declare(chain);
    }
    for chain in NAT_CHAINS {
        out.nat.declare(chain);
    }
    let mark = config.mark();
    let masked = format!("{mark}/{mark}");
    out.nat.push(Rule::new(KUBE_POSTROUTING).args(["-m", "mark", "!", "--mark", &masked]).jump("RETURN"));
    // Clear the mark so a packet that traverses the stack again is not
    // masqueraded twice.
    out.nat.push(Rule::new(KUBE_POSTROUTING).jump("MARK").args(["--xor-mark", &mark]));
    out.nat.push(
        Rule::new(KUBE_POSTROUTING)
            .comment("kubernetes service traffic requiring SNAT")
            .jump("MASQUERADE")
            .arg("--random-fully"),
    );
    out.nat.push(Rule::new(KUBE_MARK_MASQ).jump("MARK").args(["--or-mark", &mark]));
    if localhost_node_ports(config, family) {
        // route_localnet opens a hole (upstream #90259): drop packets to
        // 127/8 that do not come from it and were not DNATed by us.
        out.filter.push(
            Rule::new(KUBE_FIREWALL)
                .comment("block incoming localnet connections")
                .dst("127.0.0.0/8")
                .args(["!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT"])
                .jump("DROP"),
        );
    }
}

/// Where node ports answer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NodePortDestinations<'a> {
    /// Every local address (`-m addrtype --dst-type LOCAL`), as upstream
    /// when `nodePortAddresses` matches all of the family's addresses: an
    /// address added to the node later serves too.
    Local,
    /// These addresses, one rule each.
    Listed(&'a [IpAddr]),
}

const NODE_PORTS_COMMENT: &str = "kubernetes service nodeports; NOTE: this must be the last rule in this chain";

/// The rules after the services': the node-port jump (last in
/// KUBE-SERVICES) and KUBE-FORWARD.
pub(crate) fn tail(
    config: &PlanConfig,
    family: IpFamily,
    node_ports: NodePortDestinations<'_>,
    out: &mut Ruleset,
    skips: &mut Vec<String>,
) {
    match node_ports {
        NodePortDestinations::Local => {
            let mut rule =
                Rule::new(KUBE_SERVICES).comment(NODE_PORTS_COMMENT).args(["-m", "addrtype", "--dst-type", "LOCAL"]);
            // Localhost node ports never work over IPv6, and need
            // route_localnet over IPv4.
            if family == IpFamily::V6 {
                rule = rule.args(["!", "-d", "::1/128"]);
            } else if !localhost_node_ports(config, family) {
                rule = rule.args(["!", "-d", "127.0.0.0/8"]);
            }
            out.nat.push(rule.jump(KUBE_NODEPORTS));
        }
        NodePortDestinations::Listed(node_ips) => {
            for ip in node_ips {
                if ip.is_loopback() && !localhost_node_ports(config, family) {
                    skips.push(format!("node port address {ip}: localhost node ports are off (or IPv6); not served"));
                    continue;
                }
                out.nat.push(Rule::new(KUBE_SERVICES).comment(NODE_PORTS_COMMENT).dst(ip).jump(KUBE_NODEPORTS));
            }
        }
    }
    if config.drop_invalid {
        // Upstream #74839: an INVALID packet would otherwise reach the pod
        // un-NATed and reset the connection.
        out.filter.push(Rule::new(KUBE_FORWARD).args(["-m", "conntrack", "--ctstate", "INVALID"]).jump("DROP"));
    }
    let mark = config.mark();
    out.filter.push(
        Rule::new(KUBE_FORWARD)
            .comment("kubernetes forwarding rules")
            .args(["-m", "mark", "--mark", &format!("{mark}/{mark}")])
            .jump("ACCEPT"),
    );
    out.filter.push(
        Rule::new(KUBE_FORWARD)
            .comment("kubernetes forwarding conntrack rule")
            .args(["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"])
            .jump("ACCEPT"),
    );
}

/// The end of filter KUBE-SERVICES: a NEW connection still addressed to a
/// cluster IP there was not DNATed, so the port is one the service does not
/// serve: REJECT (SEMANTICS.md, "Verdicts"; upstream routes it on). Ports
/// without (local) endpoints got their own verdict earlier in the chain.
pub(crate) fn unserved<'a>(ports: impl Iterator<Item = &'a ServicePort>, out: &mut Ruleset) {
    let mut owners: BTreeMap<IpAddr, &ServiceName> = BTreeMap::new();
    for port in ports {
        for ip in port.cluster_ips() {
            owners.entry(ip).or_insert(&port.name.service);
        }
    }
    for (ip, service) in owners {
        out.filter.push(
            Rule::new(KUBE_SERVICES).comment(format!("{service} cluster IP: unserved port")).dst(ip).jump("REJECT"),
        );
    }
}
