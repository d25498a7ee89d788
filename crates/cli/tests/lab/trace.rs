//! The tracers of the modes, run on what the lab runs: [`Lab::trace_in`]
//! plans the lab's manifests with the flags kproxy runs with and walks one
//! packet through the mode's plan; [`Lab::assert_kernel_does`] holds the
//! kernel to it, probe by probe.

use std::net::{IpAddr, SocketAddr};

use kproxy_model::{Changes, IpFamily, Protocol};
use kproxy_nftables::trace::{Fate, Packet};
use kproxy_nftables::{LocalDetector, PlanConfig};
use kproxy_sandbox::Netns;
use kproxy_source::manifests::Folder;
use kproxy_state::{NodePortAddresses, StateBuilder, StateConfig};

use super::{CLUSTER_CIDRS, DROP_WAIT, Lab, Outcome, PORT, SERVICE_CIDRS};

impl Lab {
    /// What kproxy's own tracer says about a connection, planned from the
    /// same manifests and flags kproxy runs with.
    pub fn trace(&self, from: IpAddr, to: &str, protocol: Protocol, iif: Option<&str>) -> Vec<Fate> {
        self.trace_in("nftables", from, to, protocol, iif)
    }

    /// [`Lab::trace`] through the plan of `mode` (`nftables`, `iptables`, `ipvs`).
    pub fn trace_in(&self, mode: &str, from: IpAddr, to: &str, protocol: Protocol, iif: Option<&str>) -> Vec<Fate> {
        let to: SocketAddr = to.parse().expect("an address");
        let mut folder = Folder::new(&self.manifests()).expect("the folder");
        let reload = folder.reload().expect("reading the folder");
        let node = &self.topo.node;
        let local_addresses = vec![
            IpAddr::V4(node.ipv4),
            IpAddr::V6(node.ipv6),
            IpAddr::V4(node.addressing.bridge_ipv4),
            IpAddr::V6(node.addressing.bridge_ipv6),
        ];
        // An unset nodePortAddresses: every address in iptables mode, the
        // primary ones in nftables mode (as `kproxy run` resolves it).
        let (node_port_addresses, host_addresses) = match mode {
            "iptables" => (NodePortAddresses::Cidrs(Vec::new()), local_addresses.clone()),
            _ => (NodePortAddresses::Primary, Vec::new()),
        };
        let mut builder = StateBuilder::new(StateConfig {
            node_name: "node-a".into(),
            node_port_addresses,
            host_addresses,
            service_cidrs: SERVICE_CIDRS.split(',').map(|c| c.parse().expect("a CIDR")).collect(),
            endpoint_controller: true,
            ..StateConfig::default()
        });
        reload.events.into_iter().for_each(|e| builder.apply(e));
        let _: Changes = builder.take_changes();
        // What kproxy runs with: a detector unless started without
        // `--cluster-cidr`, `--masquerade-all` if given.
        let local_detector = match self.without_cluster_cidr {
            true => LocalDetector::None,
            false => LocalDetector::Cidrs(CLUSTER_CIDRS.split(',').map(|c| c.parse().expect("a CIDR")).collect()),
        };
        let masquerade_all = self.extra.iter().any(|f| f == "--masquerade-all");
        let config = PlanConfig { local_detector, masquerade_all, ..PlanConfig::default() };
        let family = IpFamily::of(&to.ip());
        let packet = Packet {
            saddr: from,
            daddr: to.ip(),
            protocol,
            dport: to.port(),
            iif: iif.map(str::to_owned),
            local_addresses,
        };
        // One arm per mode's own tracer, walking what that mode plans from
        // the same state.
        match mode {
            "iptables" => {
                let config = kproxy_iptables::PlanConfig {
                    local_detector: config.local_detector,
                    masquerade_all,
                    ..Default::default()
                };
                let planned = kproxy_iptables::plan(builder.state(), family, &config, None);
                kproxy_iptables::trace::trace(&planned, &packet).expect("a traceable plan").fates()
            }
            // The IPVS mode's verdicts come from its companion nftables table.
            "nftables" | "ipvs" => {
                let table = kproxy_nftables::table(builder.state(), family, &config);
                kproxy_nftables::trace::trace(&table, family, &packet).fates()
            }
            // The socket hooks see pods and node-a in the lab's cgroup, hashing
            // their network namespace's cookie; tc sees everyone else.
            "ebpf" => {
                let plan = kproxy_ebpf::PlanConfig {
                    local_detector: config.local_detector,
                    masquerade_all,
                    ..kproxy_ebpf::PlanConfig::default()
                };
                let planned = kproxy_ebpf::desired(builder.state(), &plan).expect("an ebpf plan");
                let origin = match self.source_in_cgroup(from) {
                    true => kproxy_ebpf::trace::Origin::Socket { netns_cookie: self.netns_cookie_of(from) },
                    false => kproxy_ebpf::trace::Origin::Tc { saddr: from },
                };
                let packet = kproxy_ebpf::trace::Packet { origin, daddr: to.ip(), protocol, dport: to.port() };
                let cidrs = &builder.state().family(family).service_cidrs;
                kproxy_ebpf::trace::trace(&planned.applied.contents(), cidrs, &packet).fates()
            }
            other => panic!("the lab has no tracer for the {other} mode"),
        }
    }
}

/// One probe of [`Lab::assert_traces_match_the_kernel`]: from this
/// namespace, with this source address and input interface (`None`: the
/// node itself), to this frontend.
pub type TraceCase<'a> = (&'a Netns, IpAddr, Option<&'a str>, &'a str, Protocol);

impl Lab {
    /// For each case, every endpoint the kernel reached (with masquerade
    /// yes or no) must be exactly what the `mode`'s tracer says; a refusal
    /// must be a traced REJECT, a silence a traced DROP.
    pub fn assert_traces_match_the_kernel(&self, mode: &str, cases: &[TraceCase<'_>]) {
        self.assert_kernel_does(mode, cases, |source, to, protocol, iif| {
            self.trace_in(mode, source, to, protocol, iif)
        });
    }

    /// For each case, every endpoint the kernel reached (with masquerade
    /// yes or no) must be exactly what `trace` says; a refusal must be a
    /// traced REJECT, a silence a traced DROP.
    pub fn assert_kernel_does(
        &self,
        mode: &str,
        cases: &[TraceCase<'_>],
        trace: impl Fn(IpAddr, &str, Protocol, Option<&str>) -> Vec<Fate>,
    ) {
        let node_ip = IpAddr::V4(self.topo.node.ipv4);
        let endpoint_of = |backend: &str, v6: bool| -> SocketAddr {
            let p = self.pod(backend);
            let ip = if v6 { IpAddr::V6(p.ipv6) } else { IpAddr::V4(p.ipv4) };
            SocketAddr::new(ip, PORT)
        };
        for &(ns, source, iif, to, protocol) in cases {
            let mut traced = trace(source, to, protocol, iif);
            let expected_drop = traced == [Fate::Drop];
            let tries = if expected_drop { 1 } else { 30 };
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..tries {
                let dest: SocketAddr = to.parse().expect("an address");
                let result = match expected_drop {
                    true => Outcome::from(kproxy_sandbox::tcp_request(self.place(ns), dest, None, DROP_WAIT)),
                    false => self.request(ns, to, protocol, None),
                };
                seen.insert(match result {
                    Outcome::Answered { backend, peer } => {
                        Fate::Dnat { endpoint: endpoint_of(&backend, dest.is_ipv6()), masquerade: peer != source }
                    }
                    Outcome::Refused => Fate::Reject,
                    Outcome::TimedOut => Fate::Drop,
                    Outcome::Failed(e) => panic!("{to}: {e}"),
                });
            }
            let mut seen: Vec<Fate> = seen.into_iter().collect();
            if source == node_ip {
                // The node masqueraded to its own address looks
                // unmasqueraded from the backend: compare the endpoints only.
                for fate in seen.iter_mut().chain(traced.iter_mut()) {
                    if let Fate::Dnat { masquerade, .. } = fate {
                        *masquerade = false;
                    }
                }
                seen.dedup();
                traced.dedup();
            }
            assert_eq!(
                seen, traced,
                "{mode}: {source} -> {to}/{protocol}: the kernel did {seen:?}, the trace says {traced:?}"
            );
        }
    }
}

impl Lab {
    /// The network namespace cookie of the namespace `source` belongs to
    /// (node-a or one of its pods), as the socket hooks read it.
    pub fn netns_cookie_of(&self, source: IpAddr) -> u64 {
        let node = &self.topo.node;
        let ns = node
            .pods()
            .iter()
            .find(|pod| IpAddr::V4(pod.ipv4) == source || IpAddr::V6(pod.ipv6) == source)
            .map_or(&node.ns, |pod| &pod.ns);
        ns.enter(kproxy_bpf::netns_cookie).expect("the namespace's cookie")
    }
}
