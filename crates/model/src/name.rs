//! Names of services and of their ports.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::Protocol;

/// A Service's namespace and name. The strings are shared: names are
/// copied into every index of every stage (trackers, state, the planner's
/// claims and owners), and at 100k services copies of the text add up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ServiceName {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ServiceName {
    pub fn new(namespace: impl Into<Arc<str>>, name: impl Into<Arc<str>>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for ServiceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One port of a Service: the unit every dataplane programs.
///
/// Ordered by service, then port name, then protocol, so all ports of one
/// service are adjacent in a sorted map.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ServicePortName {
    pub service: ServiceName,
    /// The port's `name`; empty for the single unnamed port of a service.
    pub port: Arc<str>,
    pub protocol: Protocol,
}

impl ServicePortName {
    pub fn new(service: ServiceName, port: impl Into<Arc<str>>, protocol: Protocol) -> Self {
        Self { service, port: port.into(), protocol }
    }

    /// The smallest possible port name of `service`: where a range over
    /// that service's ports in a sorted map starts.
    pub fn first_of(service: ServiceName) -> Self {
        Self::new(service, "", Protocol::Tcp)
    }
}

/// `namespace/name:port/PROTOCOL`, or `namespace/name/PROTOCOL` for an
/// unnamed port.
impl fmt::Display for ServicePortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}/{}", self.service, self.protocol)
        } else {
            write!(f, "{}:{}/{}", self.service, self.port, self.protocol)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_port_only_when_it_has_a_name() {
        let svc = ServiceName::new("default", "web");
        assert_eq!(ServicePortName::new(svc.clone(), "http", Protocol::Tcp).to_string(), "default/web:http/TCP");
        assert_eq!(ServicePortName::new(svc, "", Protocol::Udp).to_string(), "default/web/UDP");
    }

    #[test]
    fn first_of_sorts_before_every_port_of_the_service() {
        let svc = ServiceName::new("a", "x");
        let first = ServicePortName::first_of(svc.clone());
        for protocol in Protocol::ALL {
            assert!(first <= ServicePortName::new(svc.clone(), "", protocol));
            assert!(first < ServicePortName::new(svc.clone(), "a", protocol));
        }
        assert!(ServicePortName::new(ServiceName::new("a", "w"), "zz", Protocol::Sctp) < first);
    }

    #[test]
    fn ports_of_one_service_sort_together() {
        let a = ServicePortName::new(ServiceName::new("a", "x"), "z", Protocol::Tcp);
        let b = ServicePortName::new(ServiceName::new("a", "y"), "a", Protocol::Tcp);
        let c = ServicePortName::new(ServiceName::new("a", "x"), "zz", Protocol::Tcp);
        let mut v = vec![b.clone(), c.clone(), a.clone()];
        v.sort();
        assert_eq!(v, vec![a, c, b]);
    }
}
