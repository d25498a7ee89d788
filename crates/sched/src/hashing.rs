//! sh and dh: IPVS's 256-bucket tables filled by weight, looked up by a
//! hash of the source (sh) or destination (dh) address.

use std::net::IpAddr;

use kproxy_model::Scheduler;

use crate::member::{View, gcd_weight, weights};
use crate::{Load, Member, Request, Rng, Schedule};

/// Buckets in an sh/dh table (IPVS `IP_VS_SH_TAB_SIZE`, 1 << 8).
pub const BUCKETS: usize = 256;

/// The multiplier of the kernel's `hash_32` (`GOLDEN_RATIO_32`).
const GOLDEN_RATIO_32: u32 = 0x61c8_8647;

/// Options of the hashing schedulers (sh, dh, mh).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashOptions {
    /// Hash the port too (IPVS `sh-port` / `mh-port`): the source port for
    /// sh and mh, the destination port for dh.
    pub port: bool,
    /// When the member a key maps to is unusable, probe further in a fixed
    /// order (IPVS `sh-fallback` / `mh-fallback`) instead of picking none.
    pub fallback: bool,
}

impl Default for HashOptions {
    fn default() -> Self {
        HashOptions { port: false, fallback: true }
    }
}

/// The bucket of an address (and port, 0 when not hashed), as IPVS sh
/// computes it: `hash_32(fold(addr) + port, 8) = ((fold(addr) + port) *
/// 0x61c88647 mod 2^32) >> 24`, where `fold` of IPv4 is the address as a
/// big-endian u32 and of IPv6 the XOR of its four big-endian u32 words.
/// IPv4-mapped IPv6 is folded as IPv4.
pub fn hash_bucket(addr: IpAddr, port: u16) -> usize {
    let fold = match addr.to_canonical() {
        IpAddr::V4(v4) => u32::from(v4),
        IpAddr::V6(v6) => {
            let o = v6.octets();
            o.chunks_exact(4).map(|w| u32::from_be_bytes(w.try_into().expect("4 bytes"))).fold(0, |a, w| a ^ w)
        }
    };
    (fold.wrapping_add(u32::from(port)).wrapping_mul(GOLDEN_RATIO_32) >> 24) as usize
}

/// The sh/dh bucket table ([`BUCKETS`] entries of member indices) filled
/// by weight; empty when no weight is positive. Weights are divided by
/// their gcd. If they then sum to at most 256, IPVS's fill: members in
/// order, each taking as many consecutive buckets as its weight, round
/// after round until all are taken. If they sum to more (where IPVS would
/// leave the last members without a bucket), each member gets one bucket
/// plus its weight's share of the other 256 - n (largest remainder, ties
/// to the earlier member), in consecutive runs in member order; past 256
/// members only the first 256 get one each.
pub fn hash_buckets(weights: &[u32]) -> Vec<usize> {
    let Some(step) = gcd_weight(weights) else {
        return Vec::new();
    };
    let members: Vec<(usize, u64)> =
        weights.iter().enumerate().filter(|&(_, &w)| w > 0).map(|(i, &w)| (i, u64::from(w / step))).collect();
    let sum: u64 = members.iter().map(|&(_, w)| w).sum();
    if sum <= BUCKETS as u64 {
        let round = members.iter().flat_map(|&(i, w)| std::iter::repeat_n(i, w as usize));
        return round.cycle().take(BUCKETS).collect();
    }
    if members.len() >= BUCKETS {
        return members.iter().map(|&(i, _)| i).take(BUCKETS).collect();
    }
    let spare = (BUCKETS - members.len()) as u64;
    let mut counts: Vec<u64> = members.iter().map(|&(_, w)| 1 + spare * w / sum).collect();
    let mut left = BUCKETS as u64 - counts.iter().sum::<u64>();
    let mut by_remainder: Vec<usize> = (0..members.len()).collect();
    // Stable sort: equal remainders keep member order.
    by_remainder.sort_by_key(|&k| std::cmp::Reverse(spare * members[k].1 % sum));
    for k in by_remainder {
        if left == 0 {
            break;
        }
        counts[k] += 1;
        left -= 1;
    }
    members.iter().zip(counts).flat_map(|(&(i, _), n)| std::iter::repeat_n(i, n as usize)).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    Source,
    Destination,
}

/// sh (source hashing) or dh (destination hashing): the member in the
/// [`hash_buckets`] table at [`hash_bucket`] of the request's address.
/// With [`HashOptions::fallback`], an unusable member's keys go to the
/// first eligible member at buckets `(2 * b + k) mod 256`, k = 0..255
/// (IPVS `SH_FALLBACK`'s order).
#[derive(Clone, Debug)]
pub struct Hashing {
    field: Field,
    options: HashOptions,
    members: Vec<Member>,
    weights: Vec<u32>,
    buckets: Vec<u32>,
}

impl Hashing {
    pub fn source(options: HashOptions) -> Self {
        Hashing::new(Field::Source, options)
    }

    pub fn destination(options: HashOptions) -> Self {
        Hashing::new(Field::Destination, options)
    }

    fn new(field: Field, options: HashOptions) -> Self {
        Hashing { field, options, members: Vec::new(), weights: Vec::new(), buckets: Vec::new() }
    }

    /// The member index in bucket `bucket` (`< BUCKETS`), before any check
    /// of usability; `None` with no weighted member.
    pub fn bucket(&self, bucket: usize) -> Option<usize> {
        self.buckets.get(bucket).map(|&m| m as usize)
    }
}

impl Schedule for Hashing {
    fn kind(&self) -> Scheduler {
        match self.field {
            Field::Source => Scheduler::Sh,
            Field::Destination => Scheduler::Dh,
        }
    }

    fn update(&mut self, members: &[Member]) {
        if self.members == members {
            return;
        }
        self.members = members.to_vec();
        self.weights = weights(members);
        let table = hash_buckets(&self.weights);
        self.buckets = table.into_iter().map(|m| u32::try_from(m).expect("member index fits u32")).collect();
    }

    fn pick(&mut self, request: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
        let view = View::new(&self.weights, load, usable);
        let (addr, port) = match self.field {
            Field::Source => (request.source, request.source_port),
            Field::Destination => (request.destination, request.destination_port),
        };
        let b = hash_bucket(addr, if self.options.port { port } else { 0 });
        let first = self.bucket(b)?;
        if view.eligible(first) {
            return Some(first);
        }
        if !self.options.fallback {
            return None;
        }
        (0..BUCKETS).map(|k| self.buckets[(2 * b + k) % BUCKETS] as usize).find(|&m| view.eligible(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(table: &[usize], member: usize) -> usize {
        table.iter().filter(|&&m| m == member).count()
    }

    #[test]
    fn hash_bucket_is_the_kernel_hash_32() {
        // (0x0a000001 * 0x61c88647) mod 2^32 = 0x27c88647 -> bucket 0x27.
        assert_eq!(hash_bucket("10.0.0.1".parse().expect("address"), 0), 0x27);
        assert_eq!(hash_bucket("::ffff:10.0.0.1".parse().expect("address"), 0), 0x27);
        // Port 1 adds 1 before the multiply: 0x0a000002 * 0x61c88647.
        assert_eq!(hash_bucket("10.0.0.1".parse().expect("address"), 1), 0x89);
        // fd00::1 folds to 0xfd000000 ^ 1.
        assert_eq!(
            hash_bucket("fd00::1".parse().expect("address"), 0),
            hash_bucket("253.0.0.1".parse().expect("address"), 0)
        );
    }

    #[test]
    fn hash_buckets_fill_as_ipvs_when_weights_fit() {
        let t = hash_buckets(&[2, 1]);
        assert_eq!(t.len(), BUCKETS);
        assert_eq!(t[..6], [0, 0, 1, 0, 0, 1]);
        // 85 rounds of 3 and one bucket left, which member 0 takes.
        assert_eq!((count(&t, 0), count(&t, 1)), (171, 85));
        let t = hash_buckets(&[1, 0, 1, 1]);
        assert_eq!((count(&t, 0), count(&t, 1), count(&t, 2), count(&t, 3)), (86, 0, 85, 85));
        // gcd first: [4, 2] fills as [2, 1].
        assert_eq!(hash_buckets(&[4, 2]), hash_buckets(&[2, 1]));
        assert!(hash_buckets(&[0, 0]).is_empty());
    }

    #[test]
    fn hash_buckets_keep_every_member_when_weights_overflow_the_table() {
        let mut weights = vec![1000];
        weights.extend([1; 99]);
        let t = hash_buckets(&weights);
        assert_eq!(t.len(), BUCKETS);
        assert!((1..100).all(|m| count(&t, m) >= 1));
        // 1 + 156 * 1000 / 1099 = 142.9..: 142 plus a remainder bucket.
        assert_eq!(count(&t, 0), 143);
    }

    #[test]
    fn fallback_moves_only_the_unusable_members_keys_deterministically() {
        let members: Vec<Member> = (0..4).map(|id| Member { id, weight: 1 }).collect();
        let mut sh = Hashing::source(HashOptions::default());
        sh.update(&members);
        let mut rng = Rng::new(0);
        let mut moved = 0;
        for i in 0..=255u8 {
            let ip = IpAddr::from([192, 168, 1, i]);
            let r =
                Request { source: ip, source_port: 9, destination: ip, destination_port: 80, now: Default::default() };
            let all = sh.pick(&r, &[], &[true; 4], &mut rng).expect("a member");
            let without_1 = sh.pick(&r, &[], &[true, false, true, true], &mut rng).expect("a member");
            assert_eq!(sh.pick(&r, &[], &[true, false, true, true], &mut rng), Some(without_1));
            assert_ne!(without_1, 1);
            if all != 1 {
                assert_eq!(all, without_1, "a usable member keeps its keys");
            } else {
                moved += 1;
            }
        }
        assert!(moved > 0);
        let mut strict = Hashing::source(HashOptions { port: false, fallback: false });
        strict.update(&members);
        let r = Request {
            source: [192, 168, 1, 1].into(),
            source_port: 9,
            destination: [10, 0, 0, 1].into(),
            destination_port: 80,
            now: Default::default(),
        };
        let home = strict.pick(&r, &[], &[true; 4], &mut rng).expect("a member");
        let mut usable = [true; 4];
        usable[home] = false;
        assert_eq!(strict.pick(&r, &[], &usable, &mut rng), None);
    }
}
