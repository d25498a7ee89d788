//! The ebpf mode's planner. Pure: no kernel, no BPF syscalls, no files, no
//! clock.
//!
//! [`maps`] mirrors the BPF programs' map layout
//! (`crates/bpf/programs/kproxy_maps.h`) byte for byte; [`hash`] is the
//! client hash the programs use for the hashing schedulers, so the tracer
//! can predict their choice.

pub mod hash;
pub mod maps;
