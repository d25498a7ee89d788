//! Where the lab's sockets are made. In the ebpf mode, kproxy's cgroup
//! programs apply to one cgroup (`--ebpf-cgroup`): on a real node the root
//! of the hierarchy, holding every pod and the node's own processes. The
//! lab makes its own threaded cgroup for that and puts in it exactly what
//! would be in it on node-a: probes sent from node-a's namespace or its
//! pods, and the backends serving in node-a's pods. The outside client and
//! node-b stay out, so their traffic meets kproxy's tc programs instead.
//!
//! This is decided here and nowhere else: [`Lab::place`] is what every
//! request, session, flow and backend of the lab is made from.

use std::net::IpAddr;
use std::path::PathBuf;

use kproxy_sandbox::{Backend, Bpffs, Cgroup, Netns, Place, addressing::UPLINK};

use super::{Lab, chain};

/// The ebpf mode's kernel-side state the lab owns: the cgroup kproxy's
/// programs attach to and the bpffs it pins its links and maps in.
pub struct EbpfNode {
    /// Unmounted when the lab stops kproxy for good, before the tempdir goes.
    pub bpffs: Option<Bpffs>,
    /// The directory inside the bpffs given as `--ebpf-pin-dir`.
    pub pin_dir: PathBuf,
    /// The lab's threaded cgroup, given as `--ebpf-cgroup`.
    pub cgroup: Cgroup,
}

/// Where a backend serves: a pod by name, or node-a itself.
#[derive(Clone, Debug)]
pub enum Home {
    Pod(String),
    NodeA,
}

/// A backend the lab started, and how to start it again (in the cgroup,
/// once the lab runs the ebpf mode).
pub struct Served {
    pub home: Home,
    pub name: String,
    pub port: u16,
    pub udp: bool,
    pub backend: Backend,
}

impl Lab {
    /// Where sockets "from `ns`" are made: inside the lab's cgroup when the
    /// lab runs the ebpf mode and `ns` is node-a or one of node-a's pods,
    /// else just the namespace.
    pub fn place<'a>(&'a self, ns: &'a Netns) -> Place<'a> {
        let cgroup = self.ebpf.as_ref().map(|ebpf| &ebpf.cgroup).filter(|_| self.inside_node_a(ns));
        Place::new(ns, cgroup)
    }

    /// Whether `ns` is node-a or a pod on node-a: what the node's cgroup holds.
    pub fn inside_node_a(&self, ns: &Netns) -> bool {
        ns.name() == self.node().name() || self.topo.node.pods().iter().any(|pod| pod.ns.name() == ns.name())
    }

    /// Whether a connection from `source` is made by a socket in the lab's
    /// cgroup (node-a's own addresses and its pods' addresses, once the
    /// lab runs the ebpf mode): what a tracer of the ebpf mode needs to
    /// tell the socket hooks' path from the tc programs'.
    pub fn source_in_cgroup(&self, source: IpAddr) -> bool {
        let node = &self.topo.node;
        let node_addresses = [
            IpAddr::V4(node.ipv4),
            IpAddr::V6(node.ipv6),
            IpAddr::V4(node.addressing.bridge_ipv4),
            IpAddr::V6(node.addressing.bridge_ipv6),
        ];
        let pod_addresses = node.pods().iter().flat_map(|pod| [IpAddr::V4(pod.ipv4), IpAddr::V6(pod.ipv6)]);
        self.ebpf.is_some() && (node_addresses.contains(&source) || pod_addresses.into_iter().any(|a| a == source))
    }

    /// The netns a backend's home is.
    fn home_ns(&self, home: &Home) -> &Netns {
        match home {
            Home::Pod(pod) => &self.pod(pod).ns,
            Home::NodeA => self.node(),
        }
    }

    /// Starts a backend at `home` (in the cgroup if the lab has one and
    /// `home` is on node-a) and keeps it.
    pub(super) fn start_backend(&mut self, home: Home, name: &str, port: u16, udp: bool) {
        let backend = Backend::start(self.place(self.home_ns(&home)), name, port, true, udp)
            .unwrap_or_else(|e| panic!("backend {name}: {}", chain(&e)));
        self.backends.push(Served { home, name: name.to_owned(), port, udp, backend });
    }

    /// The ebpf mode's flags for this lab, creating the cgroup and the bpffs
    /// the first time (a restarted kproxy finds its pins again) and moving
    /// node-a's backends into the cgroup.
    pub fn ebpf_flags(&mut self) -> Vec<String> {
        if self.ebpf.is_none() {
            let cgroup = Cgroup::new("lab").unwrap_or_else(|e| panic!("the lab's cgroup: {}", chain(&e)));
            let bpffs = Bpffs::mount(&self.dir.path().join("bpffs"))
                .unwrap_or_else(|e| panic!("the lab's bpffs: {}", chain(&e)));
            let pin_dir = bpffs.dir("kproxy").unwrap_or_else(|e| panic!("the pin folder: {}", chain(&e)));
            self.ebpf = Some(EbpfNode { bpffs: Some(bpffs), pin_dir, cgroup });
            self.restart_node_a_backends();
        }
        let ebpf = self.ebpf.as_ref().expect("made above");
        vec![
            "--ebpf-cgroup".to_owned(),
            ebpf.cgroup.path().display().to_string(),
            "--ebpf-pin-dir".to_owned(),
            ebpf.pin_dir.display().to_string(),
            "--ebpf-devices".to_owned(),
            UPLINK.to_owned(),
        ]
    }

    /// Stops node-a's backends and serves them again from inside the cgroup.
    fn restart_node_a_backends(&mut self) {
        let all = std::mem::take(&mut self.backends);
        let (node_a, others): (Vec<Served>, Vec<Served>) =
            all.into_iter().partition(|served| self.inside_node_a(self.home_ns(&served.home)));
        self.backends = others;
        for served in node_a {
            let Served { home, name, port, udp, backend } = served;
            // The old sockets must close before the new ones bind the same port.
            drop(backend);
            self.start_backend(home, &name, port, udp);
        }
    }

    /// Unmounts the bpffs (kproxy must be gone): its pins go, and with them
    /// the links and maps only they held.
    pub(super) fn unmount_bpffs(&mut self) {
        if let Some(ebpf) = self.ebpf.as_mut() {
            ebpf.bpffs.take();
        }
    }
}
