//! The client hash of the hashing schedulers (`KP_SCHED_HASH_*`), the same
//! function as the BPF programs' `kp_hash` (`kproxy_maps.h` defines it).

/// The hash of a 16-byte client or frontend address (or, on the socket
/// hooks, a network namespace cookie in the first eight bytes).
pub fn kp_hash(bytes: &[u8; 16]) -> u32 {
    let mut h: u32 = 0x9e37_79b9;
    for word in bytes.chunks_exact(4) {
        let w = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        h ^= w;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
    }
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared with the BPF side's test (`crates/bpf`): these values pin the
    /// function, so a change on either side fails both.
    const VECTORS: &[([u8; 16], u32)] = &[
        ([0; 16], 0x0ec3_cf7a),
        ([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 244, 1, 10], 0xe845_9841),
        ([0xfd, 0, 0, 0x10, 0x2, 0x44, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a], 0x68bf_7a48),
    ];

    #[test]
    fn the_hash_matches_the_programs_test_vectors() {
        for (bytes, want) in VECTORS {
            assert_eq!(kp_hash(bytes), *want, "{bytes:?}");
        }
    }
}
