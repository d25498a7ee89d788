//! Fluent builders for Service, EndpointSlice, Pod and Node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Container, ContainerPort, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeSpec,
    NodeStatus, Pod, PodCondition, PodIP, PodSpec, PodStatus, Service, ServicePort, ServiceSpec, ServiceStatus,
    SessionAffinityConfig, Taint,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForNode, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn meta(namespace: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

fn a_time() -> Time {
    Time("2026-11-30T12:00:00Z".parse().expect("a valid timestamp"))
}

/// A Service; `ClusterIP` type with no ports until told otherwise.
pub fn service(namespace: &str, name: &str) -> ServiceBuilder {
    ServiceBuilder(Service { metadata: meta(namespace, name), spec: Some(ServiceSpec::default()), status: None })
}

pub struct ServiceBuilder(Service);

impl ServiceBuilder {
    fn spec(&mut self) -> &mut ServiceSpec {
        self.0.spec.as_mut().expect("builder always has a spec")
    }

    pub fn type_(mut self, type_: &str) -> Self {
        self.spec().type_ = Some(type_.to_owned());
        self
    }

    pub fn cluster_ip(mut self, ip: &str) -> Self {
        self.spec().cluster_ip = Some(ip.to_owned());
        self.spec().cluster_ips = Some(vec![ip.to_owned()]);
        self
    }

    pub fn cluster_ips(mut self, ips: &[&str]) -> Self {
        self.spec().cluster_ip = ips.first().map(|ip| (*ip).to_owned());
        self.spec().cluster_ips = Some(ips.iter().map(|ip| (*ip).to_owned()).collect());
        self
    }

    /// A port whose target is the same number.
    pub fn port(self, name: &str, protocol: &str, port: i32) -> Self {
        self.port_to(name, protocol, port, IntOrString::Int(port))
    }

    /// A port with a named target port.
    pub fn port_named(self, name: &str, protocol: &str, port: i32, target: &str) -> Self {
        self.port_to(name, protocol, port, IntOrString::String(target.to_owned()))
    }

    pub fn port_to(mut self, name: &str, protocol: &str, port: i32, target: IntOrString) -> Self {
        self.spec().ports.get_or_insert_with(Vec::new).push(ServicePort {
            name: (!name.is_empty()).then(|| name.to_owned()),
            protocol: Some(protocol.to_owned()),
            port,
            target_port: Some(target),
            ..ServicePort::default()
        });
        self
    }

    /// Sets the node port of the last added port.
    pub fn node_port(mut self, node_port: i32) -> Self {
        let ports = self.spec().ports.as_mut().expect("add a port before its node port");
        ports.last_mut().expect("add a port before its node port").node_port = Some(node_port);
        self
    }

    pub fn selector(mut self, labels: &[(&str, &str)]) -> Self {
        let selector: BTreeMap<String, String> = labels.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        self.spec().selector = Some(selector);
        self
    }

    pub fn external_ips(mut self, ips: &[&str]) -> Self {
        self.spec().external_ips = Some(ips.iter().map(|ip| (*ip).to_owned()).collect());
        self
    }

    pub fn load_balancer_ingress(mut self, ip: &str, ip_mode: Option<&str>) -> Self {
        let status = self.0.status.get_or_insert_with(ServiceStatus::default);
        let lb = status.load_balancer.get_or_insert_with(LoadBalancerStatus::default);
        lb.ingress.get_or_insert_with(Vec::new).push(LoadBalancerIngress {
            ip: Some(ip.to_owned()),
            ip_mode: ip_mode.map(str::to_owned),
            ..LoadBalancerIngress::default()
        });
        self
    }

    pub fn source_ranges(mut self, ranges: &[&str]) -> Self {
        self.spec().load_balancer_source_ranges = Some(ranges.iter().map(|r| (*r).to_owned()).collect());
        self
    }

    pub fn external_traffic_policy(mut self, policy: &str) -> Self {
        self.spec().external_traffic_policy = Some(policy.to_owned());
        self
    }

    pub fn internal_traffic_policy(mut self, policy: &str) -> Self {
        self.spec().internal_traffic_policy = Some(policy.to_owned());
        self
    }

    pub fn health_check_node_port(mut self, port: i32) -> Self {
        self.spec().health_check_node_port = Some(port);
        self
    }

    pub fn session_affinity(mut self, affinity: &str, timeout: Option<i32>) -> Self {
        self.spec().session_affinity = Some(affinity.to_owned());
        self.spec().session_affinity_config =
            timeout.map(|t| SessionAffinityConfig { client_ip: Some(ClientIPConfig { timeout_seconds: Some(t) }) });
        self
    }

    pub fn publish_not_ready_addresses(mut self) -> Self {
        self.spec().publish_not_ready_addresses = Some(true);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    pub fn build(self) -> Service {
        self.0
    }
}

/// An EndpointSlice of `service`, `IPv4` unless told otherwise.
pub fn slice(namespace: &str, name: &str, service: &str) -> SliceBuilder {
    let mut metadata = meta(namespace, name);
    metadata.labels = Some(BTreeMap::from([("kubernetes.io/service-name".to_owned(), service.to_owned())]));
    SliceBuilder(EndpointSlice { metadata, address_type: "IPv4".into(), endpoints: Vec::new(), ports: None })
}

pub struct SliceBuilder(EndpointSlice);

impl SliceBuilder {
    pub fn address_type(mut self, address_type: &str) -> Self {
        self.0.address_type = address_type.to_owned();
        self
    }

    pub fn port(mut self, name: &str, protocol: &str, port: i32) -> Self {
        self.0.ports.get_or_insert_with(Vec::new).push(EndpointPort {
            name: Some(name.to_owned()),
            protocol: Some(protocol.to_owned()),
            port: Some(port),
            app_protocol: None,
        });
        self
    }

    pub fn endpoint(mut self, endpoint: EndpointBuilder) -> Self {
        self.0.endpoints.push(endpoint.0);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    pub fn build(self) -> EndpointSlice {
        self.0
    }
}

/// A ready endpoint at `ip`, on no particular node.
pub struct EndpointBuilder(Endpoint);

impl EndpointBuilder {
    pub fn new(ip: &str) -> Self {
        EndpointBuilder(Endpoint {
            addresses: vec![ip.to_owned()],
            conditions: Some(EndpointConditions { ready: Some(true), serving: Some(true), terminating: Some(false) }),
            ..Endpoint::default()
        })
    }

    fn conditions(&mut self) -> &mut EndpointConditions {
        self.0.conditions.get_or_insert_with(EndpointConditions::default)
    }

    pub fn node(mut self, node: &str) -> Self {
        self.0.node_name = Some(node.to_owned());
        self
    }

    pub fn zone(mut self, zone: &str) -> Self {
        self.0.zone = Some(zone.to_owned());
        self
    }

    pub fn not_ready(mut self) -> Self {
        self.conditions().ready = Some(false);
        self.conditions().serving = Some(false);
        self
    }

    /// Shutting down but still serving.
    pub fn terminating_serving(mut self) -> Self {
        *self.conditions() = EndpointConditions { ready: Some(false), serving: Some(true), terminating: Some(true) };
        self
    }

    /// Shutting down and no longer serving.
    pub fn terminating_not_serving(mut self) -> Self {
        *self.conditions() = EndpointConditions { ready: Some(false), serving: Some(false), terminating: Some(true) };
        self
    }

    /// Conditions left out entirely, as old writers do.
    pub fn no_conditions(mut self) -> Self {
        self.0.conditions = None;
        self
    }

    pub fn hint_zones(mut self, zones: &[&str]) -> Self {
        let hints = self.0.hints.get_or_insert_with(EndpointHints::default);
        hints.for_zones = Some(zones.iter().map(|z| ForZone { name: (*z).to_owned() }).collect());
        self
    }

    pub fn hint_nodes(mut self, nodes: &[&str]) -> Self {
        let hints = self.0.hints.get_or_insert_with(EndpointHints::default);
        hints.for_nodes = Some(nodes.iter().map(|n| ForNode { name: (*n).to_owned() }).collect());
        self
    }
}

/// A running, ready Pod with no IP until given one.
pub fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder(Pod {
        metadata: meta(namespace, name),
        spec: Some(PodSpec {
            containers: vec![Container { name: "main".into(), ..Container::default() }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    })
}

pub struct PodBuilder(Pod);

impl PodBuilder {
    fn status(&mut self) -> &mut PodStatus {
        self.0.status.as_mut().expect("builder always has a status")
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().expect("builder always has a spec")
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0.metadata.labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
        self
    }

    pub fn ip(mut self, ip: &str) -> Self {
        let status = self.status();
        status.pod_ip.get_or_insert_with(|| ip.to_owned());
        status.pod_ips.get_or_insert_with(Vec::new).push(PodIP { ip: ip.to_owned() });
        self
    }

    pub fn node(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.to_owned());
        self
    }

    pub fn not_ready(mut self) -> Self {
        for c in self.status().conditions.iter_mut().flatten() {
            if c.type_ == "Ready" {
                c.status = "False".into();
            }
        }
        self
    }

    pub fn terminating(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(a_time());
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.status().phase = Some(phase.to_owned());
        self
    }

    pub fn container_port(mut self, name: &str, protocol: &str, port: i32) -> Self {
        let container = self.spec().containers.first_mut().expect("builder always has a container");
        container.ports.get_or_insert_with(Vec::new).push(ContainerPort {
            name: Some(name.to_owned()),
            protocol: Some(protocol.to_owned()),
            container_port: port,
            ..ContainerPort::default()
        });
        self
    }

    /// A sidecar (init container with `restartPolicy: Always`) port.
    pub fn sidecar_port(mut self, name: &str, protocol: &str, port: i32) -> Self {
        self.spec().init_containers.get_or_insert_with(Vec::new).push(Container {
            name: format!("sidecar-{name}"),
            restart_policy: Some("Always".into()),
            ports: Some(vec![ContainerPort {
                name: Some(name.to_owned()),
                protocol: Some(protocol.to_owned()),
                container_port: port,
                ..ContainerPort::default()
            }]),
            ..Container::default()
        });
        self
    }

    pub fn build(self) -> Pod {
        self.0
    }
}

/// A Node with no addresses until given some.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder(Node { metadata: meta("", name), spec: Some(NodeSpec::default()), status: Some(NodeStatus::default()) })
}

pub struct NodeBuilder(Node);

impl NodeBuilder {
    pub fn zone(mut self, zone: &str) -> Self {
        let labels = self.0.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert("topology.kubernetes.io/zone".into(), zone.into());
        self
    }

    pub fn address(mut self, type_: &str, ip: &str) -> Self {
        let status = self.0.status.as_mut().expect("builder always has a status");
        status.addresses.get_or_insert_with(Vec::new).push(NodeAddress { type_: type_.into(), address: ip.into() });
        self
    }

    pub fn deleting(mut self) -> Self {
        self.0.metadata.deletion_timestamp = Some(a_time());
        self
    }

    pub fn taint(mut self, key: &str) -> Self {
        let spec = self.0.spec.as_mut().expect("builder always has a spec");
        spec.taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
        self
    }

    pub fn build(self) -> Node {
        self.0
    }
}
