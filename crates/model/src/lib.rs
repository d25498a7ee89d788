//! Pure domain types shared by every part of kproxy.
//!
//! This crate owns the vocabulary of the data flow (`ServicePortName`,
//! `Frontend`, `Endpoint`, `ServicePort`, `ProxyState`, `Changes`) and their
//! JSON shape (`/state`): camelCase keys with Kubernetes' initialisms
//! (`podCIDRs`), and kinds spelt as Kubernetes spells them (`ClusterIP`). It does
//! no I/O, reads no clock and knows nothing about Kubernetes' wire types:
//! `kproxy-state` converts those into these.

mod addr;
mod annotation;
mod changes;
mod endpoint;
mod frontend;
mod health_check;
mod ignored;
mod name;
mod protocol;
mod scheduler;
mod service_port;
mod state;

pub use addr::{parse_ipv4_net_sloppy, parse_ipv4_sloppy};
pub use annotation::{Annotation, AnnotationWarning, ModeSupport, Problem, WeightSupport};
pub use changes::{Changes, StaleUdpEndpoint};
pub use endpoint::Endpoint;
pub use frontend::{Frontend, FrontendKind};
pub use health_check::{HealthCheck, Probe};
pub use ignored::IgnoreReason;
pub use ipnet::IpNet;
pub use name::{ServiceName, ServicePortName};
pub use protocol::{IpFamily, Protocol};
pub use scheduler::Scheduler;
pub use service_port::{ServicePort, SessionAffinity, TrafficPolicy};
pub use state::{FamilyState, NodeState, ProxyState};
