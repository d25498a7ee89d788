//! One upstream packet flow on real packets: who sends, to which frontend,
//! and what each kproxy mode must do with it.
//!
//! Upstream's tests name a source address and a destination and expect a
//! set of endpoints (masqueraded or not), REJECT, DROP or nothing. Here the
//! source becomes a namespace of the lab (a pod of node-a, node-a itself,
//! the outside client) and the expectation becomes what the backends, or
//! the client, see: which backends answer and from which address, a
//! refusal, a silence.

use kproxy_model::Protocol;

use crate::lab::Mode;

/// Who sends: upstream's tracer sources mapped onto the lab.
#[derive(Clone, Copy, Debug)]
pub enum Sender {
    /// A pod of this node that is no endpoint (upstream 10.0.0.2,
    /// 10.180.0.2): client-a1.
    Pod,
    /// This pod (upstream's endpoint as the source: hairpin).
    PodNamed(&'static str),
    /// node-a from its own address (upstream 192.168.0.2), or from
    /// loopback when the destination is 127.0.0.1 or ::1. Masquerade to
    /// the node's own address cannot be told from none: only the endpoints
    /// are checked.
    Node,
    /// node-a from this local address of its own (upstream's
    /// load-balancer IP as the source).
    NodeAt(&'static str),
    /// The outside client from its link address (upstream 203.0.113.2 /
    /// 2600:5200::1 where no source range matters).
    Outside,
    /// The outside client from this address of its own (203.0.113.9 in a
    /// source range, 203.0.113.130 outside it).
    OutsideAt(&'static str),
}

/// Whether the endpoint must see the client's own address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Masq {
    Yes,
    No,
}

/// What a mode must do with a flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// DNAT: exactly these backends answer (`pod`, or `pod:port` for a
    /// target port other than the lab's), masqueraded or not.
    Dnat(Vec<&'static str>, Masq),
    /// Refused (TCP reset or ICMP port unreachable).
    Reject,
    /// Silence.
    Drop,
    /// Untouched by kproxy, to an address of node-a: node-a's own listener
    /// on the port answers ([`Lab::serve_on_node`]).
    Node,
    /// Untouched by kproxy and routed on: in the lab the client routes it
    /// back to node-a, so it loops until its TTL runs out and is never
    /// answered; the check asks the tracer too, which must say untouched.
    RoutedOn,
}

/// `Dnat` to `backends`, masqueraded.
pub fn masq(backends: &[&'static str]) -> Expect {
    Expect::Dnat(backends.to_vec(), Masq::Yes)
}

/// `Dnat` to `backends`, keeping the client's address.
pub fn direct(backends: &[&'static str]) -> Expect {
    Expect::Dnat(backends.to_vec(), Masq::No)
}

/// One upstream flow.
#[derive(Clone, Debug)]
pub struct Flow {
    /// Upstream's name of the flow.
    pub what: &'static str,
    pub from: Sender,
    /// `IP:port` in the lab.
    pub to: String,
    pub protocol: Protocol,
    /// What every mode must do, unless one of the overrides says otherwise.
    pub expect: Expect,
    /// iptables mode's own outcome, where it differs on purpose.
    pub iptables: Option<Expect>,
    /// nftables mode's own outcome, where it differs on purpose.
    pub nftables: Option<Expect>,
    /// Why the lab cannot show all of this flow: its fates are checked
    /// with kproxy's tracer (`kproxy trace`), and the kernel only for the
    /// part it can show.
    pub tracer_only: Option<&'static str>,
}

/// A TCP flow.
pub fn flow(what: &'static str, from: Sender, to: impl Into<String>, expect: Expect) -> Flow {
    Flow {
        what,
        from,
        to: to.into(),
        protocol: Protocol::Tcp,
        expect,
        iptables: None,
        nftables: None,
        tracer_only: None,
    }
}

impl Flow {
    pub fn udp(self) -> Flow {
        Flow { protocol: Protocol::Udp, ..self }
    }

    pub fn sctp(self) -> Flow {
        Flow { protocol: Protocol::Sctp, ..self }
    }

    /// iptables mode does this instead (a difference the docs list).
    pub fn in_iptables(self, expect: Expect) -> Flow {
        Flow { iptables: Some(expect), ..self }
    }

    /// nftables mode does this instead (a difference the docs list).
    pub fn in_nftables(self, expect: Expect) -> Flow {
        Flow { nftables: Some(expect), ..self }
    }

    /// Checked with the tracer, because the lab cannot show all of it (`why`).
    pub fn tracer_only(self, why: &'static str) -> Flow {
        Flow { tracer_only: Some(why), ..self }
    }

    /// What `mode` must do.
    pub fn expected(&self, mode: Mode) -> &Expect {
        let own = match mode {
            Mode::Iptables(_) => self.iptables.as_ref(),
            Mode::Nftables => self.nftables.as_ref(),
            Mode::Ipvs => None,
            // The ebpf mode is held to the common expectation.
            Mode::Ebpf => None,
        };
        own.unwrap_or(&self.expect)
    }
}
