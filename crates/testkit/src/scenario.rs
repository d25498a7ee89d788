//! A state scenario: Kubernetes objects in, ProxyState and Changes out.

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kproxy_model::{Changes, Endpoint, IpFamily, ProxyState, ServiceName, ServicePort, ServicePortName};
use kproxy_state::{Kind, Object, ObjectKey, SourceEvent, StateBuilder, StateConfig, convert};

/// Drives a [`StateBuilder`] with wire objects, converting them as a source
/// would. Conversion failures panic: use `convert` directly to test them.
pub struct Scenario {
    pub builder: StateBuilder,
}

impl Scenario {
    pub fn new(config: StateConfig) -> Self {
        Self { builder: StateBuilder::new(config) }
    }

    /// Node `node-a`, standalone (endpoint controller on, Node optional).
    pub fn standalone() -> Self {
        Self::new(StateConfig { node_name: "node-a".into(), endpoint_controller: true, ..StateConfig::default() })
    }

    /// Node `node-a`, as in a cluster (slices only, the Node required).
    pub fn cluster() -> Self {
        Self::new(StateConfig { node_name: "node-a".into(), node_required: true, ..StateConfig::default() })
    }

    fn apply(&mut self, object: Object) -> &mut Self {
        self.builder.apply(SourceEvent::Apply(object));
        self
    }

    pub fn service(&mut self, svc: Service) -> &mut Self {
        self.apply(Object::service(convert::service(&svc).expect("valid service")))
    }

    pub fn slice(&mut self, slice: EndpointSlice) -> &mut Self {
        self.apply(convert::endpoint_slice(&slice).expect("valid slice"))
    }

    pub fn endpoints(&mut self, eps: Endpoints) -> &mut Self {
        self.apply(convert::endpoints(&eps).expect("valid endpoints"))
    }

    pub fn pod(&mut self, pod: Pod) -> &mut Self {
        self.apply(Object::Pod(convert::pod(&pod).expect("valid pod")))
    }

    pub fn node(&mut self, node: Node) -> &mut Self {
        self.apply(Object::Node(convert::node(&node).expect("valid node")))
    }

    pub fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> &mut Self {
        self.builder.apply(SourceEvent::Delete(ObjectKey::new(kind, namespace, name)));
        self
    }

    /// Folds pending events into the state.
    pub fn sync(&mut self) -> Changes {
        self.builder.take_changes()
    }

    pub fn state(&self) -> &ProxyState {
        self.builder.state()
    }

    /// The IPv4 service port `namespace/name:port` (port name may be empty),
    /// whatever its protocol; panics when missing.
    pub fn port(&self, namespace: &str, name: &str, port: &str) -> &ServicePort {
        self.find(IpFamily::V4, namespace, name, port)
            .unwrap_or_else(|| panic!("no IPv4 port {namespace}/{name}:{port}"))
    }

    pub fn find(&self, family: IpFamily, namespace: &str, name: &str, port: &str) -> Option<&ServicePort> {
        let service = ServiceName::new(namespace, name);
        self.state()
            .family(family)
            .service_ports
            .values()
            .map(AsRef::as_ref)
            .find(|p| p.name.service == service && *p.name.port == *port)
    }
}

/// `ip:port` of each endpoint, in order.
pub fn addrs(endpoints: &[Endpoint]) -> Vec<String> {
    endpoints.iter().map(|e| e.addr().to_string()).collect()
}

/// The name of an IPv4/any-family service port, for asserting on `Changes`.
pub fn port_name(namespace: &str, name: &str, port: &str, protocol: kproxy_model::Protocol) -> ServicePortName {
    ServicePortName::new(ServiceName::new(namespace, name), port, protocol)
}
