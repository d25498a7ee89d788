//! Schedulers that pick by the members' live counters and weights alone:
//! lc, wlc, sed, nq, fo, ovf. They keep no state but the weights. Ties go
//! to the first member in member order, as in IPVS.

use kproxy_model::Scheduler;

use crate::member::{View, weights};
use crate::{Load, Member, Request, Rng, Schedule};

/// IPVS `ip_vs_dest_conn_overhead`: `active * 256 + inactive`.
pub fn overhead(load: Load) -> u64 {
    u64::from(load.active) * 256 + u64::from(load.inactive)
}

/// The first eligible member with the least `cost / weight`, compared as
/// `cost_a * weight_b > cost_b * weight_a` (IPVS's integer form).
fn least_per_weight(view: View<'_>, cost: impl Fn(Load) -> u64) -> Option<usize> {
    least_per_weight_of(view, view.eligible_indices(), cost)
}

/// As [`least_per_weight`], over `candidates` in their order; ineligible
/// ones are skipped.
fn least_per_weight_of(
    view: View<'_>,
    candidates: impl Iterator<Item = usize>,
    cost: impl Fn(Load) -> u64,
) -> Option<usize> {
    let mut least: Option<(usize, u64)> = None;
    for i in candidates.filter(|&i| view.eligible(i)) {
        let c = cost(view.load(i));
        let better = match least {
            None => true,
            Some((l, lc)) => u128::from(lc) * u128::from(view.weight(i)) > u128::from(c) * u128::from(view.weight(l)),
        };
        if better {
            least = Some((i, c));
        }
    }
    least.map(|(i, _)| i)
}

/// wlc's choice; lblc and lblcr fall back to it.
pub(crate) fn weighted_least_connection(view: View<'_>) -> Option<usize> {
    least_per_weight(view, overhead)
}

/// wlc's choice among `candidates`, first in their order on ties.
pub(crate) fn weighted_least_connection_of(view: View<'_>, candidates: impl Iterator<Item = usize>) -> Option<usize> {
    least_per_weight_of(view, candidates, overhead)
}

/// sed's cost: `active + 1` (inactive connections do not count).
fn expected_delay(load: Load) -> u64 {
    u64::from(load.active) + 1
}

fn least_connection(view: View<'_>) -> Option<usize> {
    view.eligible_indices().min_by_key(|&i| overhead(view.load(i)))
}

fn never_queue(view: View<'_>) -> Option<usize> {
    view.eligible_indices().find(|&i| view.load(i).active == 0).or_else(|| least_per_weight(view, expected_delay))
}

/// The first member with the highest weight among those `keep` allows.
fn highest_weight(view: View<'_>, keep: impl Fn(usize) -> bool) -> Option<usize> {
    // max_by_key keeps the last maximum; reversing keeps the first.
    view.eligible_indices().filter(|&i| keep(i)).rev().max_by_key(|&i| view.weight(i))
}

fn failover(view: View<'_>) -> Option<usize> {
    highest_weight(view, |_| true)
}

fn overflow(view: View<'_>) -> Option<usize> {
    // IPVS skips a member only once active > weight: active == weight
    // still takes one more.
    highest_weight(view, |i| u64::from(view.load(i).active) <= u64::from(view.weight(i)))
}

macro_rules! stateless {
    ($(#[$doc:meta])* $name:ident, $kind:expr, $pick:path) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default)]
        pub struct $name {
            weights: Vec<u32>,
        }

        impl Schedule for $name {
            fn kind(&self) -> Scheduler {
                $kind
            }

            fn update(&mut self, members: &[Member]) {
                self.weights = weights(members);
            }

            fn pick(&mut self, _: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
                $pick(View::new(&self.weights, load, usable))
            }
        }
    };
}

stateless!(
    /// Least connection: the least [`overhead`]; weights other than 0 do
    /// not matter.
    Lc,
    Scheduler::Lc,
    least_connection
);
stateless!(
    /// Weighted least connection: the least [`overhead`] / weight.
    Wlc,
    Scheduler::Wlc,
    weighted_least_connection
);
stateless!(
    /// Shortest expected delay: the least (active + 1) / weight.
    Sed,
    Scheduler::Sed,
    least_per_weight_sed
);
stateless!(
    /// Never queue: the first member with no active connection, else as
    /// sed.
    Nq,
    Scheduler::Nq,
    never_queue
);
stateless!(
    /// Weighted failover: the highest weight.
    Fo,
    Scheduler::Fo,
    failover
);
stateless!(
    /// Weighted overflow: the highest weight among members whose active
    /// connections do not exceed their weight.
    Ovf,
    Scheduler::Ovf,
    overflow
);

fn least_per_weight_sed(view: View<'_>) -> Option<usize> {
    least_per_weight(view, expected_delay)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn pick(s: &mut dyn Schedule, weights: &[u32], load: &[(u32, u32)], usable: &[bool]) -> Option<usize> {
        let members: Vec<Member> = weights.iter().map(|&weight| Member { id: 0, weight }).collect();
        s.update(&members);
        let load: Vec<Load> = load.iter().map(|&(active, inactive)| Load { active, inactive }).collect();
        let ip = "10.0.0.1".parse().expect("address");
        let request = Request { source: ip, source_port: 1, destination: ip, destination_port: 2, now: Duration::ZERO };
        s.pick(&request, &load, usable, &mut Rng::new(0))
    }

    #[test]
    fn lc_picks_the_least_overhead_first_on_ties() {
        // Overheads: 2*256+0 = 512, 1*256+300 = 556, 1*256+10 = 266, 266.
        let load = [(2, 0), (1, 300), (1, 10), (1, 10)];
        assert_eq!(pick(&mut Lc::default(), &[1, 1, 1, 1], &load, &[true; 4]), Some(2));
        // Weight does not matter to lc, but weight 0 excludes.
        assert_eq!(pick(&mut Lc::default(), &[1, 1, 0, 9], &load, &[true; 4]), Some(3));
    }

    #[test]
    fn wlc_divides_overhead_by_weight() {
        // 512/1 = 512, 768/3 = 256, 300/1 = 300.
        let load = [(2, 0), (3, 0), (1, 44)];
        assert_eq!(pick(&mut Wlc::default(), &[1, 3, 1], &load, &[true; 3]), Some(1));
        assert_eq!(pick(&mut Wlc::default(), &[1, 3, 1], &load, &[true, false, true]), Some(2));
        // 512/2 == 256/1: the first wins.
        assert_eq!(pick(&mut Wlc::default(), &[2, 1], &[(2, 0), (1, 0)], &[true; 2]), Some(0));
    }

    #[test]
    fn sed_uses_active_plus_one_over_weight() {
        // (5+1)/3 = 2, (0+1)/1 = 1, (2+1)/4 = 0.75; inactive ignored.
        let load = [(5, 0), (0, 900), (2, 0)];
        assert_eq!(pick(&mut Sed::default(), &[3, 1, 4], &load, &[true; 3]), Some(2));
        // wlc on the same loads: 1280/3, 900/1, 512/4 -> member 2 as well,
        // but with member 2 out sed picks 1 (1 < 2) and wlc 0 (426 < 900).
        assert_eq!(pick(&mut Sed::default(), &[3, 1, 4], &load, &[true, true, false]), Some(1));
        assert_eq!(pick(&mut Wlc::default(), &[3, 1, 4], &load, &[true, true, false]), Some(0));
    }

    #[test]
    fn nq_prefers_the_first_idle_member_over_a_faster_busy_one() {
        // Member 0 has weight 100 and 1 active: sed would pick it (2/100).
        let load = [(1, 0), (3, 0), (0, 50), (0, 0)];
        assert_eq!(pick(&mut Nq::default(), &[100, 1, 1, 1], &load, &[true; 4]), Some(2));
        // Nobody idle: as sed, (1+1)/100 wins.
        let busy = [(1, 0), (3, 0), (1, 0)];
        assert_eq!(pick(&mut Nq::default(), &[100, 1, 1], &busy, &[true; 3]), Some(0));
        // An idle member with weight 0 or unusable does not count.
        assert_eq!(pick(&mut Nq::default(), &[100, 0, 1], &[(1, 0), (0, 0), (0, 0)], &[true, true, false]), Some(0));
    }

    #[test]
    fn fo_picks_the_highest_weight_and_fails_over_in_order() {
        let load = [(0, 0); 4];
        assert_eq!(pick(&mut Fo::default(), &[2, 5, 5, 1], &load, &[true; 4]), Some(1));
        assert_eq!(pick(&mut Fo::default(), &[2, 5, 5, 1], &load, &[true, false, true, true]), Some(2));
        assert_eq!(pick(&mut Fo::default(), &[2, 5, 5, 1], &load, &[true, false, false, true]), Some(0));
    }

    #[test]
    fn ovf_overflows_once_active_exceeds_weight() {
        // Member 1 (weight 3) is full only above 3 active.
        assert_eq!(pick(&mut Ovf::default(), &[1, 3, 2], &[(0, 0), (3, 0), (0, 0)], &[true; 3]), Some(1));
        assert_eq!(pick(&mut Ovf::default(), &[1, 3, 2], &[(0, 0), (4, 0), (0, 0)], &[true; 3]), Some(2));
        assert_eq!(pick(&mut Ovf::default(), &[1, 3, 2], &[(2, 0), (4, 0), (3, 0)], &[true; 3]), None);
    }

    #[test]
    fn nothing_usable_picks_nothing() {
        for mut s in [Box::new(Lc::default()) as Box<dyn Schedule>, Box::new(Wlc::default()), Box::new(Nq::default())] {
            assert_eq!(pick(s.as_mut(), &[1, 1], &[(0, 0), (0, 0)], &[false, false]), None);
            assert_eq!(pick(s.as_mut(), &[0, 0], &[(0, 0), (0, 0)], &[true, true]), None);
        }
    }
}
