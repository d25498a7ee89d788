//! The pure state pipeline: Kubernetes objects in, the node's
//! [`kproxy_model::ProxyState`] and its [`kproxy_model::Changes`] out.
//!
//! Owns conversion and validation of wire objects, change tracking, the
//! standalone endpoint controller and endpoint categorisation. It must not
//! do I/O, read a clock, or depend on an async runtime: sources feed it
//! [`SourceEvent`]s and the runner asks it for changes.

mod annotation;
mod builder;
mod categorize;
mod config;
mod controller;
pub mod convert;
mod diff;
mod event;
pub mod info;
pub mod intern;
mod memory;
mod node;
mod service_port;
mod tracker;

pub use builder::{EventCounts, StateBuilder};
pub use categorize::{Candidate, EndpointSets, Locality, categorize};
pub use config::{NodePortAddresses, StateConfig};
pub use event::{Kind, Object, ObjectKey, SourceEvent};
pub use memory::{Counts as MemoryCounts, Memory};
pub use tracker::ChangeTracker;
