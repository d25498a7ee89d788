//! What the planner needs from configuration and the node, as values.

use std::net::IpAddr;

use kproxy_model::{ModeSupport, Scheduler, WeightSupport};

use crate::plan::ipvs_scheduler;

/// The IPVS planner's settings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlanConfig {
    /// `ipvs.scheduler`, for service ports without a `kproxy.io/scheduler`
    /// annotation. `None` (the field left empty) is `rr`, as upstream.
    pub default_scheduler: Option<Scheduler>,
    /// The node addresses node ports are served on. `None` uses the node-port
    /// frontends the state computed from `nodePortAddresses`. `Some` replaces
    /// their addresses: IPVS cannot match "any local address" the way
    /// nftables' `fib daddr type local` does, so the apply edge may pass the
    /// addresses it observed on the node's interfaces instead.
    pub node_port_addresses: Option<Vec<IpAddr>>,
    /// `masqueradeBit`: short-circuit marks ([`crate::ShortCircuit`]) keep
    /// clear of it, and the node's marks include it.
    pub masquerade_bit: u32,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self { default_scheduler: None, node_port_addresses: None, masquerade_bit: 14 }
    }
}

impl PlanConfig {
    /// The default scheduler: `ipvs.scheduler` when IPVS has it, else `rr`.
    pub fn default_scheduler(&self) -> Scheduler {
        self.default_scheduler.filter(|s| ipvs_scheduler(*s).is_some()).unwrap_or(Scheduler::Rr)
    }

    /// The IPVS scheduler of a service port: its annotation when IPVS has
    /// that scheduler, else the default. The state gives one IPVS lacks as
    /// `None` and says so ([`PlanConfig::support`]); a state built without
    /// that gets the default here too, never an unserved port.
    pub fn scheduler_for(&self, annotated: Option<Scheduler>) -> &'static str {
        annotated
            .and_then(ipvs_scheduler)
            .or_else(|| ipvs_scheduler(self.default_scheduler()))
            .expect("the default scheduler is one IPVS has")
    }

    /// What this mode does of kproxy's annotations, for the state: every
    /// scheduler IPVS has, weights as they are, no health checks.
    pub fn support(&self) -> ModeSupport {
        ModeSupport {
            mode: "ipvs",
            default_scheduler: self.default_scheduler(),
            schedulers: Scheduler::ALL.into_iter().filter(|s| ipvs_scheduler(*s).is_some()).collect(),
            weights: WeightSupport::Full,
            health_checks: false,
        }
    }
}
