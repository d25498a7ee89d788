//! mh: Maglev consistent hashing as IPVS `ip_vs_mh.c` builds it (a
//! permutation per member from two hashes, turns proportional to weight),
//! over a fixed prime table size.

use std::net::IpAddr;

use kproxy_model::Scheduler;

use crate::hashing::HashOptions;
use crate::member::{View, gcd_weight, weights};
use crate::siphash::{encode_ip, siphash13};
use crate::{Load, Member, Request, Rng, Schedule};

/// Slots in a Maglev table: IPVS's default (`CONFIG_IP_VS_MH_TAB_INDEX`
/// 12). A prime, so every skip walks all slots. Each member gets
/// `M / N` slots, +-1, which is within 1% for N <= 40 and within 10% at
/// N = 400; the table costs 16 KiB per service here and 4093 map elements
/// in nftables, where 65521 would cost 256 KiB and 65521 elements.
pub const MAGLEV_SIZE: usize = 4093;

/// SipHash key of a member's permutation offset.
const OFFSET_KEY: [u8; 16] = *b"kproxy-mh-offset";
/// SipHash key of a member's permutation skip.
const SKIP_KEY: [u8; 16] = *b"kproxy-mh-stride";
/// SipHash key of a request's slot.
const LOOKUP_KEY: [u8; 16] = *b"kproxy-mh-lookup";
/// Turns are cut to this many bits (IPVS `IP_VS_MH_TAB_BITS`, 12 / 2).
const TURN_BITS: u32 = 6;
/// Rehashed probes of the fallback before it scans the table.
const FALLBACK_PROBES: u32 = 32;

/// The slot of a request key: SipHash-1-3 under `kproxy-mh-lookup` of
/// `[family (4 or 6), address octets, port (big-endian u16), probe
/// (big-endian u32)]`, mod [`MAGLEV_SIZE`]. The address is canonical
/// (IPv4-mapped IPv6 as IPv4); port is 0 unless hashed; probe 0 is the
/// key's home slot, probes 1.. its fallbacks.
pub fn maglev_slot(addr: IpAddr, port: u16, probe: u32) -> usize {
    let mut buf = [0u8; 19 + 6];
    let mut ip = [0u8; 19];
    let len = encode_ip(addr, &mut ip);
    buf[..len].copy_from_slice(&ip[..len]);
    buf[len..len + 2].copy_from_slice(&port.to_be_bytes());
    buf[len + 2..len + 6].copy_from_slice(&probe.to_be_bytes());
    (siphash13(&LOOKUP_KEY, &buf[..len + 6]) % MAGLEV_SIZE as u64) as usize
}

/// The Maglev lookup table: slot -> member index, [`MAGLEV_SIZE`] long;
/// every slot is set when any member has weight > 0, else it is empty.
///
/// Members with weight > 0 take turns in ascending `id` order (so the
/// caller's order does not matter); each claims its next free slot in
/// `offset, offset + skip, ...` mod M, where `offset = H(offset key, id) %
/// M` and `skip = H(skip key, id) % (M - 1) + 1`, H = SipHash-1-3 of
/// `id.to_le_bytes()`. A member claims `turns` slots per turn, turns =
/// `max(1, (weight / gcd) >> shift)`, shift = `max(0, bits(max weight /
/// gcd) - 6)` (IPVS). Past M members only the first M by id get a slot.
pub fn maglev_table(members: &[Member]) -> Vec<usize> {
    let weights = weights(members);
    let Some(step) = gcd_weight(&weights) else {
        return Vec::new();
    };
    let max = weights.iter().copied().max().unwrap_or(0) / step;
    let shift = (u32::BITS - max.leading_zeros()).saturating_sub(TURN_BITS);
    let mut order: Vec<usize> = (0..members.len()).filter(|&i| weights[i] > 0).collect();
    order.sort_by_key(|&i| (members[i].id, i));
    order.truncate(MAGLEV_SIZE);

    let m = MAGLEV_SIZE as u64;
    let mut setup: Vec<(usize, usize, usize, u32)> = order
        .iter()
        .map(|&i| {
            let id = members[i].id.to_le_bytes();
            let offset = (siphash13(&OFFSET_KEY, &id) % m) as usize;
            let skip = (siphash13(&SKIP_KEY, &id) % (m - 1) + 1) as usize;
            let turns = ((weights[i] / step) >> shift).max(1);
            (i, offset, skip, turns)
        })
        .collect();

    let mut table = vec![usize::MAX; MAGLEV_SIZE];
    let mut filled = 0;
    loop {
        for (member, next, skip, turns) in &mut setup {
            for _ in 0..*turns {
                // Terminates: M is prime, so the walk visits every slot.
                while table[*next] != usize::MAX {
                    *next = (*next + *skip) % MAGLEV_SIZE;
                }
                table[*next] = *member;
                filled += 1;
                if filled == MAGLEV_SIZE {
                    return table;
                }
            }
        }
    }
}

/// Maglev hashing of the source address (and port with
/// [`HashOptions::port`]): the member at the key's home slot. With
/// [`HashOptions::fallback`], when that member is unusable, the first
/// eligible member at the key's probe slots 1..=32, then at the slots
/// after home in table order (IPVS `MH_FALLBACK` rehashes with an offset
/// the same way).
#[derive(Clone, Debug)]
pub struct Mh {
    options: HashOptions,
    members: Vec<Member>,
    weights: Vec<u32>,
    table: Vec<u32>,
}

impl Mh {
    pub fn new(options: HashOptions) -> Self {
        Mh { options, members: Vec::new(), weights: Vec::new(), table: Vec::new() }
    }

    /// The member index at `slot` (`< MAGLEV_SIZE`) before any check of
    /// usability; `None` with no weighted member.
    pub fn slot(&self, slot: usize) -> Option<usize> {
        self.table.get(slot).map(|&m| m as usize)
    }
}

impl Schedule for Mh {
    fn kind(&self) -> Scheduler {
        Scheduler::Mh
    }

    fn update(&mut self, members: &[Member]) {
        if self.members == members {
            return;
        }
        self.members = members.to_vec();
        self.weights = weights(members);
        let table = maglev_table(members);
        self.table = table.into_iter().map(|m| u32::try_from(m).expect("member index fits u32")).collect();
    }

    fn pick(&mut self, request: &Request, load: &[Load], usable: &[bool], _: &mut Rng) -> Option<usize> {
        let view = View::new(&self.weights, load, usable);
        let port = if self.options.port { request.source_port } else { 0 };
        let home = maglev_slot(request.source, port, 0);
        let first = self.slot(home)?;
        if view.eligible(first) || !self.options.fallback {
            return Some(first).filter(|&m| view.eligible(m));
        }
        let probes = (1..=FALLBACK_PROBES).map(|p| maglev_slot(request.source, port, p));
        let scan = (1..MAGLEV_SIZE).map(|k| (home + k) % MAGLEV_SIZE);
        probes.chain(scan).map(|s| self.table[s] as usize).find(|&m| view.eligible(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(weights: &[u32]) -> Vec<Member> {
        weights
            .iter()
            .enumerate()
            .map(|(i, &weight)| Member { id: crate::member_id(([10, 0, 0, i as u8], 80).into()), weight })
            .collect()
    }

    fn count(table: &[usize], member: usize) -> usize {
        table.iter().filter(|&&m| m == member).count()
    }

    #[test]
    fn equal_weights_share_the_table_within_one_slot() {
        let t = maglev_table(&members(&[1; 7]));
        assert_eq!(t.len(), MAGLEV_SIZE);
        let counts: Vec<usize> = (0..7).map(|m| count(&t, m)).collect();
        // 4093 = 7 * 584 + 5.
        assert!(counts.iter().all(|&c| c == 584 || c == 585), "{counts:?}");
    }

    #[test]
    fn weights_become_turns_scaled_by_gcd_and_shift() {
        // gcd 10: turns 1 and 2.
        let t = maglev_table(&members(&[10, 0, 20]));
        assert_eq!(count(&t, 1), 0);
        assert!(count(&t, 0).abs_diff(MAGLEV_SIZE / 3) <= 1, "{}", count(&t, 0));
        // 1000 has 10 bits: shift 4, turns 62 and max(1, 1 >> 4) = 1.
        let t = maglev_table(&members(&[1000, 1]));
        assert!(count(&t, 1).abs_diff(MAGLEV_SIZE / 63) <= 1, "{}", count(&t, 1));
        assert!(maglev_table(&members(&[0, 0])).is_empty());
    }

    #[test]
    fn the_table_does_not_depend_on_member_order() {
        let m = members(&[1, 2, 3, 1]);
        let reversed: Vec<Member> = m.iter().rev().copied().collect();
        let a = maglev_table(&m);
        let b = maglev_table(&reversed);
        assert!(a.iter().zip(&b).all(|(&x, &y)| m[x].id == reversed[y].id));
    }

    #[test]
    fn slot_and_table_are_pinned() {
        // A change here moves keys between members on upgrade.
        assert_eq!(maglev_slot("10.1.2.3".parse().expect("address"), 0, 0), 465);
        let m: Vec<Member> =
            (1..=3).map(|i| Member { id: crate::member_id(([10, 0, 0, i], 80).into()), weight: 1 }).collect();
        assert_eq!(maglev_table(&m)[..12], [0, 0, 0, 1, 2, 1, 1, 1, 2, 1, 1, 0]);
    }

    #[test]
    fn slot_hash_separates_ports_probes_and_families() {
        let v4: IpAddr = "10.1.2.3".parse().expect("address");
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().expect("address");
        assert_eq!(maglev_slot(v4, 0, 0), maglev_slot(mapped, 0, 0));
        let slots = [maglev_slot(v4, 0, 0), maglev_slot(v4, 1, 0), maglev_slot(v4, 0, 1)];
        assert!(slots[0] != slots[1] || slots[0] != slots[2]);
        assert!(slots.iter().all(|&s| s < MAGLEV_SIZE));
    }

    #[test]
    fn fallback_avoids_the_unusable_member_and_strict_mode_refuses() {
        let m = members(&[1, 1, 1]);
        let mut mh = Mh::new(HashOptions::default());
        mh.update(&m);
        let mut strict = Mh::new(HashOptions { port: false, fallback: false });
        strict.update(&m);
        let mut rng = Rng::new(0);
        for i in 0..200u8 {
            let ip = IpAddr::from([172, 16, 0, i]);
            let r =
                Request { source: ip, source_port: 1, destination: ip, destination_port: 2, now: Default::default() };
            let home = mh.pick(&r, &[], &[true; 3], &mut rng).expect("a member");
            let mut usable = [true; 3];
            usable[home] = false;
            let other = mh.pick(&r, &[], &usable, &mut rng).expect("another member");
            assert_ne!(other, home);
            assert_eq!(strict.pick(&r, &[], &usable, &mut rng), None);
            usable = [false; 3];
            usable[home] = true;
            assert_eq!(mh.pick(&r, &[], &usable, &mut rng), Some(home));
        }
    }
}
