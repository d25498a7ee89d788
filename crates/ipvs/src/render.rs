//! The IPVS plan as text: virtual and real servers in `ipvsadm-save -n`
//! syntax (what `ipvsadm -R` reads back), and the `kube-ipvs0` addresses
//! as comments. For `kproxy render`; the apply edge speaks netlink.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use kproxy_model::{IpFamily, Protocol};

use crate::types::{Plan, VirtualServer};

/// Every virtual server of `plan` with its real servers (always
/// masquerading, `-m`), then the addresses bound on `kube-ipvs0`, then the
/// frontends the plan could not serve.
pub fn save(plan: &Plan) -> String {
    let mut out = String::new();
    for server in plan.servers.values() {
        let service = service(server);
        let mut line = format!("-A {service} -s {}", server.scheduler);
        if let Some(timeout) = server.persistence {
            let _ = write!(line, " -p {timeout}");
            if IpFamily::of(&server.addr) == IpFamily::V6 {
                let _ = write!(line, " -M {}", server.netmask());
            }
        }
        let _ = writeln!(out, "{line}");
        for dest in &server.destinations {
            let _ = writeln!(out, "-a {service} -r {} -m -w {}", endpoint(dest.socket_addr()), dest.weight);
        }
    }
    for ip in &plan.addresses {
        let prefix = match ip {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let _ = writeln!(out, "# kube-ipvs0: {ip}/{prefix}");
    }
    for rejected in &plan.rejected {
        let _ = writeln!(out, "# not programmed: {rejected}");
    }
    out
}

/// The service's `ipvsadm` options: `-t`/`-u`/`--sctp-service` with the
/// address, or `-f MARK` (with `-6` for IPv6).
fn service(server: &VirtualServer) -> String {
    if let Some(mark) = server.mark {
        let v6 = if IpFamily::of(&server.addr) == IpFamily::V6 { " -6" } else { "" };
        return format!("-f {mark}{v6}");
    }
    let flag = match server.protocol {
        Protocol::Tcp => "-t",
        Protocol::Udp => "-u",
        Protocol::Sctp => "--sctp-service",
    };
    format!("{flag} {}", endpoint(SocketAddr::new(server.addr, server.port)))
}

/// `10.0.0.1:80`, `[fd00::1]:80`: `SocketAddr`'s spelling, which is ipvsadm's.
fn endpoint(addr: SocketAddr) -> String {
    addr.to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::types::{RealServer, ServerKey};

    fn server(addr: &str, mark: Option<u32>, persistence: Option<u32>) -> VirtualServer {
        VirtualServer {
            protocol: Protocol::Tcp,
            addr: addr.parse().expect("test address"),
            port: 80,
            scheduler: "rr".into(),
            persistence,
            destinations: vec![RealServer {
                addr: "10.244.1.10".parse().expect("test address"),
                port: 8080,
                weight: 2,
            }],
            mark,
        }
    }

    #[test]
    fn servers_print_as_ipvsadm_save_writes_them() {
        let servers: BTreeMap<ServerKey, VirtualServer> =
            [server("10.96.0.10", None, Some(10800)), server("10.96.0.11", Some(0x4b50_0001), None)]
                .into_iter()
                .map(|s| (s.key(), s))
                .collect();
        let plan = Plan { addresses: ["10.96.0.10".parse().expect("test address")].into(), servers, ..Plan::default() };
        assert_eq!(
            save(&plan),
            "-A -t 10.96.0.10:80 -s rr -p 10800\n\
             -a -t 10.96.0.10:80 -r 10.244.1.10:8080 -m -w 2\n\
             -A -f 1263534081 -s rr\n\
             -a -f 1263534081 -r 10.244.1.10:8080 -m -w 2\n\
             # kube-ipvs0: 10.96.0.10/32\n"
        );
    }
}
