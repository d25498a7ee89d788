//! Properties every scheduler and table keeps, over random members,
//! weights, usable masks, loads and requests.

use std::net::IpAddr;
use std::time::Duration;

use kproxy_model::Scheduler;
use kproxy_sched::{
    BUCKETS, HashOptions, Hashing, Load, MAGLEV_SIZE, Member, Mh, Request, Rng, Schedule, hash_bucket, hash_buckets,
    maglev_slot, maglev_table, member_id, scheduler, wrr_table,
};
use proptest::prelude::*;

fn members_of(weights: &[u32]) -> Vec<Member> {
    weights
        .iter()
        .enumerate()
        .map(|(i, &weight)| Member { id: member_id(([10, 1, (i / 250) as u8, (i % 250) as u8], 8080).into()), weight })
        .collect()
}

fn request(source: u32, port: u16, destination: u32, now: Duration) -> Request {
    Request {
        source: IpAddr::from(std::net::Ipv4Addr::from(source)),
        source_port: port,
        destination: IpAddr::from(std::net::Ipv4Addr::from(destination)),
        destination_port: 80,
        now,
    }
}

fn kind() -> impl Strategy<Value = Scheduler> {
    proptest::sample::select(Scheduler::ALL.to_vec())
}

fn gcd(weights: &[u32]) -> u32 {
    fn g(a: u32, b: u32) -> u32 {
        if b == 0 { a } else { g(b, a % b) }
    }
    weights.iter().copied().filter(|&w| w > 0).fold(0, g)
}

fn count(table: &[usize], member: usize) -> usize {
    table.iter().filter(|&&m| m == member).count()
}

/// (weight, usable, active, inactive) per member.
fn pool() -> impl Strategy<Value = Vec<(u32, bool, u32, u32)>> {
    proptest::collection::vec((prop_oneof![Just(0u32), 1u32..4, 1u32..1000], any::<bool>(), 0u32..20, 0u32..50), 0..24)
}

proptest! {
    #[test]
    fn no_scheduler_picks_a_weight_zero_or_unusable_member(
        kind in kind(),
        pool in pool(),
        requests in proptest::collection::vec((any::<u32>(), any::<u16>(), 0u32..4, 0u64..100_000), 1..40),
        seed in any::<u64>(),
    ) {
        let weights: Vec<u32> = pool.iter().map(|p| p.0).collect();
        let usable: Vec<bool> = pool.iter().map(|p| p.1).collect();
        let load: Vec<Load> = pool.iter().map(|p| Load { active: p.2, inactive: p.3 }).collect();
        let eligible = |i: usize| weights[i] > 0 && usable[i];
        let any_eligible = (0..pool.len()).any(eligible);
        // ovf also needs active <= weight.
        let ovf_eligible = (0..pool.len()).any(|i| eligible(i) && load[i].active <= weights[i]);
        let mut s = scheduler(kind).expect("implemented");
        s.update(&members_of(&weights));
        let mut rng = Rng::new(seed);
        for &(src, port, dst, secs) in &requests {
            let r = request(src, port, dst, Duration::from_secs(secs));
            let picked = s.pick(&r, &load, &usable, &mut rng);
            if let Some(i) = picked {
                prop_assert!(eligible(i), "{kind} picked {i}: weight {} usable {}", weights[i], usable[i]);
            }
            let expected = if kind == Scheduler::Ovf { ovf_eligible } else { any_eligible };
            prop_assert_eq!(picked.is_some(), expected, "{} picked {:?}", kind, picked);
        }
    }

    #[test]
    fn rr_gives_every_usable_member_the_same_number_of_picks(
        pool in pool(),
        rounds in 1usize..5,
    ) {
        let weights: Vec<u32> = pool.iter().map(|p| p.0).collect();
        let usable: Vec<bool> = pool.iter().map(|p| p.1).collect();
        let eligible: Vec<usize> = (0..pool.len()).filter(|&i| weights[i] > 0 && usable[i]).collect();
        let mut s = scheduler(Scheduler::Rr).expect("implemented");
        s.update(&members_of(&weights));
        let mut rng = Rng::new(0);
        let mut counts = vec![0; pool.len()];
        for _ in 0..eligible.len() * rounds {
            let i = s.pick(&request(1, 1, 1, Duration::ZERO), &[], &usable, &mut rng).expect("eligible");
            counts[i] += 1;
        }
        prop_assert!(eligible.iter().all(|&i| counts[i] == rounds), "{:?}", counts);
    }

    #[test]
    fn wrr_picks_each_member_weight_over_gcd_times_per_cycle(
        weights in proptest::collection::vec(prop_oneof![Just(0u32), 1u32..8, Just(12u32)], 1..12),
        cycles in 1usize..4,
    ) {
        let table = wrr_table(&weights);
        let g = gcd(&weights);
        let len: usize = weights.iter().map(|&w| w.checked_div(g).unwrap_or(0) as usize).sum();
        prop_assert_eq!(table.len(), len);
        for (i, &w) in weights.iter().enumerate() {
            let expected = w.checked_div(g).unwrap_or(0) as usize;
            prop_assert_eq!(count(&table, i), expected);
        }
        let mut wrr = scheduler(Scheduler::Wrr).expect("implemented");
        wrr.update(&members_of(&weights));
        let usable = vec![true; weights.len()];
        let mut rng = Rng::new(0);
        let picks: Vec<usize> = (0..len * cycles)
            .map(|_| wrr.pick(&request(1, 1, 1, Duration::ZERO), &[], &usable, &mut rng).expect("eligible"))
            .collect();
        prop_assert_eq!(picks, table.repeat(cycles));
    }

    #[test]
    fn hashing_schedulers_map_a_key_to_the_same_member_everywhere(
        kind in proptest::sample::select(vec![Scheduler::Sh, Scheduler::Dh, Scheduler::Mh]),
        weights in proptest::collection::vec(1u32..6, 1..30),
        keys in proptest::collection::vec((any::<u32>(), any::<u16>(), any::<u32>()), 1..50),
    ) {
        let members = members_of(&weights);
        let usable = vec![true; members.len()];
        let mut a = scheduler(kind).expect("implemented");
        let mut b = scheduler(kind).expect("implemented");
        let mut rebuilt = scheduler(kind).expect("implemented");
        a.update(&members);
        b.update(&members);
        rebuilt.update(&members);
        rebuilt.update(&members[..members.len() / 2]);
        rebuilt.update(&members);
        let mut rng = Rng::new(0);
        for &(src, port, dst) in &keys {
            let r = request(src, port, dst, Duration::ZERO);
            let first = a.pick(&r, &[], &usable, &mut rng);
            prop_assert!(first.is_some());
            prop_assert_eq!(a.pick(&r, &[], &usable, &mut rng), first, "same request again");
            prop_assert_eq!(b.pick(&r, &[], &usable, &mut rng), first, "independent scheduler");
            prop_assert_eq!(rebuilt.pick(&r, &[], &usable, &mut rng), first, "rebuilt scheduler");
        }
    }

    #[test]
    fn userspace_hashing_picks_what_the_exported_tables_say(
        weights in proptest::collection::vec(prop_oneof![Just(0u32), 1u32..6], 1..30),
        keys in proptest::collection::vec((any::<u32>(), any::<u32>()), 1..50),
    ) {
        prop_assume!(weights.iter().any(|&w| w > 0));
        let members = members_of(&weights);
        let usable = vec![true; members.len()];
        let buckets = hash_buckets(&weights);
        let maglev = maglev_table(&members);
        let (mut sh, mut dh, mut mh) =
            (Hashing::source(HashOptions::default()), Hashing::destination(HashOptions::default()), Mh::new(HashOptions::default()));
        sh.update(&members);
        dh.update(&members);
        mh.update(&members);
        prop_assert!((0..BUCKETS).all(|b| sh.bucket(b) == Some(buckets[b])));
        prop_assert!((0..MAGLEV_SIZE).all(|s| mh.slot(s) == Some(maglev[s])));
        let mut rng = Rng::new(0);
        for &(src, dst) in &keys {
            let r = request(src, 5, dst, Duration::ZERO);
            prop_assert_eq!(sh.pick(&r, &[], &usable, &mut rng), Some(buckets[hash_bucket(r.source, 0)]));
            prop_assert_eq!(dh.pick(&r, &[], &usable, &mut rng), Some(buckets[hash_bucket(r.destination, 0)]));
            prop_assert_eq!(mh.pick(&r, &[], &usable, &mut rng), Some(maglev[maglev_slot(r.source, 0, 0)]));
        }
    }

    #[test]
    fn tables_have_their_lengths_members_and_proportions(
        weights in proptest::collection::vec(prop_oneof![Just(0u32), 1u32..10], 1..40),
    ) {
        let g = gcd(&weights);
        let buckets = hash_buckets(&weights);
        let maglev = maglev_table(&members_of(&weights));
        if g == 0 {
            prop_assert!(buckets.is_empty() && maglev.is_empty() && wrr_table(&weights).is_empty());
            return Ok(());
        }
        prop_assert_eq!(buckets.len(), BUCKETS);
        prop_assert_eq!(maglev.len(), MAGLEV_SIZE);
        let sum: u32 = weights.iter().map(|&w| w / g).sum();
        for (i, &w) in weights.iter().enumerate() {
            let (b, m) = (count(&buckets, i), count(&maglev, i));
            prop_assert_eq!(b == 0, w == 0, "member {} in the buckets", i);
            prop_assert_eq!(m == 0, w == 0, "member {} in the maglev table", i);
            // Both fill in rounds of weight / gcd per member: off by at
            // most one round's share. Weights < 64 need no turn shift.
            let turns = f64::from(w / g);
            if sum as usize <= BUCKETS {
                prop_assert!((b as f64 - BUCKETS as f64 * turns / f64::from(sum)).abs() <= turns, "bucket share of {}", i);
            }
            prop_assert!((m as f64 - MAGLEV_SIZE as f64 * turns / f64::from(sum)).abs() <= turns, "maglev share of {}", i);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn maglev_moves_about_one_nth_of_keys_when_one_of_n_members_leaves(
        n in 3usize..40,
        ids in proptest::collection::vec(any::<u64>(), 40),
        gone in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let members: Vec<Member> = ids[..n].iter().map(|&id| Member { id, weight: 1 }).collect();
        let gone = gone.index(n);
        let mut after = members.clone();
        after.remove(gone);
        let (mut before_mh, mut after_mh) = (Mh::new(HashOptions::default()), Mh::new(HashOptions::default()));
        before_mh.update(&members);
        after_mh.update(&after);
        let (usable, usable_after) = (vec![true; n], vec![true; n - 1]);
        let mut rng = Rng::new(seed);
        let keys = 3000;
        let (mut moved, mut survivors, mut survivors_moved) = (0, 0, 0);
        for _ in 0..keys {
            let r = request(rng.next_u64() as u32, 0, 1, Duration::ZERO);
            let old = members[before_mh.pick(&r, &[], &usable, &mut rng).expect("member")].id;
            let new = after[after_mh.pick(&r, &[], &usable_after, &mut rng).expect("member")].id;
            moved += usize::from(old != new);
            if old != members[gone].id {
                survivors += 1;
                survivors_moved += usize::from(old != new);
            }
        }
        let slack = 0.08;
        let share = moved as f64 / f64::from(keys);
        prop_assert!(share <= 1.0 / n as f64 + slack, "{} of keys moved with n = {}", share, n);
        // Maglev is not perfectly minimal: refilling the table moves a few
        // per cent of the surviving members' keys too (up to 8.2 % seen
        // over 1,500 random cases, n = 13), hence a wider bound here.
        let kept = 1.0 - survivors_moved as f64 / survivors as f64;
        prop_assert!(kept >= 0.88, "only {} of surviving members' keys stayed", kept);
    }
}

#[test]
fn random_and_twos_follow_the_weights_roughly() {
    for weights in [vec![1, 1, 1, 1], vec![1, 2, 3, 4], vec![10, 0, 1, 5]] {
        let total: u32 = weights.iter().sum();
        for kind in [Scheduler::Random, Scheduler::Twos] {
            let mut s = scheduler(kind).expect("implemented");
            s.update(&members_of(&weights));
            let (usable, load) = (vec![true; weights.len()], vec![Load::default(); weights.len()]);
            let mut rng = Rng::new(9);
            let n = 100_000;
            let mut counts = vec![0u32; weights.len()];
            for _ in 0..n {
                counts[s.pick(&request(1, 1, 1, Duration::ZERO), &load, &usable, &mut rng).expect("eligible")] += 1;
            }
            for (i, &w) in weights.iter().enumerate() {
                let (got, want) = (f64::from(counts[i]) / f64::from(n), f64::from(w) / f64::from(total));
                assert!((got - want).abs() < 0.01, "{kind} member {i}: {got} vs {want}");
            }
        }
    }
}

#[test]
fn every_scheduler_picks_nothing_without_usable_members() {
    let weights = [3, 0, 1];
    for kind in Scheduler::ALL {
        let mut s = scheduler(kind).expect("implemented");
        let mut rng = Rng::new(0);
        let r = request(1, 1, 1, Duration::ZERO);
        assert_eq!(s.pick(&r, &[], &[], &mut rng), None, "{kind} before any update");
        s.update(&members_of(&weights));
        assert_eq!(s.pick(&r, &[Load::default(); 3], &[false; 3], &mut rng), None, "{kind} with none usable");
        assert_eq!(s.pick(&r, &[Load::default(); 3], &[false, true, false], &mut rng), None, "{kind} weight 0 only");
        s.update(&[]);
        assert_eq!(s.pick(&r, &[], &[], &mut rng), None, "{kind} without members");
    }
}
