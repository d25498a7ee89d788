//! Snapshots of the rendered maps and companion table, and the companion
//! table's independence from Services.

mod common;

use common::*;
use kproxy_ebpf::{companion, desired, render};
use kproxy_model::IpFamily;
use kproxy_nftables::ast::{Match, Stmt};
use kproxy_testkit::service;

#[test]
fn a_representative_state_renders_maps_and_companion_table() {
    let mut s = scenario();
    everything(&mut s);
    s.sync();
    let contents = desired(s.state(), &config()).expect("plans").applied.contents();
    let text = render::all(&contents, &companion::tables(s.state(), &config()));
    insta::assert_snapshot!(text);
}

#[test]
fn rendering_is_deterministic() {
    let render_once = || {
        let mut s = scenario();
        everything(&mut s);
        s.sync();
        render::contents(&desired(s.state(), &config()).expect("plans").applied.contents())
    };
    assert_eq!(render_once(), render_once());
}

#[test]
fn the_companion_table_does_not_change_with_services() {
    let mut s = scenario();
    web(&mut s);
    s.sync();
    let before = companion::tables(s.state(), &config());
    s.service(service("default", "other").cluster_ip("10.96.0.77").port("http", "TCP", 80).build());
    s.sync();
    let after = companion::tables(s.state(), &config());
    assert_eq!(before, after);
    for ((_, old), (_, new)) in before.iter().zip(&after) {
        assert!(companion::ops(Some(old), new).is_empty());
    }
}

#[test]
fn the_companion_table_uses_the_configured_marks() {
    let mut config = config();
    config.reject_mark = 0x0100;
    config.masquerade_bit = 3;
    let table = companion::table(&config, &["10.96.0.0/16".parse().unwrap()]);
    let rules: Vec<_> = table.chains.values().flat_map(|c| c.rules.iter()).collect();
    assert!(rules.iter().any(|r| r.matches.contains(&Match::MarkClear(0x0100))));
    assert!(rules.iter().any(|r| r.stmts.contains(&Stmt::MarkXor(0x8))));
    let text = render::companion(&[(IpFamily::V4, table)]);
    assert!(text.contains("kproxy-ebpf"), "{text}");
}
