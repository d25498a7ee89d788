//! The IPVS mode's planner. Pure: no kernel, no netlink, no files, no clock.
//!
//! [`plan`] turns a [`kproxy_model::ProxyState`] into one IPVS virtual
//! server per frontend (cluster IP, external IP, load-balancer IP, node port
//! on each node address) plus the addresses to bind on `kube-ipvs0`;
//! [`diff`] compares that [`Plan`] with what the kernel holds and returns
//! only the [`Op`]s that change something, including graceful termination
//! of destinations that leave.
//!
//! [`trace`] walks the plan and its companion table for one connection
//! (what `kproxy trace` shows); [`render`] prints the virtual servers as
//! `ipvsadm-save` writes them.
//!
//! The types here mirror the kernel's shapes (`kproxy-netlink`'s
//! `ipvs::types`) without depending on them: the apply edge translates.
//! What IPVS cannot do (masquerade, source ranges, REJECT/DROP verdicts,
//! telling in-cluster sources apart) belongs to the companion nftables
//! table, not to this crate.

pub mod companion;
mod config;
mod diff;
mod plan;
pub mod render;
pub mod trace;
mod types;

pub use config::PlanConfig;
pub use diff::{Op, diff};
pub use plan::{ipvs_scheduler, is_short_circuit_mark, plan};
pub use types::{
    Connections, ObservedServer, Owner, Plan, RealServer, Rejected, ServerKey, ShortCircuit, VirtualServer,
};
