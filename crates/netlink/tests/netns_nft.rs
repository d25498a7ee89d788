//! The nf_tables applier against a real kernel, in throwaway network
//! namespaces: what it programs is what `nft -f` programs for the same
//! plan, refusals are reported and change nothing, and large batches go
//! through. They need root and fail (never skip) without sandboxes.

mod cases;

use kproxy_model::IpFamily;
use kproxy_netlink::nft::{ApplyError, IntervalSets, apply, encode};
use kproxy_nftables::ast::{Atom, Rule, Stmt};
use kproxy_nftables::{Chain, Element, FamilyPlan, Op, Plan, SetData, SetDef, render};
use kproxy_sandbox::{Netns, available};

fn netns() -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new("nl").expect("a network namespace")
}

/// Applies `plan` in `ns` over netlink.
fn netlink(ns: &Netns, plan: &Plan, sets: &mut IntervalSets) -> Result<(), ApplyError> {
    let encoded = encode(plan, 1, sets);
    let result = ns.enter(|| apply(&encoded));
    if result.is_ok() {
        sets.applied(plan);
    }
    result
}

/// Applies `plan` in `ns` through `nft -f`.
fn nft_f(ns: &Netns, plan: &Plan) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), render::plan(plan)).unwrap();
    ns.exec("nft", &["-f", file.path().to_str().unwrap()]).expect("nft -f takes the rendered plan");
}

/// `nft -j list table` of both families (or the error, for a missing table).
fn listing(ns: &Netns) -> String {
    IpFamily::ALL
        .map(|f| {
            let family = if f == IpFamily::V4 { "ip" } else { "ip6" };
            ns.exec("nft", &["-j", "list", "table", family, "kproxy"]).unwrap_or_else(|e| format!("error: {e}"))
        })
        .join("\n")
}

#[test]
fn netlink_programs_what_nft_f_programs() {
    let mut differ = Vec::new();
    for case in cases::cases() {
        let (ours, theirs) = (netns(), netns());
        let mut sets = IntervalSets::default();
        netlink(&ours, &case.preamble, &mut sets).unwrap_or_else(|e| panic!("{}: preamble: {e}", case.name));
        netlink(&ours, &case.ops, &mut sets).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        nft_f(&theirs, &case.preamble);
        nft_f(&theirs, &case.ops);
        let (got, want) = (listing(&ours), listing(&theirs));
        assert!(want.contains("\"table\""), "{}: nft -f made no table: {want}", case.name);
        if got != want {
            let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
            std::fs::write(dir.join(format!("{}.netlink.json", case.name)), &got).unwrap();
            std::fs::write(dir.join(format!("{}.nft-f.json", case.name)), &want).unwrap();
            differ.push(case.name);
        }
    }
    assert!(differ.is_empty(), "kernel state differs for {differ:?} (see target/tmp/CASE.*.json)");
}

fn v4(ops: Vec<Op>) -> Plan {
    Plan { full: true, families: vec![FamilyPlan { family: Some(IpFamily::V4), ops }] }
}

#[test]
fn a_refused_transaction_names_the_op_and_changes_nothing() {
    let ns = netns();
    let mut sets = IntervalSets::default();
    let set = SetDef {
        name: "addrs".into(),
        key: vec![kproxy_nftables::ast::Field::Daddr],
        data: SetData::None,
        interval: false,
        dynamic_timeout: None,
        comment: "c",
    };
    netlink(&ns, &v4(vec![Op::AddTable, Op::AddChain(Chain::regular("kept", Vec::new()))]), &mut sets).unwrap();
    let before = listing(&ns);

    let bad = v4(vec![
        Op::AddSet(set),
        Op::AddChain(Chain::regular("new", Vec::new())),
        Op::AddRule { chain: "missing".into(), rule: Rule::always(vec![Stmt::Counter]) },
    ]);
    let error = netlink(&ns, &bad, &mut sets).expect_err("a rule in a missing chain is refused");
    let ApplyError::Rejected(errors) = &error else { panic!("not a rejection: {error}") };
    assert_eq!(errors[0].errno, nix::libc::ENOENT, "{error}");
    assert_eq!(errors[0].origin, Some((0, 2)), "the error points at the rule: {error}");
    assert!(error.to_string().contains("No such file or directory"), "{error}");
    assert_eq!(listing(&ns), before, "a refused transaction changed the tables");
    assert!(!sets.contains(IpFamily::V4, "addrs"));
}

#[test]
fn a_large_batch_goes_through_in_one_transaction() {
    let ns = netns();
    let mut sets = IntervalSets::default();
    let set = SetDef {
        name: "big".into(),
        key: kproxy_nftables::ast::frontend_key(),
        data: SetData::Fields(vec![kproxy_nftables::ast::Field::Daddr, kproxy_nftables::ast::Field::Dport]),
        interval: false,
        dynamic_timeout: None,
        comment: "big",
    };
    let n: u32 = 200_000;
    let elements = (0..n)
        .map(|i| Element {
            key: vec![
                Atom::Addr(std::net::Ipv4Addr::from(0x0a00_0000 + i).into()),
                Atom::Proto(kproxy_model::Protocol::Tcp),
                Atom::Port(80),
            ],
            data: Some(kproxy_nftables::ast::Data::Atoms(vec![
                Atom::Addr(std::net::Ipv4Addr::from(0x0b00_0000 + i).into()),
                Atom::Port(8080),
            ])),
        })
        .collect();
    let plan = v4(vec![Op::AddTable, Op::AddSet(set), Op::AddElements { set: "big".into(), elements }]);
    let encoded = encode(&plan, 1, &sets);
    assert!(encoded.bytes.len() > 4 << 20, "the batch is large: {} bytes", encoded.bytes.len());
    netlink(&ns, &plan, &mut sets).unwrap_or_else(|e| panic!("{e}"));
    let listed = ns.exec("nft", &["list", "map", "ip", "kproxy", "big"]).unwrap();
    let count = listed.matches(" . 8080").count();
    assert_eq!(count, n as usize, "every element is in the kernel");
}

#[test]
fn a_rule_with_a_verdict_map_over_64_kib_is_split_and_programs_what_nft_f_does() {
    // Maglev's 4093-slot lookup: the anonymous map's elements do not fit one
    // attribute and go out in several messages.
    let targets: Vec<String> = (0..4093).map(|i| format!("t{}", i % 3)).collect();
    let mut ops = vec![Op::AddTable];
    for t in ["t0", "t1", "t2"] {
        ops.push(Op::AddChain(Chain::regular(t, Vec::new())));
    }
    let pick = Rule::always(vec![Stmt::HashGoto { field: kproxy_nftables::ast::Field::Saddr, targets }]);
    ops.push(Op::AddChain(Chain::regular("pick", Vec::new())));
    ops.push(Op::AddRule { chain: "pick".into(), rule: pick });
    let plan = v4(ops);
    let (ours, theirs) = (netns(), netns());
    netlink(&ours, &plan, &mut IntervalSets::default()).expect("the kernel takes the split map");
    nft_f(&theirs, &plan);
    let ip = |ns: &Netns| ns.exec("nft", &["-j", "list", "table", "ip", "kproxy"]).expect("the table exists");
    let got = ip(&ours);
    assert!(got.contains("\"jhash\"") && got.matches("\"goto\"").count() == 4093, "{got}");
    assert_eq!(got, ip(&theirs));
}
