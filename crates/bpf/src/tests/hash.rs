//! The programs' kp_hash is the planner's (`kproxy_ebpf::hash::kp_hash`):
//! `kp_hash_selftest` runs it on 16 bytes through BPF_PROG_TEST_RUN.

use std::os::fd::AsFd;

use aya::Ebpf;
use aya::programs::SchedClassifier;

use super::support::kernel_available;
use crate::{programs, sys};

/// The vectors of `kproxy_ebpf::hash`'s tests, which pin the function.
const VECTORS: &[([u8; 16], u32)] = &[
    ([0; 16], 0x0ec3_cf7a),
    ([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 244, 1, 10], 0xe845_9841),
    ([0xfd, 0, 0, 0x10, 0x2, 0x44, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a], 0x68bf_7a48),
];

#[test]
fn the_programs_hash_equals_the_planners_on_the_shared_vectors_and_more() {
    if !kernel_available("hash") {
        return;
    }
    let mut ebpf = Ebpf::load(crate::object()).expect("parse the object");
    let program: &mut SchedClassifier =
        ebpf.program_mut(programs::HASH_SELFTEST).expect("the selftest").try_into().expect("a classifier");
    program.load().expect("load the selftest");
    let fd = program.fd().expect("loaded");
    let run = |bytes: &[u8; 16]| {
        let mut packet = vec![0u8; 14];
        packet.extend_from_slice(bytes);
        sys::prog_test_run(fd.as_fd(), &packet).expect("BPF_PROG_TEST_RUN")
    };
    for (bytes, want) in VECTORS {
        assert_eq!(run(bytes), *want, "vector {bytes:?}");
        assert_eq!(kproxy_ebpf::hash::kp_hash(bytes), *want);
    }
    // A cheap generator is enough to cover every byte position.
    let mut x: u32 = 12345;
    for _ in 0..64 {
        let mut bytes = [0u8; 16];
        for b in &mut bytes {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
        assert_eq!(run(&bytes), kproxy_ebpf::hash::kp_hash(&bytes), "{bytes:?}");
    }
}
