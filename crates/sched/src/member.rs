//! What schedulers see: members, their live counters, the new connection.

use std::net::IpAddr;
use std::time::Duration;

/// One endpoint as schedulers see it. `id` is a stable identity (the caller
/// passes [`crate::member_id`] of "ip:port"), used by the hashing
/// schedulers so every node builds the same tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    pub id: u64,
    pub weight: u32,
}

/// Live counters of one member, in member order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Established connections (IPVS `activeconns`).
    pub active: u32,
    /// Connections in other states (IPVS `inactconns`).
    pub inactive: u32,
}

/// What a new connection looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub source: IpAddr,
    pub source_port: u16,
    pub destination: IpAddr,
    pub destination_port: u16,
    /// Monotonic time, for lblc's and lblcr's expiry.
    pub now: Duration,
}

/// The members as of the last update plus this pick's counters: the one
/// place that decides whether a member may be picked.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub weights: &'a [u32],
    pub load: &'a [Load],
    pub usable: &'a [bool],
}

impl<'a> View<'a> {
    pub fn new(weights: &'a [u32], load: &'a [Load], usable: &'a [bool]) -> Self {
        View { weights, load, usable }
    }

    /// Weight above 0 and marked usable.
    pub fn eligible(&self, i: usize) -> bool {
        self.weights.get(i).is_some_and(|&w| w > 0) && self.usable.get(i) == Some(&true)
    }

    pub fn weight(&self, i: usize) -> u32 {
        self.weights[i]
    }

    pub fn load(&self, i: usize) -> Load {
        self.load.get(i).copied().unwrap_or_default()
    }

    /// Eligible member indices in member order.
    pub fn eligible_indices(&self) -> impl DoubleEndedIterator<Item = usize> + '_ {
        (0..self.weights.len()).filter(|&i| self.eligible(i))
    }
}

/// The weights of `members`, in order.
pub(crate) fn weights(members: &[Member]) -> Vec<u32> {
    members.iter().map(|m| m.weight).collect()
}

/// Greatest common divisor of the positive weights; `None` when there are
/// none.
pub(crate) fn gcd_weight(weights: &[u32]) -> Option<u32> {
    fn gcd(mut a: u32, mut b: u32) -> u32 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    weights.iter().copied().filter(|&w| w > 0).reduce(gcd)
}
