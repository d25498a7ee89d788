//! A full plan streamed into the batch as it is planned: the same bytes
//! as the plan encoded after collecting its elements, kept in bounded
//! chunks.

mod cases;

use kproxy_model::{Changes, IpFamily};
use kproxy_netlink::nft::wire::CHUNK;
use kproxy_netlink::nft::{Batch, IntervalSets, Streamer, encode, encode_streamed};
use kproxy_nftables::{Applied, LocalDetector, Op, Plan, plan, plan_streamed};
use kproxy_testkit::Scenario;

/// The cold (or, with `previous`, in-place) full plan, streamed.
fn streamed(s: &Scenario, previous: Option<Applied>, seq: u32, sets: &IntervalSets) -> (Plan, Batch) {
    let config = cases::config(LocalDetector::None);
    let mut streamer = Streamer::default();
    let planned = plan_streamed(s.state(), &Changes::default(), true, &config, previous, &mut streamer);
    let batch = encode_streamed(&planned.plan, seq, sets, streamer);
    (planned.plan, batch)
}

#[test]
fn a_streamed_full_plan_encodes_to_the_bytes_of_the_collected_plan() {
    for s in [cases::scenario(), cases::large(3000)] {
        let config = cases::config(LocalDetector::None);
        let collected = plan(s.state(), &Changes::default(), true, &config, None);
        let (_, batch) = streamed(&s, None, 7, &IntervalSets::default());
        let want = encode(&collected.plan, 7, &IntervalSets::default());
        assert!(batch.to_bytes() == want.bytes, "cold plan: the streamed batch differs from the collected one");
        assert_eq!(batch.origins.len(), want.origins.len());
        assert_eq!(batch.next_seq(), want.next_seq());

        // In place, after a first sync: flushes, then the same elements.
        let mut sets = IntervalSets::default();
        sets.applied(&collected.plan);
        let again = plan(s.state(), &Changes::default(), true, &config, Some(collected.applied.clone()));
        let (_, batch) = streamed(&s, Some(collected.applied), 100, &sets);
        let want = encode(&again.plan, 100, &sets);
        assert!(batch.to_bytes() == want.bytes, "in-place plan: the streamed batch differs from the collected one");
    }
}

#[test]
fn a_streamed_plan_keeps_each_sets_add_elements_op_empty_and_in_name_order() {
    let (plan, _) = streamed(&cases::scenario(), None, 1, &IntervalSets::default());
    for family_plan in &plan.families {
        let sets: Vec<&str> = family_plan
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::AddElements { set, elements } => {
                    assert!(elements.is_empty(), "{set}: elements in the op of a streamed plan");
                    Some(set.as_str())
                }
                _ => None,
            })
            .collect();
        assert!(sets.contains(&"service-ips") && sets.contains(&"endpoint-0"), "{:?}: {sets:?}", family_plan.family);
        assert!(sets.is_sorted(), "{sets:?}");
    }
}

#[test]
fn a_large_streamed_batch_is_kept_in_bounded_chunks_each_of_whole_messages() {
    let (_, batch) = streamed(&cases::large(3000), None, 1, &IntervalSets::default());
    assert!(batch.chunks.len() > 1, "{} bytes in one chunk", batch.len());
    assert!(batch.chunks.len() < 1024, "sendmsg takes at most 1024 chunks");
    let mut messages = 0;
    for chunk in &batch.chunks {
        assert!(chunk.len() <= CHUNK + (128 << 10), "a chunk of {} bytes", chunk.len());
        messages += kproxy_netlink::nft::parse(chunk).expect("a chunk holds whole messages").len();
    }
    assert_eq!(messages, batch.origins.len(), "every message numbered once");
    let families = batch.origins.iter().flatten().map(|(f, _)| *f).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(families.len(), IpFamily::ALL.len());
}
