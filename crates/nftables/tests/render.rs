//! Rendered plans, pinned by snapshots.

mod common;

use common::*;
use kproxy_nftables::{plan, render};

#[test]
fn a_first_full_sync_rebuilds_the_tables() {
    let mut s = scenario();
    web(&mut s);
    s.sync();
    let planned = full(s.state(), None);
    insta::assert_snapshot!(render::plan(&planned.plan));
}

#[test]
fn a_partial_sync_touches_only_the_changed_service() {
    let mut s = scenario();
    web(&mut s);
    s.service(kproxy_testkit::service("default", "other").cluster_ip("10.96.0.20").port("p", "UDP", 53).build());
    s.sync();
    let first = full(s.state(), None);
    // web loses its remote endpoint.
    s.slice(
        kproxy_testkit::slice("default", "web-1", "web")
            .port("http", "TCP", 8080)
            .endpoint(kproxy_testkit::EndpointBuilder::new("10.244.1.10").node("node-a"))
            .build(),
    );
    let changes = s.sync();
    let planned = plan(s.state(), &changes, false, &config(), Some(first.applied.clone()));
    assert!(!planned.plan.full);
    let text = render::plan(&planned.plan);
    assert!(!text.contains("10.96.0.20"), "{text}");
    insta::assert_snapshot!(text);
}
