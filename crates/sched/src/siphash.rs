//! SipHash-1-3 with fixed keys: the one keyed hash behind endpoint
//! identities, Maglev permutations and Maglev lookups.
//!
//! Implemented here rather than taken from `std` because std's hasher
//! algorithm is not guaranteed to stay the same across Rust releases, and
//! every node must compute the same values forever.

use std::net::{IpAddr, SocketAddr};

/// SipHash key of [`member_id`]: the ASCII bytes `kproxy-member-id`.
pub const MEMBER_ID_KEY: [u8; 16] = *b"kproxy-member-id";

/// SipHash-1-3 (1 compression round, 3 finalisation rounds, 64-bit output)
/// of `data` under the 16-byte `key`, read as two little-endian `u64`s.
pub fn siphash13(key: &[u8; 16], data: &[u8]) -> u64 {
    siphash(key, data, 1, 3)
}

/// The fixed identity of an endpoint: SipHash-1-3 under [`MEMBER_ID_KEY`]
/// of the address's canonical bytes (IPv4-mapped IPv6 becomes IPv4):
/// `[4, a, b, c, d, port_hi, port_lo]` for IPv4 and
/// `[6, <16 address bytes>, port_hi, port_lo]` for IPv6 (port big-endian).
pub fn member_id(addr: SocketAddr) -> u64 {
    let mut buf = [0u8; 19];
    let len = encode_ip(addr.ip(), &mut buf);
    buf[len..len + 2].copy_from_slice(&addr.port().to_be_bytes());
    siphash13(&MEMBER_ID_KEY, &buf[..len + 2])
}

/// Writes a family byte (4 or 6) and the canonical address octets into
/// `buf`, returning how many bytes it wrote.
pub(crate) fn encode_ip(ip: IpAddr, buf: &mut [u8; 19]) -> usize {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            buf[0] = 4;
            buf[1..5].copy_from_slice(&v4.octets());
            5
        }
        IpAddr::V6(v6) => {
            buf[0] = 6;
            buf[1..17].copy_from_slice(&v6.octets());
            17
        }
    }
}

fn siphash(key: &[u8; 16], data: &[u8], c_rounds: usize, d_rounds: usize) -> u64 {
    let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        v[3] ^= m;
        (0..c_rounds).for_each(|_| round(&mut v));
        v[0] ^= m;
    }
    // Last block: the remaining bytes, and the message length mod 256 in
    // the top byte.
    let mut last = [0u8; 8];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    let m = u64::from_le_bytes(last) | (data.len() as u64) << 56;
    v[3] ^= m;
    (0..c_rounds).for_each(|_| round(&mut v));
    v[0] ^= m;
    v[2] ^= 0xff;
    (0..d_rounds).for_each(|_| round(&mut v));
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE_KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    #[test]
    fn siphash_2_4_matches_the_reference_vectors() {
        // From the SipHash paper's vectors.h: key 00..0f, message 00..n-1.
        let message: Vec<u8> = (0..64).collect();
        assert_eq!(siphash(&REFERENCE_KEY, &message[..0], 2, 4), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash(&REFERENCE_KEY, &message[..1], 2, 4), 0x74f8_39c5_93dc_67fd);
        assert_eq!(siphash(&REFERENCE_KEY, &message[..15], 2, 4), 0xa129_ca61_49be_45e5);
    }

    #[test]
    #[allow(deprecated)]
    fn siphash_2_4_matches_std_for_every_length() {
        use std::hash::{Hasher, SipHasher};
        let message: Vec<u8> = (0u32..64).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..message.len() {
            let mut std = SipHasher::new_with_keys(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
            std.write(&message[..len]);
            assert_eq!(siphash(&REFERENCE_KEY, &message[..len], 2, 4), std.finish(), "length {len}");
        }
    }

    #[test]
    fn siphash_1_3_matches_std_default_hasher_with_zero_keys() {
        // std's DefaultHasher is SipHash-1-3 with zero keys today; this only
        // cross-checks the round counts, nothing relies on std staying so.
        use std::hash::{DefaultHasher, Hasher};
        let message: Vec<u8> = (0u32..40).map(|i| (i * 13 + 1) as u8).collect();
        for len in 0..message.len() {
            let mut std = DefaultHasher::new();
            std.write(&message[..len]);
            assert_eq!(siphash13(&[0; 16], &message[..len]), std.finish(), "length {len}");
        }
    }

    #[test]
    fn member_id_is_pinned_and_canonicalises_mapped_addresses() {
        let v4: SocketAddr = "10.0.0.1:8080".parse().expect("address");
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:8080".parse().expect("address");
        let other_port: SocketAddr = "10.0.0.1:8081".parse().expect("address");
        assert_eq!(member_id(v4), member_id(mapped));
        assert_ne!(member_id(v4), member_id(other_port));
        let bytes = [4, 10, 0, 0, 1, 0x1f, 0x90];
        assert_eq!(member_id(v4), siphash13(&MEMBER_ID_KEY, &bytes));
        let v6: SocketAddr = "[fd00::1]:80".parse().expect("address");
        let mut bytes = vec![6, 0xfd];
        bytes.extend([0; 14]);
        bytes.extend([1, 0, 80]);
        assert_eq!(member_id(v6), siphash13(&MEMBER_ID_KEY, &bytes));
        // Pinned (cross-checked with an independent implementation): a
        // change here changes every node's tables.
        assert_eq!(member_id(v4), 0x8beb_9d5f_5b8f_eb6e);
        assert_eq!(member_id(v6), 0xe4af_9869_a36a_6dba);
    }
}
