//! random and twos: picks drawn from the caller's [`Rng`], weighted.

use kproxy_model::Scheduler;

use crate::least::overhead;
use crate::member::{View, weights};
use crate::{Load, Member, Request, Rng, Schedule};

/// The eligible member that the weight offset `r` (in `0..total`) falls
/// on, members laid end to end in member order, each as long as its weight.
fn at_offset(view: View<'_>, mut r: u64) -> Option<usize> {
    view.eligible_indices().find(|&i| {
        let w = u64::from(view.weight(i));
        if r < w {
            return true;
        }
        r -= w;
        false
    })
}

/// One weighted random draw among the eligible members.
fn draw(view: View<'_>, total: u64, rng: &mut Rng) -> Option<usize> {
    at_offset(view, rng.below(total))
}

fn total_weight(view: View<'_>) -> u64 {
    view.eligible_indices().map(|i| u64::from(view.weight(i))).sum()
}

/// Random: a usable member with probability weight / (sum of the usable
/// members' weights); uniform when the weights are equal (the default).
#[derive(Clone, Debug, Default)]
pub struct Random {
    weights: Vec<u32>,
}

impl Schedule for Random {
    fn kind(&self) -> Scheduler {
        Scheduler::Random
    }

    fn update(&mut self, members: &[Member]) {
        self.weights = weights(members);
    }

    fn pick(&mut self, _: &Request, load: &[Load], usable: &[bool], rng: &mut Rng) -> Option<usize> {
        let view = View::new(&self.weights, load, usable);
        match total_weight(view) {
            0 => None,
            total => draw(view, total, rng),
        }
    }
}

/// Power of two choices (IPVS twos): two independent weighted draws; the
/// second wins only when its [`overhead`] / weight is strictly lower.
#[derive(Clone, Debug, Default)]
pub struct Twos {
    weights: Vec<u32>,
}

impl Schedule for Twos {
    fn kind(&self) -> Scheduler {
        Scheduler::Twos
    }

    fn update(&mut self, members: &[Member]) {
        self.weights = weights(members);
    }

    fn pick(&mut self, _: &Request, load: &[Load], usable: &[bool], rng: &mut Rng) -> Option<usize> {
        let view = View::new(&self.weights, load, usable);
        let total = total_weight(view);
        if total == 0 {
            return None;
        }
        let first = draw(view, total, rng)?;
        let second = draw(view, total, rng)?;
        let cost = |i: usize| u128::from(overhead(view.load(i)));
        let weight = |i: usize| u128::from(view.weight(i));
        // second is less loaded: oh2 / w2 < oh1 / w1.
        Some(if weight(second) * cost(first) > weight(first) * cost(second) { second } else { first })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request() -> Request {
        let ip = "10.0.0.1".parse().expect("address");
        Request { source: ip, source_port: 1, destination: ip, destination_port: 2, now: Duration::ZERO }
    }

    fn counts(s: &mut dyn Schedule, weights: &[u32], load: &[Load], usable: &[bool], n: usize) -> Vec<usize> {
        let members: Vec<Member> = weights.iter().map(|&weight| Member { id: 0, weight }).collect();
        s.update(&members);
        let mut rng = Rng::new(42);
        let mut counts = vec![0; weights.len()];
        for _ in 0..n {
            counts[s.pick(&request(), load, usable, &mut rng).expect("a usable member")] += 1;
        }
        counts
    }

    #[test]
    fn random_follows_the_usable_weights() {
        let c = counts(&mut Random::default(), &[1, 2, 0, 5], &[], &[true, true, true, true], 80_000);
        assert_eq!(c[2], 0);
        for (i, share) in [(0, 1.0 / 8.0), (1, 2.0 / 8.0), (3, 5.0 / 8.0)] {
            let got = c[i] as f64 / 80_000.0;
            assert!((got - share).abs() < 0.01, "member {i}: {got} vs {share}");
        }
        let c = counts(&mut Random::default(), &[1, 2, 0, 5], &[], &[true, false, true, true], 60_000);
        assert_eq!(c[1], 0);
        assert!((c[0] as f64 / 60_000.0 - 1.0 / 6.0).abs() < 0.01, "{c:?}");
    }

    #[test]
    fn twos_sends_the_pair_to_the_less_loaded_member() {
        // Two members, member 1 heavily loaded: it wins only when drawn
        // twice, so about 1/4 of picks.
        let load = [Load { active: 0, inactive: 0 }, Load { active: 100, inactive: 0 }];
        let c = counts(&mut Twos::default(), &[1, 1], &load, &[true, true], 40_000);
        assert!((c[1] as f64 / 40_000.0 - 0.25).abs() < 0.01, "{c:?}");
        // Equal load: the first draw wins, so picks follow the weights.
        let c = counts(&mut Twos::default(), &[3, 1], &[Load::default(); 2], &[true, true], 40_000);
        assert!((c[0] as f64 / 40_000.0 - 0.75).abs() < 0.01, "{c:?}");
    }
}
