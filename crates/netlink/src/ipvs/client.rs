//! A blocking generic-netlink socket that speaks IPVS: it resolves the
//! family once, then sends one request at a time and reads its answer up
//! to the ACK, error or `NLMSG_DONE`.
//!
//! This is the only effectful part of the module; everything it sends and
//! reads goes through [`mod@super::encode`] and [`super::decode`]. Calls block:
//! run them off the async runtime, as [`crate::nft::apply`] is.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_GENERIC};
use nix::errno::Errno;
use nix::sys::socket::{setsockopt, sockopt};
use nix::sys::time::TimeVal;

use super::decode::{self, DecodeError, Dump, ReplyError};
use super::encode::{Header, Request, encode, get_family};
use super::types::{DestinationEntry, Info, ServiceEntry, ServiceKey, Timeouts};
use super::wire::{NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, messages};

/// What went wrong talking to IPVS.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot open a generic netlink socket")]
    Socket(#[source] io::Error),
    /// The controller knows no `IPVS` family: `ip_vs` is not built or
    /// loaded.
    #[error("IPVS not available in this kernel")]
    NotAvailable,
    #[error("sending an IPVS request failed")]
    Send(#[source] io::Error),
    #[error("reading the kernel's IPVS answer failed")]
    Receive(#[source] io::Error),
    /// The kernel refused the request, or answered something malformed.
    #[error("IPVS request failed")]
    Reply(#[from] ReplyError),
}

impl ClientError {
    /// The kernel's errno when it refused the request.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Self::Reply(r) => r.errno(),
            _ => None,
        }
    }
}

/// An answer that does not come is a stuck kernel or a lost message.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// One read: a dump part is at most a page or two of messages.
const READ_BUFFER: usize = 1 << 16;

/// A connected IPVS socket.
pub struct Client {
    socket: Socket,
    family: u16,
    seq: u32,
    port: u32,
    buf: Vec<u8>,
}

impl Client {
    /// Opens the socket and resolves the `IPVS` family.
    pub fn connect() -> Result<Self, ClientError> {
        let mut socket = Socket::new(NETLINK_GENERIC).map_err(ClientError::Socket)?;
        let local = socket.bind_auto().map_err(ClientError::Socket)?;
        let timeout = TimeVal::new(ANSWER_TIMEOUT.as_secs() as _, 0);
        setsockopt(&socket.as_fd(), sockopt::ReceiveTimeout, &timeout).map_err(|e| ClientError::Socket(e.into()))?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(ClientError::Socket)?;
        let mut client = Self { socket, family: 0, seq: 1, port: local.port_number(), buf: vec![0; READ_BUFFER] };
        let seq = client.next_seq();
        let reply = client.transact(&get_family(seq, client.port), seq)?;
        client.family = match decode::family(&reply) {
            Ok(family) => family.id,
            // The controller's answer for a family it does not know.
            Err(ReplyError::Refused { errno: Errno::ENOENT, .. }) => return Err(ClientError::NotAvailable),
            Err(e) => return Err(e.into()),
        };
        Ok(client)
    }

    /// The resolved family id.
    pub fn family_id(&self) -> u16 {
        self.family
    }

    /// Sends a command that answers with an ACK only.
    pub fn execute(&mut self, request: &Request<'_>) -> Result<(), ClientError> {
        let reply = self.request(request)?;
        decode::ack(&reply)?;
        Ok(())
    }

    /// Every virtual service.
    pub fn services(&mut self) -> Result<Dump<ServiceEntry>, ClientError> {
        let reply = self.request(&Request::GetServices)?;
        Ok(decode::services(&reply, self.family)?)
    }

    /// The destinations of one service.
    pub fn destinations(&mut self, key: &ServiceKey) -> Result<Dump<DestinationEntry>, ClientError> {
        let reply = self.request(&Request::GetDests(key))?;
        Ok(decode::destinations(&reply, self.family, key.family())?)
    }

    pub fn timeouts(&mut self) -> Result<Timeouts, ClientError> {
        let reply = self.request(&Request::GetConfig)?;
        Ok(decode::config(&reply, self.family)?)
    }

    pub fn info(&mut self) -> Result<Info, ClientError> {
        let reply = self.request(&Request::GetInfo)?;
        Ok(decode::info(&reply, self.family)?)
    }

    /// Sends `request`; returns every message answering it.
    pub fn request(&mut self, request: &Request<'_>) -> Result<Vec<u8>, ClientError> {
        let seq = self.next_seq();
        let bytes = encode(request, Header { family: self.family, seq, port: self.port });
        self.transact(&bytes, seq)
    }

    fn next_seq(&mut self) -> u32 {
        let seq = self.seq;
        self.seq = self.seq.wrapping_add(1);
        seq
    }

    /// Sends one message and collects the answers with its `seq` up to the
    /// ACK or error (every request asks for one) or `NLMSG_DONE`.
    fn transact(&mut self, bytes: &[u8], seq: u32) -> Result<Vec<u8>, ClientError> {
        loop {
            match self.socket.send(bytes, 0) {
                Ok(n) if n == bytes.len() => break,
                Ok(n) => return Err(ClientError::Send(io::Error::other(format!("only {n} bytes were sent")))),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Send(e)),
            }
        }
        let mut answer = Vec::new();
        loop {
            let n = match self.socket.recv(&mut &mut self.buf[..], 0) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Receive(e)),
            };
            for m in messages(&self.buf[..n]) {
                let m = m.map_err(|e: DecodeError| ClientError::Reply(e.into()))?;
                // Late answers to an earlier, abandoned request.
                if m.seq != seq {
                    continue;
                }
                let start = m.at;
                let end = start + NLMSG_HDRLEN + m.payload.len();
                answer.extend_from_slice(&self.buf[start..end]);
                if m.kind == NLMSG_ERROR || m.kind == NLMSG_DONE {
                    return Ok(answer);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipvs::types::{Destination, Family, Protocol, Service, ServiceFlags};

    /// This machine's kernel has no IPVS; in the IPVS VM the lookup works.
    #[test]
    fn connect_without_ip_vs_is_not_available() {
        let result = Client::connect();
        // Checked after: the lookup itself may load the module.
        let has_ipvs = std::path::Path::new("/proc/net/ip_vs").exists();
        match result {
            Ok(client) => assert!(has_ipvs && client.family_id() >= 0x10, "resolved {:#x}", client.family_id()),
            Err(e) => {
                assert!(!has_ipvs, "IPVS is loaded, yet: {e:#?}");
                assert!(matches!(e, ClientError::NotAvailable), "{e:#?}");
                assert_eq!(e.to_string(), "IPVS not available in this kernel");
            }
        }
    }

    /// The whole codec against a real IPVS kernel. On the host this test
    /// boots `tools/ipvs-vm` and runs itself there, where it owns IPVS;
    /// a VM that cannot start fails it.
    #[test]
    fn commands_round_trip_through_a_real_ipvs_kernel() {
        if !kproxy_testkit::vm::in_guest() {
            return kproxy_testkit::vm::run_test("ipvs::client::tests::commands_round_trip_through_a_real_ipvs_kernel");
        }
        let mut ipvs = Client::connect().expect("IPVS in the VM");
        ipvs.execute(&Request::Flush).unwrap();
        assert_eq!(ipvs.info().unwrap().version_triple(), (1, 2, 1));

        let key = ServiceKey::Addr { protocol: Protocol::Tcp, addr: "10.96.0.10".parse().unwrap(), port: 80 };
        let mut service =
            Service { flags: ServiceFlags::PERSISTENT, timeout: 10800, netmask: 24, ..Service::new(key, "rr") };
        ipvs.execute(&Request::NewService(&service)).unwrap();
        let again = ipvs.execute(&Request::NewService(&service)).unwrap_err();
        assert_eq!(again.errno(), Some(Errno::EEXIST));
        service.scheduler = "wrr".into();
        ipvs.execute(&Request::SetService(&service)).unwrap();

        let mut dest = Destination {
            upper_threshold: 100,
            lower_threshold: 10,
            ..Destination::masq("10.244.1.2".parse().unwrap(), 8080, 3)
        };
        ipvs.execute(&Request::NewDest(&key, &dest)).unwrap();
        dest = Destination::masq(dest.addr, dest.port, 0);
        ipvs.execute(&Request::SetDest(&key, &dest)).unwrap();

        // ipvsadm, reading the kernel on its own, sees what kproxy wrote.
        let listed = std::process::Command::new("ipvsadm").arg("-Ln").output().expect("ipvsadm in the VM");
        let listed = String::from_utf8_lossy(&listed.stdout);
        assert!(listed.contains("TCP  10.96.0.10:80 wrr persistent 10800 mask 255.255.255.0"), "{listed}");
        assert!(listed.lines().any(|l| l.contains("-> 10.244.1.2:8080") && l.contains("Masq")), "{listed}");

        let services = ipvs.services().unwrap();
        assert!(services.done && services.skipped.is_empty());
        assert_eq!(services.entries.iter().map(|e| &e.service).collect::<Vec<_>>(), [&service]);
        let keyed = ipvs.request(&Request::GetService(&key)).unwrap();
        assert_eq!(decode::service_reply(&keyed, ipvs.family_id()).unwrap().service, service);
        let dests = ipvs.destinations(&key).unwrap();
        assert_eq!(dests.entries.iter().map(|e| e.destination).collect::<Vec<_>>(), [dest]);

        ipvs.execute(&Request::DelDest(&key, &dest)).unwrap();
        let gone = ipvs.execute(&Request::DelDest(&key, &dest)).unwrap_err();
        assert_eq!(gone.errno(), Some(Errno::ENOENT));

        let v6 = Service::new(
            ServiceKey::Addr { protocol: Protocol::Sctp, addr: "fd00::10".parse().unwrap(), port: 80 },
            "sh",
        );
        let fwmark = Service::new(ServiceKey::Fwmark { family: Family::Inet6, mark: 42 }, "rr");
        ipvs.execute(&Request::NewService(&v6)).unwrap();
        ipvs.execute(&Request::NewService(&fwmark)).unwrap();
        ipvs.execute(&Request::DelService(&key)).unwrap();
        let missing = ipvs.execute(&Request::DelService(&key)).unwrap_err();
        assert_eq!(missing.errno(), Some(Errno::ESRCH));
        let mut left: Vec<_> = ipvs.services().unwrap().entries.into_iter().map(|e| e.service).collect();
        left.sort_by_key(|s| s.key);
        assert_eq!(left, [v6, fwmark]);

        ipvs.execute(&Request::SetConfig(&Timeouts { tcp: 3600, tcp_fin: 0, udp: 30 })).unwrap();
        assert_eq!(ipvs.timeouts().unwrap(), Timeouts { tcp: 3600, tcp_fin: 120, udp: 30 });
        ipvs.execute(&Request::SetConfig(&Timeouts { tcp: 900, tcp_fin: 120, udp: 300 })).unwrap();
        ipvs.execute(&Request::Flush).unwrap();
        assert!(ipvs.services().unwrap().entries.is_empty());
    }
}
