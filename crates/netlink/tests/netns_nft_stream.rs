//! A full plan streamed into a batch of several chunks, against a real
//! kernel in throwaway network namespaces: it is one transaction (a
//! refusal at its end rolls back what its first chunk did), and it
//! programs what `nft -f` programs for the same plan. They need root and
//! fail (never skip) without sandboxes.

mod cases;

use kproxy_model::{Changes, IpFamily};
use kproxy_netlink::nft::{ApplyError, Batch, IntervalSets, Streamer, apply, apply_batch, encode, encode_streamed};
use kproxy_nftables::ast::Field;
use kproxy_nftables::{FamilyPlan, LocalDetector, Op, Plan, SetData, SetDef, plan, plan_streamed, render};
use kproxy_sandbox::{Netns, available};

fn netns() -> Netns {
    if let Err(error) = available() {
        panic!("network-namespace sandboxes are unavailable here: {error}");
    }
    Netns::new("nls").expect("a network namespace")
}

fn listing(ns: &Netns, family: IpFamily) -> String {
    let word = if family == IpFamily::V4 { "ip" } else { "ip6" };
    ns.exec("nft", &["-j", "list", "table", word, "kproxy"]).unwrap_or_else(|e| format!("error: {e}"))
}

/// The cold plan of 3000 services (and every kind of service), streamed,
/// with `extra` ops at the end of its IPv6 part.
fn cold(extra: Vec<Op>) -> (Plan, Batch) {
    let s = cases::large(3000);
    let config = cases::config(LocalDetector::None);
    let mut streamer = Streamer::default();
    let mut planned = plan_streamed(s.state(), &Changes::default(), true, &config, None, &mut streamer);
    planned.plan.families[1].ops.extend(extra);
    let batch = encode_streamed(&planned.plan, 1, &IntervalSets::default(), streamer);
    assert!(batch.chunks.len() > 1, "the batch is in several chunks ({} bytes)", batch.len());
    (planned.plan, batch)
}

#[test]
fn a_chunked_streamed_cold_sync_programs_what_nft_f_programs_for_the_collected_plan() {
    let (ours, theirs) = (netns(), netns());
    let (_, batch) = cold(Vec::new());
    ours.enter(|| apply_batch(&batch)).unwrap_or_else(|e| panic!("{e}"));

    let s = cases::large(3000);
    let collected = plan(s.state(), &Changes::default(), true, &cases::config(LocalDetector::None), None);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), render::plan(&collected.plan)).unwrap();
    theirs.exec("nft", &["-f", file.path().to_str().unwrap()]).expect("nft -f takes the rendered plan");
    for family in IpFamily::ALL {
        let (got, want) = (listing(&ours, family), listing(&theirs, family));
        let last = if family == IpFamily::V4 { "10.97.11.250" } else { "fd00:96::10" };
        assert!(want.contains(last), "{family:?}: nft -f did not program {last}");
        assert!(got == want, "{family:?}: the streamed batch programs something else than nft -f");
    }
}

#[test]
fn a_refusal_at_the_end_of_a_chunked_batch_rolls_back_its_first_chunk_too() {
    let ns = netns();
    // What the kernel holds before: a table of the same name with one set.
    let marker = SetDef {
        name: "marker".into(),
        key: vec![Field::Daddr],
        data: SetData::None,
        interval: false,
        dynamic_timeout: None,
        comment: "there before",
    };
    let before = Plan {
        full: true,
        families: vec![FamilyPlan { family: Some(IpFamily::V4), ops: vec![Op::AddTable, Op::AddSet(marker)] }],
    };
    ns.enter(|| apply(&encode(&before, 1, &IntervalSets::default()))).unwrap_or_else(|e| panic!("{e}"));
    let was = listing(&ns, IpFamily::V4);

    // The cold plan deletes that table in its first messages; its last
    // message (in the last chunk) deletes a chain that does not exist.
    let (plan, batch) = cold(vec![Op::DeleteChain("no-such-chain".into())]);
    let error = ns.enter(|| apply_batch(&batch)).expect_err("the kernel refuses the last message");
    let ApplyError::Rejected(errors) = error else { panic!("not a refusal: {error}") };
    let last = plan.families[1].ops.len() - 1;
    assert_eq!(errors.iter().map(|e| e.origin).collect::<Vec<_>>(), vec![Some((1, last))], "{errors:?}");
    assert_eq!(errors[0].errno, nix::libc::ENOENT);

    assert_eq!(listing(&ns, IpFamily::V4), was, "the table is as it was: nothing of the batch was committed");
    assert!(listing(&ns, IpFamily::V6).starts_with("error"), "no IPv6 table was made");
}
