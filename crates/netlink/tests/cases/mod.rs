//! The cases the nf_tables encoder is checked with: operations, and the
//! `nft -f` text they render to (`testdata/nft/CASE.nft`, captured into
//! `CASE.hex` by `testdata/capture.py`).

#![allow(dead_code)]

use std::net::SocketAddr;

use kproxy_model::{Changes, IpFamily, IpNet, Protocol};
use kproxy_nftables::ast::{Atom, CtState, Data, Field, Match, Rule, Stmt, Verdict, frontend_key};
use kproxy_nftables::{
    Applied, BaseChain, Chain, ChainType, Element, FamilyPlan, Hook, LocalDetector, Op, Plan, PlanConfig, SetData,
    SetDef, plan, render,
};
use kproxy_state::StateConfig;
use kproxy_testkit::{EndpointBuilder as Ep, Scenario, node, service, slice};

/// Operations per family, as one transaction.
pub struct Case {
    pub name: &'static str,
    /// Applied first, in its own transaction (not captured).
    pub preamble: Plan,
    pub ops: Plan,
}

impl Case {
    /// The case file: the preamble, `#capture`, the captured commands.
    pub fn text(&self) -> String {
        format!("{}#capture\n{}", render::plan(&self.preamble), render::plan(&self.ops))
    }
}

fn family_plan(family: IpFamily, ops: Vec<Op>) -> FamilyPlan {
    FamilyPlan { family: Some(family), ops }
}

fn both(ops: impl Fn(IpFamily) -> Vec<Op>) -> Plan {
    Plan { full: true, families: IpFamily::ALL.into_iter().map(|f| family_plan(f, ops(f))).collect() }
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn addr(family: IpFamily, v4: &str, v6: &str) -> std::net::IpAddr {
    match family {
        IpFamily::V4 => v4.parse().unwrap(),
        IpFamily::V6 => v6.parse().unwrap(),
    }
}

fn set(name: &str, key: Vec<Field>, data: SetData) -> SetDef {
    SetDef { name: name.into(), key, data, interval: false, dynamic_timeout: None, comment: "a comment" }
}

/// One of each kind of set kproxy makes.
fn sets() -> Vec<SetDef> {
    vec![
        set("verdicts", frontend_key(), SetData::Verdict),
        set("endpoints", frontend_key(), SetData::Fields(vec![Field::Daddr, Field::Dport])),
        set("frontends", frontend_key(), SetData::None),
        SetDef {
            interval: true,
            ..set("ranges", vec![Field::Daddr, Field::L4proto, Field::Dport, Field::Saddr], SetData::None)
        },
        set("addrs", vec![Field::Daddr], SetData::None),
        SetDef { interval: true, ..set("nets", vec![Field::Daddr], SetData::None) },
        set("pairs", vec![Field::Saddr, Field::Daddr], SetData::None),
        SetDef { dynamic_timeout: Some(10800), ..set("sticky", vec![Field::Saddr], SetData::None) },
    ]
}

fn base_chain(name: &str, kind: ChainType, hook: Hook, priority: i32) -> Chain {
    Chain { name: name.into(), base: Some(BaseChain { kind, hook, priority }), rules: Vec::new() }
}

/// Every match and statement the planner can emit, in rules.
fn rules(family: IpFamily) -> Vec<Rule> {
    let ip = |v4: &str, v6: &str| addr(family, v4, v6);
    let nets = |v4: &[&str], v6: &[&str]| -> Vec<IpNet> {
        match family {
            IpFamily::V4 => v4.iter().map(|s| net(s)).collect(),
            IpFamily::V6 => v6.iter().map(|s| net(s)).collect(),
        }
    };
    let goto = |c: &str| Stmt::Verdict(Verdict::Goto(c.into()));
    vec![
        Rule::new(vec![Match::CtState(CtState::New)], vec![Stmt::Verdict(Verdict::Jump("target".into()))]),
        Rule::new(vec![Match::CtState(CtState::Invalid)], vec![Stmt::Verdict(Verdict::Drop)]),
        Rule::new(
            vec![Match::InSet { key: frontend_key(), set: "frontends".into(), negate: false }],
            vec![Stmt::Verdict(Verdict::Accept)],
        ),
        Rule::new(
            vec![Match::InSet {
                key: vec![Field::Daddr, Field::L4proto, Field::Dport, Field::Saddr],
                set: "ranges".into(),
                negate: true,
            }],
            vec![Stmt::Verdict(Verdict::Drop)],
        ),
        Rule::new(
            vec![Match::InSet { key: vec![Field::Daddr], set: "addrs".into(), negate: false }],
            vec![goto("target")],
        ),
        Rule::new(
            vec![Match::InSet { key: vec![Field::Daddr], set: "nets".into(), negate: false }],
            vec![Stmt::Verdict(Verdict::Drop)],
        ),
        Rule::new(
            vec![Match::InSet { key: vec![Field::Saddr, Field::Daddr], set: "pairs".into(), negate: false }],
            vec![Stmt::Masquerade],
        ),
        Rule::new(
            vec![Match::SaddrIn { nets: nets(&["10.244.0.0/16"], &["fd00:10:244::/48"]), negate: true }],
            vec![Stmt::Verdict(Verdict::Jump("target".into()))],
        )
        .comment("one network"),
        Rule::new(
            vec![Match::SaddrIn { nets: nets(&["10.244.16.0/20"], &["fd00:10:244::/52"]), negate: false }],
            vec![Stmt::Verdict(Verdict::Return)],
        ),
        Rule::new(
            vec![Match::SaddrIn { nets: nets(&["10.244.1.7/32"], &["fd00::7/128"]), negate: false }],
            vec![Stmt::Verdict(Verdict::Return)],
        ),
        Rule::new(
            vec![Match::SaddrIn {
                nets: nets(&["10.0.0.0/8", "192.168.0.0/16"], &["fd00:1::/64", "fd00:2::/64"]),
                negate: false,
            }],
            vec![Stmt::Verdict(Verdict::Accept)],
        ),
        Rule::new(
            vec![Match::SaddrIn {
                nets: nets(&["10.0.0.0/8", "172.16.0.0/12"], &["fd00:1::/64", "fd00:3::/64"]),
                negate: true,
            }],
            vec![Stmt::Verdict(Verdict::Accept)],
        ),
        Rule::new(
            vec![Match::Iifname { pattern: "kpbr0".into(), negate: false }],
            vec![Stmt::Verdict(Verdict::Return)],
        ),
        Rule::new(
            vec![Match::Iifname { pattern: "veth*".into(), negate: true }],
            vec![Stmt::Counter, Stmt::Verdict(Verdict::Drop)],
        ),
        Rule::new(vec![Match::FibSaddrLocal], vec![Stmt::Verdict(Verdict::Return)]),
        Rule::new(vec![Match::MarkClear(0x4000)], vec![Stmt::Verdict(Verdict::Return)]),
        Rule::new(vec![Match::L4proto(Protocol::Tcp)], vec![Stmt::RejectTcpReset]),
        Rule::new(vec![Match::L4proto(Protocol::Sctp)], vec![Stmt::Verdict(Verdict::Drop)]),
        Rule::always(vec![Stmt::Reject]),
        Rule::always(vec![Stmt::Vmap { key: frontend_key(), map: "verdicts".into() }]),
        Rule::always(vec![Stmt::NumgenGoto { inc: false, targets: vec!["target".into(), "other".into()] }]),
        Rule::always(vec![Stmt::NumgenGoto {
            inc: true,
            targets: vec!["target".into(), "other".into(), "target".into()],
        }]),
        Rule::always(vec![Stmt::HashGoto { field: Field::Saddr, targets: vec!["target".into(), "other".into()] }]),
        Rule::always(vec![Stmt::HashGoto { field: Field::Daddr, targets: vec!["other".into()] }]),
        Rule::always(vec![Stmt::MarkOr(0x4000)]),
        Rule::always(vec![Stmt::MarkXor(0x4000)]),
        Rule::always(vec![Stmt::MarkSet(0x4b50_0123), Stmt::Verdict(Verdict::Accept)]),
        Rule::new(vec![Match::L4protoHasPorts], vec![Stmt::DnatMap { key: frontend_key(), map: "endpoints".into() }]),
        Rule::new(
            vec![Match::L4protoHasPorts],
            vec![
                Stmt::UpdateSaddr { set: "sticky".into() },
                Stmt::Dnat(SocketAddr::new(ip("10.244.1.5", "fd00:10:244:1::5"), 8080)),
            ],
        ),
        Rule::new(
            vec![Match::InSet { key: vec![Field::Saddr], set: "sticky".into(), negate: false }],
            vec![goto("other")],
        )
        .comment("clients pinned to one endpoint"),
    ]
}

/// Elements of every shape.
fn elements(family: IpFamily) -> Vec<Op> {
    let ip = |v4: &str, v6: &str| Atom::Addr(addr(family, v4, v6));
    let nt = |v4: &str, v6: &str| {
        Atom::Net(match family {
            IpFamily::V4 => net(v4),
            IpFamily::V6 => net(v6),
        })
    };
    let frontend = |a: Atom, port: u16| vec![a, Atom::Proto(Protocol::Tcp), Atom::Port(port)];
    let svc = ip("10.96.0.10", "fd00:96::10");
    let udp = vec![ip("10.96.0.11", "fd00:96::11"), Atom::Proto(Protocol::Udp), Atom::Port(53)];
    let sctp = vec![ip("10.96.0.12", "fd00:96::12"), Atom::Proto(Protocol::Sctp), Atom::Port(9999)];
    let el = |key: Vec<Atom>, data: Option<Data>| Element { key, data };
    vec![
        Op::AddElements {
            set: "verdicts".into(),
            elements: vec![
                el(frontend(svc, 80), Some(Data::Verdict(Verdict::Goto("target".into())))),
                el(udp.clone(), Some(Data::Verdict(Verdict::Jump("other".into())))),
                el(sctp.clone(), Some(Data::Verdict(Verdict::Drop))),
            ],
        },
        Op::AddElements {
            set: "endpoints".into(),
            elements: vec![
                el(
                    frontend(svc, 80),
                    Some(Data::Atoms(vec![ip("10.244.1.10", "fd00:10:244:1::10"), Atom::Port(8080)])),
                ),
                el(udp.clone(), Some(Data::Atoms(vec![ip("10.244.2.10", "fd00:10:244:2::10"), Atom::Port(5353)]))),
            ],
        },
        Op::AddElements { set: "frontends".into(), elements: vec![el(frontend(svc, 443), None)] },
        Op::AddElements {
            set: "ranges".into(),
            elements: vec![
                el([frontend(svc, 443), vec![nt("203.0.113.0/24", "2001:db8:1::/48")]].concat(), None),
                el([frontend(svc, 443), vec![nt("198.51.100.7/32", "2001:db8:2::7/128")]].concat(), None),
            ],
        },
        Op::AddElements {
            set: "addrs".into(),
            elements: vec![el(vec![svc], None), el(vec![ip("10.96.0.11", "fd00:96::11")], None)],
        },
        Op::AddElements {
            set: "nets".into(),
            elements: vec![
                el(vec![nt("10.100.0.0/16", "fd00:100::/64")], None),
                el(vec![nt("10.96.0.0/16", "fd00:96::/108")], None),
            ],
        },
        Op::AddElements {
            set: "pairs".into(),
            elements: vec![el(vec![ip("10.244.1.10", "fd00::10"), ip("10.244.1.10", "fd00::10")], None)],
        },
        Op::DeleteElements { set: "endpoints".into(), keys: vec![udp] },
        Op::DeleteElements { set: "verdicts".into(), keys: vec![sctp, frontend(svc, 80)] },
        Op::DeleteElements { set: "nets".into(), keys: vec![vec![nt("10.100.0.0/16", "fd00:100::/64")]] },
    ]
}

fn objects(_: IpFamily) -> Vec<Op> {
    let mut ops = vec![Op::AddTable];
    ops.extend(sets().into_iter().map(Op::AddSet));
    ops.extend(["target", "other"].map(|c| Op::AddChain(Chain::regular(c, Vec::new()))));
    ops
}

/// A small cluster, dual-stack, with every kind of service kproxy serves.
pub fn scenario() -> Scenario {
    let mut s = Scenario::new(StateConfig { node_name: "node-a".into(), ..StateConfig::default() });
    s.node(node("node-a").address("InternalIP", "192.168.77.1").build());
    s.service(
        service("default", "web")
            .type_("NodePort")
            .cluster_ips(&["10.96.0.10", "fd00:96::10"])
            .port("http", "TCP", 80)
            .node_port(30080)
            .build(),
    );
    s.slice(
        slice("default", "web-v4", "web")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.10").node("node-a"))
            .endpoint(Ep::new("10.244.2.10").node("node-b"))
            .build(),
    );
    s.slice(
        slice("default", "web-v6", "web")
            .address_type("IPv6")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("fd00:10:244:1::10").node("node-a"))
            .build(),
    );
    s.service(
        service("default", "sticky")
            .cluster_ip("10.96.0.20")
            .port("dns", "UDP", 53)
            .session_affinity("ClientIP", Some(600))
            .build(),
    );
    s.slice(
        slice("default", "sticky-1", "sticky")
            .port("dns", "UDP", 5353)
            .endpoint(Ep::new("10.244.1.20"))
            .endpoint(Ep::new("10.244.2.20"))
            .build(),
    );
    let mut rr = service("default", "rr").cluster_ip("10.96.0.30").port("", "SCTP", 9999).build();
    rr.metadata.annotations = Some([("kproxy.io/scheduler".to_owned(), "rr".to_owned())].into());
    s.service(rr);
    s.slice(
        slice("default", "rr-1", "rr")
            .port("", "SCTP", 9999)
            .endpoint(Ep::new("10.244.1.30"))
            .endpoint(Ep::new("10.244.2.30"))
            .endpoint(Ep::new("10.244.3.30"))
            .build(),
    );
    s.service(
        service("default", "lb")
            .type_("LoadBalancer")
            .cluster_ip("10.96.0.40")
            .port("https", "TCP", 443)
            .node_port(30443)
            .load_balancer_ingress("203.0.113.40", None)
            .source_ranges(&["198.51.100.0/24"])
            .external_traffic_policy("Local")
            .health_check_node_port(32000)
            .external_ips(&["192.0.2.40"])
            .build(),
    );
    s.slice(
        slice("default", "lb-1", "lb")
            .port("https", "TCP", 8443)
            .endpoint(Ep::new("10.244.1.40").node("node-a"))
            .endpoint(Ep::new("10.244.2.40").node("node-b"))
            .build(),
    );
    s.service(service("default", "empty").cluster_ip("10.96.0.50").port("", "TCP", 81).build());
    let mut hashed = service("default", "hashed")
        .type_("NodePort")
        .cluster_ip("10.96.0.60")
        .port("http", "TCP", 80)
        .node_port(30060)
        .external_traffic_policy("Local")
        .build();
    hashed.metadata.annotations = Some([("kproxy.io/scheduler".to_owned(), "sh".to_owned())].into());
    s.service(hashed);
    s.slice(
        slice("default", "hashed-1", "hashed")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.1.60").node("node-a"))
            .endpoint(Ep::new("10.244.2.60").node("node-b"))
            .build(),
    );
    s.sync();
    s
}

/// `services` ClusterIP services of ten endpoints each, a third of them
/// node ports, on top of the cases' scenario (every kind of service).
pub fn large(services: u32) -> Scenario {
    let mut s = scenario();
    for i in 0..services {
        let name = format!("svc-{i}");
        let ip = format!("10.97.{}.{}", i / 250, i % 250 + 1);
        let mut svc = service("bulk", &name).cluster_ip(&ip).port("http", "TCP", 80);
        if i % 3 == 0 {
            svc = svc.type_("NodePort").node_port(30000 + (i % 2000) as i32);
        }
        s.service(svc.build());
        let mut sl = slice("bulk", &format!("{name}-1"), &name).port("http", "TCP", 8080);
        for e in 0..10 {
            let node = if e % 2 == 0 { "node-a" } else { "node-b" };
            sl = sl.endpoint(Ep::new(&format!("10.{}.{}.{}", 128 + i / 250, i % 250, e + 1)).node(node));
        }
        s.slice(sl.build());
    }
    s.sync();
    s
}

pub fn config(detector: LocalDetector) -> PlanConfig {
    PlanConfig { local_detector: detector, ..PlanConfig::default() }
}

fn full(s: &Scenario, config: &PlanConfig, previous: Option<&Applied>) -> (Plan, Applied) {
    let planned = plan(s.state(), &Changes::default(), true, config, previous.cloned());
    (planned.plan, planned.applied)
}

pub fn cases() -> Vec<Case> {
    let empty = Plan::default();
    let mut out = vec![
        Case {
            name: "table",
            preamble: empty.clone(),
            ops: both(|_| vec![Op::AddTable, Op::DeleteTable, Op::AddTable]),
        },
        Case {
            name: "sets",
            preamble: both(|_| vec![Op::AddTable]),
            ops: both(|_| sets().into_iter().map(Op::AddSet).collect()),
        },
        Case {
            name: "chains",
            preamble: both(|_| vec![Op::AddTable]),
            ops: both(|_| {
                vec![
                    Op::AddChain(Chain::regular("plain", Vec::new())),
                    Op::AddChain(base_chain("nat-prerouting", ChainType::Nat, Hook::Prerouting, -100)),
                    Op::AddChain(base_chain("nat-output", ChainType::Nat, Hook::Output, -100)),
                    Op::AddChain(base_chain("nat-postrouting", ChainType::Nat, Hook::Postrouting, 100)),
                    Op::AddChain(base_chain("filter-input", ChainType::Filter, Hook::Input, -110)),
                    Op::AddChain(base_chain("filter-forward", ChainType::Filter, Hook::Forward, -110)),
                    Op::AddChain(base_chain("filter-prerouting", ChainType::Filter, Hook::Prerouting, -110)),
                    Op::AddChain(base_chain("filter-output", ChainType::Filter, Hook::Output, 0)),
                ]
            }),
        },
        Case {
            name: "rules",
            preamble: both(objects),
            ops: both(|f| {
                let mut ops = vec![Op::AddChain(Chain::regular("rules", Vec::new()))];
                ops.extend(rules(f).into_iter().map(|rule| Op::AddRule { chain: "rules".into(), rule }));
                ops
            }),
        },
        Case { name: "elements", preamble: both(objects), ops: both(elements) },
        Case {
            name: "flush-delete",
            preamble: both(|f| {
                let mut ops = objects(f);
                ops.push(Op::AddRule { chain: "target".into(), rule: Rule::always(vec![Stmt::Counter]) });
                ops.push(Op::AddChain(Chain::regular("unused", Vec::new())));
                ops
            }),
            ops: both(|_| {
                let sticky = sets().into_iter().find(|s| s.name == "sticky").unwrap();
                let vmap = sets().into_iter().find(|s| s.name == "verdicts").unwrap();
                vec![
                    Op::FlushChain("target".into()),
                    Op::FlushSet(vmap),
                    Op::DeleteSet(sticky),
                    Op::DeleteChain("unused".into()),
                ]
            }),
        },
        // Removing another proxy's chain: the jump to it goes by its handle
        // (the table numbers chains and rules from 1 in creation order, so
        // the jump is handle 5), then the chain is flushed and deleted.
        Case {
            name: "delete-rule",
            preamble: both(|_| {
                vec![
                    Op::AddTable,
                    Op::AddChain(base_chain("input", ChainType::Filter, Hook::Input, 0)),
                    Op::AddChain(Chain::regular("target", Vec::new())),
                    Op::AddRule { chain: "target".into(), rule: Rule::always(vec![Stmt::Counter]) },
                    Op::AddRule { chain: "input".into(), rule: Rule::always(vec![Stmt::Counter]) },
                    Op::AddRule {
                        chain: "input".into(),
                        rule: Rule::always(vec![Stmt::Verdict(Verdict::Jump("target".into()))]),
                    },
                ]
            }),
            ops: both(|_| {
                vec![
                    Op::DeleteRule { chain: "input".into(), handle: 5 },
                    Op::FlushChain("target".into()),
                    Op::DeleteChain("target".into()),
                ]
            }),
        },
    ];

    // The planner's own plans: a cold start, a resync, a partial sync.
    let s = scenario();
    let cidrs = LocalDetector::Cidrs(vec![net("10.244.0.0/16"), net("fd00:10:244::/48")]);
    let (cold, applied) = full(&s, &config(cidrs.clone()), None);
    let (resync, _) = full(&s, &config(cidrs.clone()), Some(&applied));
    out.push(Case { name: "plan-cold", preamble: empty.clone(), ops: cold.clone() });
    out.push(Case { name: "plan-resync", preamble: cold.clone(), ops: resync });
    let mut changed = scenario();
    changed.delete(kproxy_state::Kind::Service, "default", "sticky");
    changed.slice(
        slice("default", "web-v4", "web")
            .port("http", "TCP", 8080)
            .endpoint(Ep::new("10.244.2.10").node("node-b"))
            .endpoint(Ep::new("10.244.3.10").node("node-c"))
            .build(),
    );
    let changes = changed.sync();
    let partial = plan(changed.state(), &changes, false, &config(cidrs), Some(applied)).plan;
    assert!(!partial.full, "the partial case must be a partial plan");
    out.push(Case { name: "plan-partial", preamble: cold, ops: partial });
    for (name, detector) in [
        ("plan-bridge", LocalDetector::Interface("cbr0".into())),
        ("plan-prefix", LocalDetector::InterfacePrefix("veth".into())),
    ] {
        let (ops, _) = full(&s, &config(detector), None);
        out.push(Case { name, preamble: empty.clone(), ops });
    }
    out
}
