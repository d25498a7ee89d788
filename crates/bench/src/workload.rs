//! The benchmark workload: N services x M endpoints, deterministic, built as
//! Kubernetes objects with the testkit builders.
//!
//! Every object is a function of its index, so a worker can rebuild one
//! service's slice (for a change) without holding 100k objects, and two
//! processes given the same [`Spec`] build the same cluster. This module
//! only builds objects; feeding them to the state is [`Spec::fold`], and
//! writing them to disk is [`Spec::write_manifests`].

use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kproxy_model::IpNet;
use kproxy_state::{Object, SourceEvent, StateBuilder, StateConfig, convert};
use kproxy_testkit::{EndpointBuilder, node, service, slice};
use serde::{Deserialize, Serialize};

/// The node kproxy runs as.
pub const NODE: &str = "node-a";
/// node-a's InternalIP: node ports are served on it (as in kproxy-sandbox).
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 77, 1);
/// Service CIDR: a /12 holds a million cluster IPs.
pub const SERVICE_CIDR: &str = "10.96.0.0/12";
/// Pod network: workload endpoints, changed endpoints and the sandbox's
/// pods (10.244.x.x) are all inside it.
pub const CLUSTER_CIDR: &str = "10.128.0.0/9";
const CLUSTER_IP_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const ENDPOINT_BASE: u32 = u32::from_be_bytes([10, 128, 0, 0]);
/// Endpoints introduced by changes come from here (10.160.0.0/11).
const CHANGED_BASE: u32 = u32::from_be_bytes([10, 160, 0, 0]);
const LOAD_BALANCER_BASE: u32 = u32::from_be_bytes([172, 16, 0, 0]);
const FIRST_NODE_PORT: u32 = 30000;
/// Endpoints are spread over ten nodes; node-a holds one in ten.
const NODES: [&str; 10] =
    [NODE, "node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h", "node-i", "node-j"];
/// Ports of each class (one port per service).
pub const TCP_PORT: u16 = 80;
pub const TCP_TARGET: u16 = 8080;
const UDP_PORT: u16 = 53;
const UDP_TARGET: u16 = 5353;
/// Services per namespace.
const PER_NAMESPACE: usize = 1000;
/// The most services the addressing plan holds: node ports, numbered from
/// 30000 for three services in ten, must stay below 65536.
pub const MAX_SERVICES: usize = 110_000;

/// What kind of service index `i` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// ClusterIP, TCP (60 %).
    ClusterTcp,
    /// ClusterIP, UDP (10 %).
    ClusterUdp,
    /// NodePort, TCP (20 %).
    NodePort,
    /// LoadBalancer with an ingress IP and `externalTrafficPolicy: Local`,
    /// TCP (10 %).
    LoadBalancer,
}

/// Which workload to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub services: usize,
    pub endpoints: usize,
    /// For first-packet runs: the first and the last service (in name
    /// order) are TCP ClusterIP services whose only endpoint is this pod
    /// (on node-a, port [`TCP_TARGET`]).
    pub pod: Option<Ipv4Addr>,
}

impl Spec {
    pub fn new(services: usize, endpoints: usize) -> Spec {
        Spec { services, endpoints, pod: None }
    }

    /// The addressing plan's limits.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.services >= 1, "at least one service");
        anyhow::ensure!(self.services <= MAX_SERVICES, "at most {MAX_SERVICES} services (node ports run out)");
        anyhow::ensure!((1..=1000).contains(&self.endpoints), "1 to 1000 endpoints per service (one slice each)");
        anyhow::ensure!(self.services * self.endpoints < 1 << 21, "at most 2M endpoints (10.128.0.0/11)");
        Ok(())
    }

    pub fn class(&self, i: usize) -> Class {
        if self.is_probe_target(i) {
            return Class::ClusterTcp;
        }
        match i % 10 {
            1 | 5 => Class::NodePort,
            3 => Class::ClusterUdp,
            8 => Class::LoadBalancer,
            _ => Class::ClusterTcp,
        }
    }

    /// The first or the last service of a first-packet workload.
    fn is_probe_target(&self, i: usize) -> bool {
        self.pod.is_some() && (i == 0 || i + 1 == self.services)
    }

    pub fn namespace(&self, i: usize) -> String {
        format!("ns-{:03}", i / PER_NAMESPACE)
    }

    pub fn name(&self, i: usize) -> String {
        format!("svc-{i:06}")
    }

    pub fn cluster_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(CLUSTER_IP_BASE + 1 + index_u32(i))
    }

    /// Unique per service with a node port (NodePort and LoadBalancer).
    fn node_port(&self, i: usize) -> i32 {
        let decade = index_u32(i / 10) * 3;
        let within = match i % 10 {
            0 | 1 => 0,
            2..=5 => 1,
            _ => 2,
        };
        i32::try_from(FIRST_NODE_PORT + decade + within).expect("checked: below 65536")
    }

    fn load_balancer_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(LOAD_BALANCER_BASE + 1 + index_u32(i / 10))
    }

    /// (port name, protocol, port, target port) of service `i`.
    fn port(&self, i: usize) -> (&'static str, &'static str, u16, u16) {
        match self.class(i) {
            Class::ClusterUdp => ("dns", "UDP", UDP_PORT, UDP_TARGET),
            _ => ("http", "TCP", TCP_PORT, TCP_TARGET),
        }
    }

    pub fn service(&self, i: usize) -> Service {
        let (port_name, protocol, port, _) = self.port(i);
        let mut svc = service(&self.namespace(i), &self.name(i)).cluster_ip(&self.cluster_ip(i).to_string()).port_to(
            port_name,
            protocol,
            i32::from(port),
            self.target(i),
        );
        svc = match self.class(i) {
            Class::ClusterTcp | Class::ClusterUdp => svc,
            Class::NodePort => svc.type_("NodePort").node_port(self.node_port(i)),
            Class::LoadBalancer => svc
                .type_("LoadBalancer")
                .node_port(self.node_port(i))
                .external_traffic_policy("Local")
                .load_balancer_ingress(&self.load_balancer_ip(i).to_string(), None),
        };
        svc.build()
    }

    fn target(&self, i: usize) -> k8s_openapi::apimachinery::pkg::util::intstr::IntOrString {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i32::from(self.port(i).3))
    }

    /// Endpoint `j` of service `i`: address and node.
    pub fn endpoint(&self, i: usize, j: usize) -> (Ipv4Addr, &'static str) {
        let e = i * self.endpoints + j;
        (Ipv4Addr::from(ENDPOINT_BASE + 1 + index_u32(e)), NODES[e % NODES.len()])
    }

    /// Service `i`'s one EndpointSlice; `change` replaces one endpoint with
    /// a fresh address (the `change`-th change of the run).
    pub fn slice(&self, i: usize, change: Option<usize>) -> EndpointSlice {
        let (port_name, protocol, _, target) = self.port(i);
        let name = self.name(i);
        let mut s =
            slice(&self.namespace(i), &format!("{name}-abcde"), &name).port(port_name, protocol, i32::from(target));
        if let (true, Some(pod)) = (self.is_probe_target(i), self.pod) {
            return s.endpoint(EndpointBuilder::new(&pod.to_string()).node(NODE)).build();
        }
        for j in 0..self.endpoints {
            let (mut ip, node) = self.endpoint(i, j);
            if change.is_some_and(|k| k % self.endpoints == j) {
                ip = Ipv4Addr::from(CHANGED_BASE + 1 + index_u32(change.unwrap_or_default()));
            }
            s = s.endpoint(EndpointBuilder::new(&ip.to_string()).node(node));
        }
        s.build()
    }

    pub fn node(&self) -> Node {
        node(NODE).address("InternalIP", &NODE_IP.to_string()).build()
    }

    /// The service the `k`-th change of a run touches: distinct for the
    /// first N changes (the stride is prime to N), spread over the whole
    /// map. With `tcp_only`, the next TCP ClusterIP service from there.
    pub fn change_target(&self, k: usize, tcp_only: bool) -> usize {
        let stride = [7919, 7907, 7901].into_iter().find(|p| !self.services.is_multiple_of(*p)).unwrap_or(1);
        let start = (self.services / 2 + k * stride) % self.services;
        (0..self.services)
            .map(|d| (start + d) % self.services)
            .find(|i| !tcp_only || self.class(*i) == Class::ClusterTcp)
            .unwrap_or(start)
    }

    /// The state pipeline's configuration, as in a cluster.
    pub fn state_config(&self) -> StateConfig {
        StateConfig {
            node_name: NODE.into(),
            service_cidrs: vec![SERVICE_CIDR.parse::<IpNet>().expect("a valid CIDR")],
            node_required: true,
            ..StateConfig::default()
        }
    }

    /// Every object, as source events (the Node first, `Synced` last).
    pub fn events(&self) -> impl Iterator<Item = SourceEvent> + '_ {
        let node = convert::node(&self.node()).expect("the generated node is valid");
        let objects = (0..self.services).flat_map(move |i| {
            let svc = convert::service(&self.service(i)).expect("generated services are valid");
            let slice = convert::endpoint_slice(&self.slice(i, None)).expect("generated slices are valid");
            [SourceEvent::Apply(Object::service(svc)), SourceEvent::Apply(slice)]
        });
        std::iter::once(SourceEvent::Apply(Object::Node(node))).chain(objects).chain([SourceEvent::Synced])
    }

    /// A state builder holding the whole workload, changes not yet taken.
    pub fn fold(&self) -> StateBuilder {
        let mut builder = StateBuilder::new(self.state_config());
        for event in self.events() {
            builder.apply(event);
        }
        builder
    }

    /// The event of the `change`-th change, to service `i`.
    pub fn change_event(&self, i: usize, change: usize) -> SourceEvent {
        SourceEvent::Apply(convert::endpoint_slice(&self.slice(i, Some(change))).expect("generated slices are valid"))
    }

    /// Writes the workload as a manifest folder for `kproxy run
    /// --manifests`: `cluster.yaml` (node-a, the ServiceCIDR) and one file
    /// per thousand services with their slices.
    pub fn write_manifests(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let cidr = format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata:\n  name: kubernetes\nspec:\n  cidrs:\n  - {SERVICE_CIDR}\n"
        );
        let cluster = format!("{}---\n{cidr}", document(&self.node())?);
        write(&dir.join("cluster.yaml"), &cluster)?;
        for (file, chunk) in (0..self.services).collect::<Vec<_>>().chunks(PER_NAMESPACE).enumerate() {
            let mut text = String::new();
            for &i in chunk {
                text.push_str(&document(&self.service(i))?);
                text.push_str("---\n");
                text.push_str(&document(&self.slice(i, None))?);
                text.push_str("---\n");
            }
            write(&dir.join(format!("services-{file:03}.yaml")), &text)?;
        }
        Ok(())
    }

    /// Writes the whole workload (the Node, the ServiceCIDR, every Service
    /// and slice) as one file: a multi-document YAML file, or a JSON `List`
    /// as `kubectl get -o json` writes it. What `kproxy state` reads in the
    /// parsing benchmark.
    pub fn write_single_file(&self, path: &Path, format: FileFormat) -> anyhow::Result<()> {
        let cidr = serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": "kubernetes"}, "spec": {"cidrs": [SERVICE_CIDR]}
        });
        let node = serde_json::to_value(self.node())?;
        let objects = (0..self.services)
            .flat_map(|i| [serde_json::to_value(self.service(i)), serde_json::to_value(self.slice(i, None))]);
        let all = [Ok(node), Ok(cidr)].into_iter().chain(objects);
        let text = match format {
            FileFormat::Yaml => {
                let mut text = String::new();
                for object in all {
                    text.push_str(&document(&object?)?);
                    text.push_str("---\n");
                }
                text
            }
            FileFormat::Json => {
                let items = all.collect::<Result<Vec<_>, _>>()?;
                serde_json::to_string(&serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}))?
            }
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        write(path, &text)
    }
}

/// How [`Spec::write_single_file`] writes the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    Yaml,
    Json,
}

impl FileFormat {
    pub const ALL: [FileFormat; 2] = [FileFormat::Yaml, FileFormat::Json];

    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Yaml => "yaml",
            FileFormat::Json => "json",
        }
    }
}

fn index_u32(i: usize) -> u32 {
    u32::try_from(i).expect("indexes are checked against the addressing plan")
}

/// One YAML document: k8s-openapi writes `apiVersion` and `kind` itself.
fn document<T: serde::Serialize>(object: &T) -> anyhow::Result<String> {
    serde_saphyr::to_string(object).context("serialising a manifest")
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests;
