//! Walks the IPVS mode's objects for one new connection, the way the
//! kernel does: the companion table's checks (in the input hook for a
//! packet arriving, the output hook for one the node sends), then IPVS
//! (a firewall-mark server when the companion table marked the packet for
//! one, else the address server), its real servers, and the companion
//! table's postrouting chain, which masquerades what was marked.
//!
//! The result has the nftables tracer's shape, so `kproxy trace` explains
//! every mode alike. Every real server with a weight is a possible pick:
//! the scheduler's choice (and persistence) is not modelled.

use kproxy_model::IpFamily;
use kproxy_nftables::Hook;
use kproxy_nftables::Table;
use kproxy_nftables::trace::{Branch, Fate, InFlight, Packet, Trace, through_hook};

use crate::types::{Plan, ServerKey, VirtualServer};

/// Walks `packet` (of `family`) through `plan` and its `companion` table
/// of that family.
pub fn trace(plan: &Plan, companion: &Table, family: IpFamily, packet: &Packet) -> Trace {
    // kube-ipvs0 carries the service addresses: the node delivers their
    // traffic to itself (input), where IPVS takes it.
    let mut packet = packet.clone();
    packet.local_addresses.extend(plan.addresses.iter().filter(|ip| IpFamily::of(ip) == family));
    let walk = Walk { plan, companion, family, packet: &packet };
    let mut out = Vec::new();
    let start = InFlight::new(&packet);
    if packet.starts_on_node() {
        for flight in walk.hook(Hook::Output, start, &mut out) {
            walk.ipvs(flight, true, &mut out);
        }
    } else {
        for flight in walk.hook(Hook::Prerouting, start, &mut out) {
            if packet.local_addresses.contains(&flight.daddr) {
                for flight in walk.hook(Hook::Input, flight, &mut out) {
                    walk.ipvs(flight, false, &mut out);
                }
            } else {
                for flight in walk.hook(Hook::Forward, flight, &mut out) {
                    walk.leave(flight, &mut out);
                }
            }
        }
    }
    Trace { branches: out }
}

struct Walk<'a> {
    plan: &'a Plan,
    companion: &'a Table,
    family: IpFamily,
    packet: &'a Packet,
}

impl Walk<'_> {
    fn hook(&self, hook: Hook, flight: InFlight, out: &mut Vec<Branch>) -> Vec<InFlight> {
        through_hook(self.companion, self.family, self.packet, hook, flight, out)
    }

    /// Postrouting, then the packet's fate.
    fn leave(&self, flight: InFlight, out: &mut Vec<Branch>) {
        for flight in self.hook(Hook::Postrouting, flight, out) {
            out.push(Branch { fate: flight.fate(), path: flight.path });
        }
    }

    /// IPVS's turn (`ip_vs_in` at input 98, `ip_vs_local_request` at
    /// output -99): a connection to a virtual server goes to one of its
    /// real servers; anything else goes on untouched.
    fn ipvs(&self, flight: InFlight, outgoing: bool, out: &mut Vec<Branch>) {
        let Some(server) = self.server(&flight) else {
            match outgoing {
                true => self.leave(flight, out),
                false => out.push(Branch { fate: flight.fate(), path: flight.path }),
            }
            return;
        };
        let key = server.key();
        let usable: Vec<_> = server.destinations.iter().filter(|d| d.weight > 0).collect();
        if usable.is_empty() {
            // `ip_vs_schedule` finds no destination: `ip_vs_leave` answers
            // ICMP port unreachable and drops the packet.
            let mut flight = flight;
            flight.path.push(format!("ipvs: {key}: no real server with a weight: ICMP port unreachable"));
            out.push(Branch { path: flight.path, fate: Fate::Reject });
            return;
        }
        for dest in usable {
            let mut picked = flight.clone();
            picked.path.push(format!(
                "ipvs: {key} scheduler {} -> {} (weight {})",
                server.scheduler,
                dest.socket_addr(),
                dest.weight
            ));
            picked.daddr = dest.addr;
            picked.dport = dest.port;
            picked.dnat = true;
            // NAT forwarding sends the rewritten packet out through the
            // output hook, where the companion's checks match only service
            // addresses, then postrouting, where it is masqueraded.
            self.leave(picked, out);
        }
    }

    /// The virtual server IPVS picks: the firewall-mark server of the
    /// packet's mark first (as `ip_vs_service_find`), else the address one.
    fn server(&self, flight: &InFlight) -> Option<&VirtualServer> {
        let servers = &self.plan.servers;
        let by_mark = (flight.mark != 0)
            .then(|| servers.values().find(|s| s.mark == Some(flight.mark) && IpFamily::of(&s.addr) == self.family))
            .flatten();
        by_mark.or_else(|| servers.get(&ServerKey::new(self.packet.protocol, flight.daddr, flight.dport)))
    }
}

#[cfg(test)]
mod tests;
