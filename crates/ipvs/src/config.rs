//! What the planner needs from configuration and the node, as values.

use std::net::IpAddr;

use kproxy_model::Scheduler;

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
    /// The scheduler a service port asks for, before checking that IPVS has
    /// it.
    pub fn scheduler_for(&self, annotated: Option<Scheduler>) -> Scheduler {
        annotated.or(self.default_scheduler).unwrap_or(Scheduler::Rr)
    }
}
