//! Test helpers: builders for the Kubernetes objects kproxy reads, a
//! scenario harness that feeds them through conversion into the state, and a
//! fake API server for the sources.
//!
//! Builders panic on nonsense (that is a bug in the test), never on what
//! kproxy is supposed to reject: invalid values are built as given so tests
//! can check the rejection.

pub mod apiserver;
pub mod objects;
pub mod scenario;
pub mod vm;

pub use objects::{EndpointBuilder, NodeBuilder, PodBuilder, ServiceBuilder, SliceBuilder, node, pod, service, slice};
pub use scenario::Scenario;
