//! rr and wrr: IPVS's round robin and interleaved weighted round robin, and
//! the wrr cycle as a table for `numgen inc` in kernel dataplanes.

use std::collections::BTreeMap;

use kproxy_model::Scheduler;

use crate::member::{View, gcd_weight, weights};
use crate::{Load, Member, Request, Rng, Schedule};

/// Round robin: the next usable member with weight > 0 after the last one
/// picked, in member order. Weights other than 0 do not matter.
#[derive(Clone, Debug, Default)]
pub struct Rr {
    members: Vec<Member>,
    weights: Vec<u32>,
    /// Index tried first by the next pick.
    next: usize,
}

impl Schedule for Rr {
    fn kind(&self) -> Scheduler {
        Scheduler::Rr
    }

    fn update(&mut self, members: &[Member]) {
        if self.members == members {
            return;
        }
        // Continue with the first old member, from the one that was next,
        // that is still there (IPVS steps past a removed current member).
        let index: BTreeMap<u64, usize> = members.iter().enumerate().rev().map(|(i, m)| (m.id, i)).collect();
        let n = self.members.len();
        self.next =
            (0..n).map(|k| self.members[(self.next + k) % n].id).find_map(|id| index.get(&id).copied()).unwrap_or(0);
        self.members = members.to_vec();
        self.weights = weights(members);
    }

    fn pick(&mut self, _: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
        let view = View::new(&self.weights, load, usable);
        let n = self.weights.len();
        let i = (0..n).map(|k| (self.next + k) % n).find(|&i| view.eligible(i))?;
        self.next = (i + 1) % n;
        Some(i)
    }
}

/// IPVS weighted round robin: passes with a current weight `cw` falling
/// from the largest weight to 1 in steps of the weights' gcd; each pass
/// picks, in member order, the members whose weight is at least `cw`.
#[derive(Clone, Debug, Default)]
pub struct Wrr {
    members: Vec<Member>,
    weights: Vec<u32>,
    pass: Pass,
}

/// Where wrr is in its cycle (IPVS `struct ip_vs_wrr_mark`).
#[derive(Clone, Copy, Debug, Default)]
struct Pass {
    /// gcd of the positive weights (IPVS `di`), 1 when there are none.
    step: u32,
    /// Largest weight - (step - 1) (IPVS `mw`): the first pass's `cw`.
    first: u32,
    /// Current weight (IPVS `cw`); 0 before the first update.
    current: u32,
    /// Last member picked in the current pass; `None`: start of the pass.
    last: Option<usize>,
}

impl Pass {
    /// After the weights changed (IPVS `ip_vs_wrr_dest_changed`): restart
    /// at the first member, in the same pass when it still exists.
    fn reset(&mut self, weights: &[u32]) {
        self.step = gcd_weight(weights).unwrap_or(1);
        let max = weights.iter().copied().max().unwrap_or(0);
        self.first = max.saturating_sub(self.step - 1);
        self.last = None;
        if self.current > self.first || self.current == 0 {
            self.current = self.first;
        } else if self.step > 1 {
            self.current = (self.current / self.step) * self.step + 1;
        }
    }

    /// The next member in wrr order among the eligible ones.
    fn advance(&mut self, view: View<'_>) -> Option<usize> {
        if self.first == 0 {
            return None;
        }
        let top = view.eligible_indices().map(|i| view.weight(i)).max()?;
        let mut start = self.last.map_or(0, |l| l + 1);
        let mut cw = self.current;
        // Ends within two passes: once cw <= top the member with weight
        // `top` qualifies, and a pass that starts at 0 reaches it.
        loop {
            if cw <= top
                && let Some(i) = (start..view.weights.len()).find(|&i| view.eligible(i) && view.weight(i) >= cw)
            {
                self.current = cw;
                self.last = Some(i);
                return Some(i);
            }
            start = 0;
            cw = if cw > self.step { cw - self.step } else { self.first };
            if cw > top {
                // Passes above every eligible weight would pick nobody:
                // go straight to the first one that picks someone.
                cw = ((top - 1) / self.step) * self.step + 1;
            }
        }
    }
}

impl Schedule for Wrr {
    fn kind(&self) -> Scheduler {
        Scheduler::Wrr
    }

    fn update(&mut self, members: &[Member]) {
        if self.members != members || self.pass.current == 0 {
            self.members = members.to_vec();
            self.weights = weights(members);
            self.pass.reset(&self.weights);
        }
    }

    fn pick(&mut self, _: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
        self.pass.advance(View::new(&self.weights, load, usable))
    }
}

/// The length of [`wrr_table`] for `weights` (the sum of the weights over
/// their greatest common divisor), without building it; 0 when no weight
/// is positive.
pub fn wrr_table_len(weights: &[u32]) -> u64 {
    let Some(step) = gcd_weight(weights) else { return 0 };
    weights.iter().map(|&w| u64::from(w / step)).sum()
}

/// Member indices in IPVS wrr order over one full cycle (length = sum of
/// weights / gcd), so `numgen inc mod len` over it reproduces wrr; empty
/// when no weight is positive. Used with `numgen random`, it is weighted
/// random. Memory is one entry per weight unit / gcd: bound the weights.
pub fn wrr_table(weights: &[u32]) -> Vec<usize> {
    let len = wrr_table_len(weights);
    let mut pass = Pass::default();
    pass.reset(weights);
    let usable = vec![true; weights.len()];
    let view = View::new(weights, &[], &usable);
    (0..len).map(|_| pass.advance(view).expect("a positive weight is always eligible here")).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request() -> Request {
        let ip = "10.0.0.1".parse().expect("address");
        Request { source: ip, source_port: 1, destination: ip, destination_port: 2, now: Duration::ZERO }
    }

    fn members(weights: &[u32]) -> Vec<Member> {
        weights.iter().enumerate().map(|(i, &weight)| Member { id: i as u64 + 100, weight }).collect()
    }

    fn picks(s: &mut dyn Schedule, usable: &[bool], n: usize) -> Vec<usize> {
        let mut rng = Rng::new(0);
        (0..n).map(|_| s.pick(&request(), &[], usable, &mut rng).expect("a usable member")).collect()
    }

    #[test]
    fn rr_cycles_in_member_order_and_skips_unusable_and_weight_zero() {
        let mut rr = Rr::default();
        rr.update(&members(&[1, 5, 1, 0]));
        assert_eq!(picks(&mut rr, &[true; 4], 7), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(picks(&mut rr, &[true, false, true, true], 4), [2, 0, 2, 0]);
        assert_eq!(rr.pick(&request(), &[], &[false; 4], &mut Rng::new(0)), None);
    }

    #[test]
    fn rr_continues_after_the_removed_next_member() {
        let mut rr = Rr::default();
        let all = members(&[1, 1, 1, 1]);
        rr.update(&all);
        assert_eq!(picks(&mut rr, &[true; 4], 1), [0]);
        // Member 1 (next) leaves: the next pick is the old member 2.
        rr.update(&[all[0], all[2], all[3]]);
        assert_eq!(picks(&mut rr, &[true; 3], 3), [1, 2, 0]);
    }

    #[test]
    fn wrr_table_is_the_ipvs_sequence() {
        // cw = 4: a; cw = 3: a b; cw = 2: a b c; cw = 1: a b c.
        assert_eq!(wrr_table(&[4, 3, 2]), [0, 0, 1, 0, 1, 2, 0, 1, 2]);
        // gcd 2: mw = 4 - 1 = 3; cw = 3: a; cw = 1: a b.
        assert_eq!(wrr_table(&[4, 2]), [0, 0, 1]);
        assert_eq!(wrr_table(&[0, 3, 0]), [1]);
        assert_eq!(wrr_table(&[1, 1, 1]), [0, 1, 2]);
        assert!(wrr_table(&[0, 0]).is_empty());
    }

    #[test]
    fn wrr_table_len_is_the_tables_length_without_building_it() {
        for weights in [&[4, 3, 2][..], &[4, 2], &[0, 3, 0], &[1, 1, 1], &[0, 0], &[], &[6, 10, 0]] {
            assert_eq!(wrr_table_len(weights), wrr_table(weights).len() as u64, "{weights:?}");
        }
        assert_eq!(wrr_table_len(&[1, 65535, 65535]), 131071);
    }

    #[test]
    fn wrr_picks_follow_the_table_cycle_after_cycle() {
        let weights = [5, 0, 3, 2, 3];
        let mut wrr = Wrr::default();
        wrr.update(&members(&weights));
        let table = wrr_table(&weights);
        let got = picks(&mut wrr, &[true; 5], table.len() * 3);
        assert_eq!(got, [table.clone(), table.clone(), table].concat());
    }

    #[test]
    fn wrr_skips_an_unusable_member_as_ipvs_skips_an_overloaded_one() {
        let mut wrr = Wrr::default();
        wrr.update(&members(&[4, 3, 2]));
        // Without member 0 the sequence is the table's with 0 left out.
        assert_eq!(picks(&mut wrr, &[false, true, true], 5), [1, 1, 2, 1, 2]);
    }

    #[test]
    fn wrr_keeps_its_pass_across_a_reweight() {
        let mut wrr = Wrr::default();
        let mut m = members(&[4, 3, 2]);
        wrr.update(&m);
        assert_eq!(picks(&mut wrr, &[true; 3], 3), [0, 0, 1]);
        // Now in the cw = 3 pass; after the change IPVS restarts that pass
        // from the first member.
        m[2].weight = 3;
        wrr.update(&m);
        assert_eq!(picks(&mut wrr, &[true; 3], 4), [0, 1, 2, 0]);
    }
}
