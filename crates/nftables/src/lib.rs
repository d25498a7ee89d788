//! The nftables mode's planner. Pure: no kernel, no files, no clock.
//!
//! kproxy's layout keeps per-service data in named maps and sets, not in
//! per-service chains: a frontend (`daddr . l4proto . dport`) maps to a
//! policy chain, then to a selection chain shared by every frontend with
//! the same endpoint count, which DNATs through a map keyed by
//! `frontend . index`. Syncing a service is adding and deleting its map
//! elements. Only session affinity and round robin get per-service chains.
//!
//! [`plan`] turns a [`kproxy_model::ProxyState`] into [`Op`]s for one
//! transaction ([`plan_streamed`] hands a full plan's elements to an
//! [`ElementSink`] as they are made instead); [`render`] prints them (or a whole [`Table`]) in `nft -f`
//! syntax; [`trace`] walks a [`Table`] for one packet.

pub mod ast;
mod base;
mod claims;
mod config;
mod diff;
pub mod masquerade;
pub mod names;
mod objects;
mod partial;
mod plan;
mod port;
pub mod render;
mod sink;
pub mod trace;

pub use base::from_pods;
pub use config::{LocalDetector, PlanConfig};
pub use objects::{BaseChain, Chain, ChainType, Element, Hook, SetData, SetDef, Table};
pub use plan::{Applied, FamilyPlan, Op, Plan, Planned, plan, plan_streamed, table};
pub use port::{MAX_WEIGHTED_SLOTS, SCHEDULERS, support};
pub use sink::{Collect, Discard, ElementSink};
