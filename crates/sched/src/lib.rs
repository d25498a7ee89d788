//! Endpoint schedulers: which member of a service port a new connection
//! goes to, with the kernel's IPVS schedulers as the reference semantics,
//! and the lookup tables (`wrr_table`, `maglev_table`, `hash_buckets`)
//! that kernel dataplanes load so that they pick as the userspace
//! schedulers do.
//!
//! Pure: no I/O, no clock (time comes in as [`Request::now`]), no OS
//! entropy (randomness comes from the caller's seeded [`Rng`]), and every
//! hash is fixed, so every node builds the same tables:
//!
//! - [`member_id`]: SipHash-1-3 under the key `kproxy-member-id` of
//!   `[4, ip.octets(), port_be]` or `[6, ip.octets(), port_be]`.
//! - sh/dh bucket of an address: IPVS's `hash_32(fold(addr) + port, 8)`,
//!   see [`hash_bucket`].
//! - Maglev offset and skip of a member: SipHash-1-3 of `id.to_le_bytes()`
//!   under `kproxy-mh-offset` and `kproxy-mh-stride`; Maglev slot of a
//!   request: SipHash-1-3 under `kproxy-mh-lookup`, see [`maglev_slot`].
//!
//! docs/schedulers.md describes each scheduler, its ties and its state.

mod hashing;
mod least;
mod locality;
mod maglev;
mod member;
mod random;
mod rng;
mod round_robin;
mod siphash;

use std::fmt;

use kproxy_model::Scheduler;

pub use hashing::{BUCKETS, HashOptions, Hashing, hash_bucket, hash_buckets};
pub use least::{Fo, Lc, Nq, Ovf, Sed, Wlc, overhead};
pub use locality::{ENTRY_TIMEOUT, Lblc, Lblcr, LocalityOptions, MAX_ENTRIES, SWEEP_INTERVAL};
pub use maglev::{MAGLEV_SIZE, Mh, maglev_slot, maglev_table};
pub use member::{Load, Member, Request};
pub use random::{Random, Twos};
pub use rng::Rng;
pub use round_robin::{Rr, Wrr, wrr_table, wrr_table_len};
pub use siphash::{MEMBER_ID_KEY, member_id, siphash13};

/// A scheduler for one service port's members.
pub trait Schedule: Send + fmt::Debug {
    fn kind(&self) -> Scheduler;

    /// The members changed (added, removed, reweighted). Rebuilds tables;
    /// keeps state (rr position, lblc map) where it still applies. The
    /// same members again is a no-op.
    fn update(&mut self, members: &[Member]);

    /// Picks a member index for a new connection, or `None` when no member
    /// is usable. Never returns a member with weight 0 or `usable[i] ==
    /// false`. `load` and `usable` are in member order; an index missing
    /// from `usable` counts as unusable, one missing from `load` as idle.
    fn pick(&mut self, request: &Request, load: &[Load], usable: &[bool], rng: &mut Rng) -> Option<usize>;
}

/// Per-kind options; [`Options::default`] is what [`scheduler`] uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// sh, dh and mh.
    pub hash: HashOptions,
    /// lblc and lblcr.
    pub locality: LocalityOptions,
}

/// A scheduler kind this crate does not implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsupported {
    pub kind: Scheduler,
    pub reason: &'static str,
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scheduler {} is not supported: {}", self.kind, self.reason)
    }
}

impl std::error::Error for Unsupported {}

/// A fresh scheduler of that kind with default options.
pub fn scheduler(kind: Scheduler) -> Result<Box<dyn Schedule>, Unsupported> {
    scheduler_with(kind, Options::default())
}

/// A fresh scheduler of that kind. Every kind of [`Scheduler::ALL`] is
/// implemented today; the error is for kinds added later.
pub fn scheduler_with(kind: Scheduler, options: Options) -> Result<Box<dyn Schedule>, Unsupported> {
    Ok(match kind {
        Scheduler::Random => Box::new(Random::default()),
        Scheduler::Rr => Box::new(Rr::default()),
        Scheduler::Wrr => Box::new(Wrr::default()),
        Scheduler::Lc => Box::new(Lc::default()),
        Scheduler::Wlc => Box::new(Wlc::default()),
        Scheduler::Sed => Box::new(Sed::default()),
        Scheduler::Nq => Box::new(Nq::default()),
        Scheduler::Sh => Box::new(Hashing::source(options.hash)),
        Scheduler::Dh => Box::new(Hashing::destination(options.hash)),
        Scheduler::Mh => Box::new(Mh::new(options.hash)),
        Scheduler::Fo => Box::new(Fo::default()),
        Scheduler::Ovf => Box::new(Ovf::default()),
        Scheduler::Lblc => Box::new(Lblc::new(options.locality)),
        Scheduler::Lblcr => Box::new(Lblcr::new(options.locality)),
        Scheduler::Twos => Box::new(Twos::default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_a_scheduler_reporting_that_kind() {
        for kind in Scheduler::ALL {
            let s = scheduler(kind).expect("every kind is implemented");
            assert_eq!(s.kind(), kind);
        }
    }

    #[test]
    fn unsupported_names_the_kind_and_the_reason() {
        let e = Unsupported { kind: Scheduler::Lblcr, reason: "no replication yet" };
        assert_eq!(e.to_string(), "scheduler lblcr is not supported: no replication yet");
    }
}
