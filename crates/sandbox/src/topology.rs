//! The standard two-node, dual-stack topology of the real-kernel tests and
//! `kproxy demo`: two node namespaces with a pod bridge each, pods behind
//! them, and a client namespace that is both an external client and the
//! router between the nodes. Addresses come from [`crate::addressing`].

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::addressing::{
    BRIDGE, CLIENT_SOURCE_IPV4, FIRST_POD_HOST, LOAD_BALANCER_CIDR_V4, LOAD_BALANCER_CIDR_V6, NODE_A, NODE_B,
    NodeAddressing, PREFIX_V4, PREFIX_V6, SERVICE_CIDR_V4, SERVICE_CIDR_V6, SOURCE_RANGE_CIDR_V4, UPLINK,
};
use crate::{Netns, SandboxError, link};

/// Interface index of a node's uplink (its peer in the client gets a small one).
const UPLINK_INDEX: &str = "10";

/// A node's end of a pod veth gets this plus the pod's host part.
const HOST_INTERFACE_INDEX_BASE: u32 = 100;

/// Sysctls for every namespace of the topology, written before any link is
/// created so new interfaces inherit the `default` values.
const QUIET: &[(&str, &str)] = &[
    // IPv6 addresses must be usable at once; every address is also added `nodad`.
    ("net.ipv6.conf.all.accept_dad", "0"),
    ("net.ipv6.conf.default.accept_dad", "0"),
    // ICMP rate limits shared with redirects can swallow the port-unreachable a REJECT sends.
    ("net.ipv4.conf.all.send_redirects", "0"),
    ("net.ipv4.conf.default.send_redirects", "0"),
    // New namespaces inherit IPv4 settings from the host; pin them.
    ("net.ipv4.conf.all.rp_filter", "0"),
    ("net.ipv4.conf.default.rp_filter", "0"),
];

/// Sysctls for the namespaces that route: the nodes and the client.
const ROUTER: &[(&str, &str)] = &[("net.ipv4.ip_forward", "1"), ("net.ipv6.conf.all.forwarding", "1")];

/// Sysctls of the nodes once their bridge exists: bridged pod-to-pod traffic
/// must pass the inet hooks, or pod -> service -> pod on one bridge is never DNATed.
const BRIDGE_NF: &[(&str, &str)] =
    &[("net.bridge.bridge-nf-call-iptables", "1"), ("net.bridge.bridge-nf-call-ip6tables", "1")];

/// Two nodes, their pods, and a client that routes between them. Dropping it
/// deletes every namespace it created and kills what was spawned in them.
#[derive(Debug)]
pub struct Topology {
    /// node-a (index 1): the node that runs kproxy in most tests.
    pub node: Node,
    /// node-b (index 2): home of off-node endpoints.
    pub node_b: Node,
    /// The external client, and the router between the nodes.
    pub client: Netns,
}

/// One node namespace with its uplink, its pod bridge, and its pods.
#[derive(Debug)]
pub struct Node {
    /// The node's namespace.
    pub ns: Netns,
    /// 1 or 2.
    pub index: u8,
    /// The node's address on its uplink.
    pub ipv4: Ipv4Addr,
    /// The node's IPv6 address on its uplink.
    pub ipv6: Ipv6Addr,
    /// The rest of the node's addressing plan.
    pub addressing: &'static NodeAddressing,
    pods: Vec<Pod>,
    next_host: u8,
}

/// One pod namespace behind a node's bridge.
#[derive(Debug)]
pub struct Pod {
    /// The pod's namespace.
    pub ns: Netns,
    /// The name it was added with.
    pub name: String,
    /// The pod's address on its `eth0`.
    pub ipv4: Ipv4Addr,
    /// The pod's IPv6 address on its `eth0`.
    pub ipv6: Ipv6Addr,
    /// Index of the node it runs on.
    pub node: u8,
    /// The node's end of the pod's veth, a port of the bridge.
    pub host_interface: String,
}

impl Topology {
    /// Builds the client and both nodes, without pods.
    pub fn new() -> Result<Topology, SandboxError> {
        let client = Netns::new("client")?;
        set_all(&client, QUIET)?;
        set_all(&client, ROUTER)?;
        client.ip(&["addr", "add", &format!("{CLIENT_SOURCE_IPV4}/32"), "dev", "lo"])?;
        let node = Node::new(&client, &NODE_A)?;
        let node_b = Node::new(&client, &NODE_B)?;
        let via_a_v4 = NODE_A.ipv4.to_string();
        let via_a_v6 = NODE_A.ipv6.to_string();
        for cidr in [SERVICE_CIDR_V4, LOAD_BALANCER_CIDR_V4, SOURCE_RANGE_CIDR_V4] {
            client.ip(&["route", "add", &cidr.to_string(), "via", &via_a_v4])?;
        }
        for cidr in [SERVICE_CIDR_V6, LOAD_BALANCER_CIDR_V6] {
            client.ip(&["-6", "route", "add", &cidr.to_string(), "via", &via_a_v6])?;
        }
        Ok(Topology { node, node_b, client })
    }

    /// Node 1 or 2.
    pub fn node(&self, index: u8) -> Option<&Node> {
        match index {
            1 => Some(&self.node),
            2 => Some(&self.node_b),
            _ => None,
        }
    }

    /// Adds a pod named `name` on node 1 or 2, at the node's next free address.
    pub fn add_pod(&mut self, node: u8, name: &str) -> Result<&Pod, SandboxError> {
        if self.pod(name).is_some() {
            return Err(SandboxError::DuplicatePod { name: name.to_owned() });
        }
        let node = match node {
            1 => &mut self.node,
            2 => &mut self.node_b,
            index => return Err(SandboxError::UnknownNode { index }),
        };
        node.add_pod(name)
    }

    /// Every pod, node-a's first, each node's in the order they were added.
    pub fn pods(&self) -> impl Iterator<Item = &Pod> {
        self.node.pods.iter().chain(&self.node_b.pods)
    }

    /// The pod named `name`.
    pub fn pod(&self, name: &str) -> Option<&Pod> {
        self.pods().find(|pod| pod.name == name)
    }

    /// The names of every namespace the topology created.
    pub fn netns_names(&self) -> Vec<String> {
        let mut names = vec![self.client.name().to_owned(), self.node.ns.name().to_owned()];
        names.push(self.node_b.ns.name().to_owned());
        names.extend(self.pods().map(|pod| pod.ns.name().to_owned()));
        names
    }
}

impl Node {
    /// Creates the node namespace, links its uplink to `client`, and builds its bridge and routes.
    fn new(client: &Netns, plan: &'static NodeAddressing) -> Result<Node, SandboxError> {
        let ns = Netns::new(plan.name)?;
        set_all(&ns, QUIET)?;
        set_all(&ns, ROUTER)?;
        // Created from inside the node namespace, with the peer born in the
        // client's: neither end ever exists in the host namespace. The explicit
        // index keeps it from equalling the peer's: the kernel defers carrier
        // events of such a veth by a second or more, and until then the link
        // drops what it sends. (`ip` honours `index` only on the first end.)
        ns.ip(&[
            "link",
            "add",
            UPLINK,
            "index",
            UPLINK_INDEX,
            "type",
            "veth",
            "peer",
            "name",
            plan.client_interface,
            "netns",
            client.name(),
        ])?;
        add_addresses(client, plan.client_interface, plan.gateway_ipv4, PREFIX_V4, plan.gateway_ipv6, PREFIX_V6)?;
        add_addresses(&ns, UPLINK, plan.ipv4, PREFIX_V4, plan.ipv6, PREFIX_V6)?;
        client.ip(&["link", "set", plan.client_interface, "up"])?;
        ns.ip(&["link", "set", UPLINK, "up"])?;

        // A fixed MAC: a bridge otherwise takes the lowest MAC of its ports, which changes as pods come and go.
        let mac = format!("02:6b:70:00:{:02x}:01", plan.index);
        ns.ip(&["link", "add", BRIDGE, "address", &mac, "type", "bridge", "mcast_snooping", "0"])?;
        add_addresses(&ns, BRIDGE, plan.bridge_ipv4, PREFIX_V4, plan.bridge_ipv6, PREFIX_V6)?;
        ns.ip(&["link", "set", BRIDGE, "up"])?;
        set_all(&ns, BRIDGE_NF)?;

        // Default routes, so node-local clients have a route covering the service CIDRs.
        ns.ip(&["route", "add", "default", "via", &plan.gateway_ipv4.to_string()])?;
        ns.ip(&["-6", "route", "add", "default", "via", &plan.gateway_ipv6.to_string()])?;
        ns.ip(&["route", "add", &SOURCE_RANGE_CIDR_V4.to_string(), "via", &plan.gateway_ipv4.to_string()])?;
        client.ip(&["route", "add", &plan.pod_cidr_v4.to_string(), "via", &plan.ipv4.to_string()])?;
        client.ip(&["-6", "route", "add", &plan.pod_cidr_v6.to_string(), "via", &plan.ipv6.to_string()])?;
        link::wait_ready(client, &[plan.client_interface])?;
        link::wait_ready(&ns, &[UPLINK])?;
        Ok(Node {
            ns,
            index: plan.index,
            ipv4: plan.ipv4,
            ipv6: plan.ipv6,
            addressing: plan,
            pods: Vec::new(),
            next_host: FIRST_POD_HOST,
        })
    }

    /// `node-a` or `node-b`.
    pub fn name(&self) -> &'static str {
        self.addressing.name
    }

    /// The node's pods, in the order they were added.
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    fn add_pod(&mut self, name: &str) -> Result<&Pod, SandboxError> {
        let host = self.next_host;
        if host == u8::MAX {
            return Err(SandboxError::PodAddressesExhausted { node: self.index });
        }
        let plan = self.addressing;
        let ns = Netns::new(name)?;
        set_all(&ns, QUIET)?;
        let (ipv4, ipv6) = (plan.pod_ipv4(host), plan.pod_ipv6(host));
        // Named from the host counter, not the pod name: interface names have at most 15 bytes.
        let host_interface = format!("kpv{host}");
        // The pod's end gets index 2 (after lo); the node's end an index that cannot be 2 (see UPLINK_INDEX).
        let index = (HOST_INTERFACE_INDEX_BASE + u32::from(host)).to_string();
        self.ns.ip(&[
            "link",
            "add",
            &host_interface,
            "index",
            &index,
            "type",
            "veth",
            "peer",
            "name",
            UPLINK,
            "netns",
            ns.name(),
        ])?;
        self.ns.ip(&["link", "set", &host_interface, "master", BRIDGE])?;
        // Hairpin: a pod reaching itself through a service leaves and re-enters by this port.
        self.ns.ip(&["link", "set", &host_interface, "type", "bridge_slave", "hairpin", "on"])?;
        self.ns.ip(&["link", "set", &host_interface, "up"])?;
        add_addresses(&ns, UPLINK, ipv4, PREFIX_V4, ipv6, PREFIX_V6)?;
        ns.ip(&["link", "set", UPLINK, "up"])?;
        ns.ip(&["route", "add", "default", "via", &plan.bridge_ipv4.to_string()])?;
        ns.ip(&["-6", "route", "add", "default", "via", &plan.bridge_ipv6.to_string()])?;
        // The bridge gets carrier from its first port: the first pod waits for that too.
        link::wait_ready(&self.ns, &[&host_interface, BRIDGE])?;
        link::wait_ready(&ns, &[UPLINK])?;
        self.next_host = host + 1;
        self.pods.push(Pod { ns, name: name.to_owned(), ipv4, ipv6, node: self.index, host_interface });
        Ok(self.pods.last().expect("a pod was just pushed"))
    }
}

fn set_all(ns: &Netns, sysctls: &[(&str, &str)]) -> Result<(), SandboxError> {
    sysctls.iter().try_for_each(|(key, value)| ns.sysctl(key, value))
}

fn add_addresses(
    ns: &Netns,
    dev: &str,
    ipv4: Ipv4Addr,
    prefix_v4: u8,
    ipv6: Ipv6Addr,
    prefix_v6: u8,
) -> Result<(), SandboxError> {
    ns.ip(&["addr", "add", &format!("{ipv4}/{prefix_v4}"), "dev", dev])?;
    ns.ip(&["-6", "addr", "add", &format!("{ipv6}/{prefix_v6}"), "dev", dev, "nodad"])
}
