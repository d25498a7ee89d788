//! Random version-4 UUIDs, for uids and `Audit-Id`.

use std::hash::{BuildHasher, RandomState};

/// Every `RandomState` gets fresh SipHash keys, which is random enough for test ids.
pub(crate) fn random() -> u64 {
    RandomState::new().hash_one(0u8)
}

pub(crate) fn new_v4() -> String {
    let (high, low) = (random(), random());
    let high = (high & !0xf000) | 0x4000;
    let low = (low & !(0b11 << 62)) | (0b10 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_are_version_4_and_differ() {
        let (a, b) = (super::new_v4(), super::new_v4());
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }
}
