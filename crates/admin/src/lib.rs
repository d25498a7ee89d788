//! The admin surface of a running kproxy: health, metrics and the state it
//! programs.
//!
//! [`health`] holds the proxy's health as upstream's ProxyHealthServer
//! defines it, [`metrics`] the Prometheus registry with upstream's names,
//! and [`router`] the two HTTP routers (the healthz one, meant for load
//! balancers, and the metrics one, meant for operators); [`inspect`] the
//! routes that trace and render the applied rules for operators. Routers are plain
//! values, tested without sockets; binding them is the binary's job.

pub mod health;
pub mod health_check;
pub mod inspect;
pub mod listing;
pub mod metrics;
pub mod router;
pub mod state_report;

pub use health::{Clock, Health, HealthReport, SystemClock};
pub use health_check::{HealthCheck, HealthChecks, serve_health_checks};
pub use inspect::{Inspect, InspectError, StateOutput, TraceQuery, inspect_router};
pub use metrics::Metrics;
pub use router::{AdminState, configz_router, health_router, metrics_router};
pub use state_report::{NotProgrammed, StateReport};
