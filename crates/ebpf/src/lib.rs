//! The ebpf mode's planner. Pure: no kernel, no BPF syscalls, no files, no
//! clock.
//!
//! [`maps`] mirrors the BPF programs' map layout
//! (`crates/bpf/programs/kproxy_maps.h`) byte for byte; [`hash`] is the
//! client hash the programs use for the hashing schedulers, so the tracer
//! can predict their choice.
//!
//! [`plan`] turns a [`kproxy_model::ProxyState`] into map operations
//! ([`maps::Op`]) from what the maps hold ([`Applied`]); [`trace`] walks
//! map contents ([`maps::Contents`], planned or dumped) for one connection
//! as the programs would; [`companion`] is the small static nftables table
//! for what the programs leave to netfilter; [`render`] prints contents
//! and that table. docs/ebpf.md describes the whole mode.

mod applied;
mod claims;
pub mod companion;
mod config;
mod desire;
pub mod hash;
pub mod maps;
mod plan;
pub mod render;
pub mod trace;

pub use applied::Applied;
pub use config::{DEFAULT_REJECT_MARK, Error, MAX_WEIGHTED_SLOTS, PlanConfig, SCHEDULERS, cidr_key, support};
pub use desire::{frontend_key, owned_key, proto_number};
pub use kproxy_nftables::LocalDetector;
pub use plan::{Planned, desired, plan};
