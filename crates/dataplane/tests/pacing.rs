//! How the runner paces syncs, under paused tokio time: like upstream's
//! bounded-frequency runner (kube-proxy 1.33), a bucket of two syncs
//! refilled one per `minSyncPeriod`. A change finds a token and goes out at
//! once; without one, it waits until `minSyncPeriod` after the previous
//! sync ended.

mod common;

use std::time::Duration;

use common::{Harness, at, config};
use kproxy_dataplane::SyncKind;
use kproxy_state::SourceEvent;

/// The initial sync at 0, then four seconds of quiet: the bucket is full.
async fn quiet_after_start(h: &Harness) {
    h.send(SourceEvent::Synced).await;
    at(5_000).await;
}

#[tokio::test(start_paused = true)]
async fn two_changes_300_ms_apart_each_sync_at_once() {
    let h = Harness::start(config(), &[]);
    quiet_after_start(&h).await;
    h.service("a", "10.96.0.1").await;
    at(300).await;
    h.service("b", "10.96.0.2").await;
    at(1).await;
    let calls = h.calls();
    assert_eq!(h.times(), [0, 5_000, 5_300], "{calls:?}");
    assert!(calls[1..].iter().all(|c| c.kind == SyncKind::Partial && c.changed_ports == 1), "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn a_third_change_waits_until_min_sync_period_after_the_previous_sync() {
    let h = Harness::start(config(), &[]);
    quiet_after_start(&h).await;
    h.service("a", "10.96.0.1").await;
    at(300).await;
    h.service("b", "10.96.0.2").await;
    at(300).await;
    h.service("c", "10.96.0.3").await;
    at(100).await;
    h.service("d", "10.96.0.4").await;
    at(2_000).await;
    let calls = h.calls();
    // c and d, without a token, wait for 5.3 s + 1 s and go out together.
    assert_eq!(h.times(), [0, 5_000, 5_300, 6_300], "{calls:?}");
    assert_eq!(calls[3].changed_ports, 2, "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn the_bucket_refills_one_sync_per_min_sync_period() {
    let h = Harness::start(config(), &[]);
    quiet_after_start(&h).await;
    for (i, wait) in [0, 300, 300].into_iter().enumerate() {
        at(wait).await;
        h.service(&format!("a{i}"), &format!("10.96.0.{}", i + 1)).await;
    }
    // Synced at 5.0 and 5.3 s, the third (5.6 s) waits for 6.3 s. One
    // period later one token is back: one change goes out at once, the
    // next waits.
    at(1_700).await;
    h.service("b0", "10.96.0.10").await;
    at(100).await;
    h.service("b1", "10.96.0.11").await;
    // Two periods of quiet give the whole burst back.
    at(3_000).await;
    h.service("c0", "10.96.0.20").await;
    at(100).await;
    h.service("c1", "10.96.0.21").await;
    at(1).await;
    let calls = h.calls();
    assert_eq!(h.times(), [0, 5_000, 5_300, 6_300, 7_300, 8_300, 10_400, 10_500], "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn a_storm_gets_the_burst_then_one_sync_per_min_sync_period() {
    let h = Harness::start(config(), &[]);
    quiet_after_start(&h).await;
    // A change every 50 ms for 10 s, each to its own service.
    for i in 0..200u32 {
        h.service(&format!("s{i}"), &format!("10.96.1.{}", i + 1)).await;
        at(50).await;
    }
    at(2_000).await;
    let calls = h.calls();
    // The burst, then one sync as each token arrives (a change is always
    // waiting by then): 6 s, 7 s, ..., 15 s.
    let mut expected = vec![0, 5_000, 5_050];
    expected.extend((6..=15).map(|s| 1_000 * s));
    assert_eq!(h.times(), expected, "{calls:?}");
    // At most the burst plus one per period over the 10 s of syncing.
    assert!(calls.len() - 1 <= 2 + 10_000 / 1_000, "{calls:?}");
    assert_eq!(calls.iter().map(|c| c.changed_ports).sum::<usize>(), 200, "every change applied once: {calls:?}");
}

#[tokio::test(start_paused = true)]
async fn changes_during_a_sync_go_out_together_and_the_period_counts_from_its_end() {
    let h = Harness::start_with(config(), &[], Duration::from_millis(200));
    quiet_after_start(&h).await;
    h.service("a", "10.96.0.1").await;
    at(50).await;
    h.service("b", "10.96.0.2").await;
    at(50).await;
    h.service("c", "10.96.0.3").await;
    // The second sync (5.2-5.4 s) used the last token: d waits for 5.4 s + 1 s.
    at(400).await;
    h.service("d", "10.96.0.4").await;
    at(2_000).await;
    let calls = h.calls();
    assert_eq!(h.times(), [0, 5_000, 5_200, 6_400], "{calls:?}");
    let ports: Vec<usize> = calls.iter().map(|c| c.changed_ports).collect();
    assert_eq!(ports, [0, 1, 2, 1], "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn the_initial_sync_leaves_the_whole_burst_for_the_first_changes() {
    let h = Harness::start(config(), &[]);
    h.send(SourceEvent::Synced).await;
    for (i, wait) in [100, 100, 100].into_iter().enumerate() {
        at(wait).await;
        h.service(&format!("a{i}"), &format!("10.96.0.{}", i + 1)).await;
    }
    at(2_000).await;
    let calls = h.calls();
    assert_eq!(h.times(), [0, 100, 200, 1_200], "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn a_periodic_sync_takes_a_token_like_any_other() {
    let h = Harness::start(config(), &[]);
    h.send(SourceEvent::Synced).await;
    at(30_100).await;
    h.service("a", "10.96.0.1").await;
    at(100).await;
    h.service("b", "10.96.0.2").await;
    at(2_000).await;
    let calls = h.calls();
    // The periodic sync at 30 s and a's at 30.1 s empty the bucket.
    assert_eq!(h.times(), [0, 30_000, 30_100, 31_100], "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn network_programming_latency_shows_isolated_changes_applied_at_once() {
    let h = Harness::start(config(), &[]);
    h.service("dns", "10.96.0.53").await;
    h.endpoints("dns", &["10.1.0.1"]).await;
    quiet_after_start(&h).await;
    h.endpoints_triggered_now("dns", &["10.1.0.1", "10.1.0.2"]).await;
    at(300).await;
    h.endpoints_triggered_now("dns", &["10.1.0.2"]).await;
    at(300).await;
    h.endpoints_triggered_now("dns", &["10.1.0.2", "10.1.0.3"]).await;
    at(2_000).await;
    let metrics = h.metrics.encode();
    let family = "kubeproxy_network_programming_duration_seconds";
    // The first two at once, the third 0.7 s later (at 6.3 s).
    for line in [
        format!(r#"{family}_count{{ip_family="IPv4"}} 3"#),
        format!(r#"{family}_sum{{ip_family="IPv4"}} 0.7"#),
        format!(r#"{family}_bucket{{ip_family="IPv4",le="0"}} 2"#),
        format!(r#"{family}_bucket{{ip_family="IPv4",le="0.5"}} 2"#),
    ] {
        assert!(metrics.lines().any(|l| l == line), "no {line:?} in\n{metrics}");
    }
}
