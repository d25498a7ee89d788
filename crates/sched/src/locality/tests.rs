use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn members(weights: &[u32]) -> Vec<Member> {
    weights.iter().enumerate().map(|(i, &weight)| Member { id: 1000 + i as u64, weight }).collect()
}

fn request(destination: [u8; 4], now: Duration) -> Request {
    Request {
        source: [192, 168, 0, 1].into(),
        source_port: 1,
        destination: destination.into(),
        destination_port: 80,
        now,
    }
}

fn active(counts: &[u32]) -> Vec<Load> {
    counts.iter().map(|&active| Load { active, inactive: 0 }).collect()
}

fn pick(s: &mut dyn Schedule, destination: [u8; 4], now: Duration, load: &[Load]) -> Option<usize> {
    s.pick(&request(destination, now), load, &vec![true; load.len()], &mut Rng::new(0))
}

#[test]
fn lblc_keeps_a_destination_on_its_member_until_it_overloads() {
    let mut lblc = Lblc::new(LocalityOptions::default());
    lblc.update(&members(&[4, 4, 4]));
    // wlc: member 1 is idle.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], Duration::ZERO, &active(&[1, 0, 1])), Some(1));
    // Member 1 is now the busiest but not above its weight: it stays.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], HOUR, &active(&[0, 4, 0])), Some(1));
    // Another destination is scheduled on its own.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 2], HOUR, &active(&[0, 4, 0])), Some(0));
    // Above its weight, but nobody is under half load: it stays.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], HOUR, &active(&[2, 5, 3])), Some(1));
    // Above its weight and member 2 is under half (1 * 2 < 4): moves by wlc.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], HOUR, &active(&[2, 5, 1])), Some(2));
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], HOUR, &active(&[0, 0, 3])), Some(2));
}

#[test]
fn lblc_forgets_a_destination_unused_for_the_expiration() {
    let options = LocalityOptions { expiration: HOUR };
    let mut lblc = Lblc::new(options);
    lblc.update(&members(&[1, 1]));
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], Duration::ZERO, &active(&[0, 1])), Some(0));
    // Used again just before the hour: the clock restarts.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], HOUR - Duration::from_secs(1), &active(&[1, 0])), Some(0));
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], 2 * HOUR - Duration::from_secs(2), &active(&[1, 0])), Some(0));
    // Then a full hour unused: rescheduled, wlc now says member 1.
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], 3 * HOUR, &active(&[1, 0])), Some(1));
}

#[test]
fn lblc_reschedules_when_the_member_is_unusable_or_leaves() {
    let mut lblc = Lblc::new(LocalityOptions::default());
    let all = members(&[1, 1, 1]);
    lblc.update(&all);
    let now = Duration::ZERO;
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], now, &active(&[0, 0, 0])), Some(0));
    let r = request([10, 0, 0, 1], now);
    assert_eq!(lblc.pick(&r, &active(&[0, 0, 0]), &[false, true, true], &mut Rng::new(0)), Some(1));
    // The entry now points at member 1 (id 1001); member 0 leaving moves
    // it to index 0 and keeps it, though busier than the other.
    lblc.update(&all[1..]);
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], now, &active(&[1, 0])), Some(0));
    lblc.update(&all[2..]);
    assert_eq!(pick(&mut lblc, [10, 0, 0, 1], now, &active(&[0])), Some(0));
    assert_eq!(lblc.pick(&r, &active(&[0]), &[false], &mut Rng::new(0)), None);
}

#[test]
fn lblcr_adds_a_replica_when_overloaded_and_uses_the_least_loaded() {
    let mut lblcr = Lblcr::new(LocalityOptions::default());
    lblcr.update(&members(&[2, 2, 2]));
    let d = [10, 0, 0, 9];
    assert_eq!(pick(&mut lblcr, d, Duration::ZERO, &active(&[0, 1, 1])), Some(0));
    // Set {0}; 0 overloaded (3 > 2), member 2 under half: 2 joins.
    assert_eq!(pick(&mut lblcr, d, Duration::ZERO, &active(&[3, 1, 0])), Some(2));
    // Set {2, 0}: the less loaded of the two, never member 1.
    assert_eq!(pick(&mut lblcr, d, Duration::ZERO, &active(&[1, 0, 2])), Some(0));
    assert_eq!(pick(&mut lblcr, d, Duration::ZERO, &active(&[2, 0, 1])), Some(2));
}

#[test]
fn lblcr_drops_the_most_loaded_replica_after_the_expiration() {
    let options = LocalityOptions { expiration: HOUR };
    let mut lblcr = Lblcr::new(options);
    lblcr.update(&members(&[2, 2, 2]));
    let d = [10, 0, 0, 9];
    let t = |s: u64| Duration::from_secs(s);
    assert_eq!(pick(&mut lblcr, d, t(0), &active(&[0, 1, 1])), Some(0));
    assert_eq!(pick(&mut lblcr, d, t(10), &active(&[3, 1, 0])), Some(2));
    // Set {2, 0}, last changed at 10 s; used (unchanged) at 1800 s.
    assert_eq!(pick(&mut lblcr, d, t(1800), &active(&[1, 1, 0])), Some(2));
    // Past the hour since the change, with member 0 the most loaded, this
    // pick still gets the least (2) and 0 leaves the set.
    assert_eq!(pick(&mut lblcr, d, t(3611), &active(&[1, 1, 0])), Some(2));
    // Only 2 is left: even with 0 idle, 2 is kept while not overloaded.
    assert_eq!(pick(&mut lblcr, d, t(3612), &active(&[0, 0, 2])), Some(2));
}

#[test]
fn sweep_drops_expired_entries_and_trims_an_overfull_table() {
    let mut cache: Cache<u64> = Cache::new(HOUR);
    for i in 0..(MAX_ENTRIES as u32 + 10) {
        let key = IpAddr::from(std::net::Ipv4Addr::from(i));
        cache.entries.insert(key, Entry { value: 0, last_use: Duration::from_secs(u64::from(i % 2)) });
    }
    // At 7 minutes nothing expired, but the table is 10 over: IPVS's goal
    // of 10 * 4 / 3 = 13 idle entries go, the oldest (last_use 0) first.
    cache.sweep(Duration::from_secs(7 * 60));
    assert_eq!(cache.entries.len(), MAX_ENTRIES + 10 - 13);
    // No second sweep within the interval, then the hour takes all.
    cache.sweep(Duration::from_secs(7 * 60 + 59));
    assert_eq!(cache.entries.len(), MAX_ENTRIES + 10 - 13);
    cache.sweep(HOUR + Duration::from_secs(1));
    assert!(cache.entries.is_empty());
}
