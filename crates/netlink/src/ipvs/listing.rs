//! A [`Table`] as `ipvsadm -Ln` (1.31) prints it, byte for byte, and the
//! text of each field on its own, so another listing (kproxy's `/list`)
//! can carry the same fields.
//!
//! Facts from ipvsadm 1.31's `list_all`, `print_title` and
//! `print_service_entry`: the service name is `%-4s %s` (protocol,
//! address) or `FWM  %d` (`FWM  %d IPv6`); scheduler flags follow the
//! scheduler in parentheses; `persistent`, then `mask` only with
//! persistence and a mask other than the whole address; `ops` whenever
//! set. Real servers are `  -> %-28s %-7s %-6d %-10u %-10u`, so every
//! such line ends in blanks. Persistence engines (`pe NAME`) are not
//! decoded, so never printed; kproxy sets none.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::table::Table;
use super::types::{Family, Forward, Info, Service, ServiceFlags, ServiceKey};

/// The two column header lines of `ipvsadm -Ln`.
pub const COLUMNS: &str =
    "Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n";

/// `ipvsadm -Ln`'s output for `table`.
pub fn render(table: &Table) -> String {
    let mut out = version_line(&table.info);
    out.push('\n');
    out.push_str(COLUMNS);
    for listed in &table.services {
        let s = &listed.entry.service;
        let _ = writeln!(out, "{} {}", service_name(&s.key), service_flags(s));
        for d in &listed.destinations {
            let dest = &d.destination;
            let _ = writeln!(
                out,
                "  -> {:<28} {:<7} {:<6} {:<10} {:<10}",
                address_port(dest.addr, dest.port),
                forward_name(dest.forward),
                // `%d` of the kernel's `int` weight.
                dest.weight as i32,
                d.connections.active,
                d.connections.inactive,
            );
        }
    }
    out
}

/// `IP Virtual Server version 1.2.1 (size=4096)`, without the newline.
pub fn version_line(info: &Info) -> String {
    let (major, minor, patch) = info.version_triple();
    format!("IP Virtual Server version {major}.{minor}.{patch} (size={})", info.conn_table_size as i32)
}

/// The first column: `TCP`, `UDP`, `SCTP`, `?` for another protocol,
/// `FWM` for a firewall-mark service.
pub fn protocol_name(key: &ServiceKey) -> &'static str {
    use super::types::Protocol;
    match key {
        ServiceKey::Addr { protocol: Protocol::Tcp, .. } => "TCP",
        ServiceKey::Addr { protocol: Protocol::Udp, .. } => "UDP",
        ServiceKey::Addr { protocol: Protocol::Sctp, .. } => "SCTP",
        ServiceKey::Addr { protocol: Protocol::Other(_), .. } => "?",
        ServiceKey::Fwmark { .. } => "FWM",
    }
}

/// What follows the protocol: `10.96.0.10:80`, `[fd00::10]:80`, or the
/// mark (`42`, `42 IPv6`: two fields for an IPv6 mark service).
pub fn virtual_address(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Addr { addr, port, .. } => address_port(*addr, *port),
        // `%d`: a mark over 2^31 prints negative.
        ServiceKey::Fwmark { family: Family::Inet, mark } => format!("{}", *mark as i32),
        ServiceKey::Fwmark { family: Family::Inet6, mark } => format!("{} IPv6", *mark as i32),
    }
}

/// `TCP  10.96.0.10:80`, `SCTP 10.96.0.10:80`, `FWM  42`.
fn service_name(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Addr { .. } => format!("{:<4} {}", protocol_name(key), virtual_address(key)),
        ServiceKey::Fwmark { .. } => format!("FWM  {}", virtual_address(key)),
    }
}

/// The scheduler and its flags: `rr`, `sh (sh-fallback,sh-port)
/// persistent 10800 mask 255.255.255.0 ops`.
fn service_flags(s: &Service) -> String {
    let mut out = s.scheduler.clone();
    if let Some(flags) = scheduler_flags(s) {
        let _ = write!(out, " ({flags})");
    }
    if s.flags.contains(ServiceFlags::PERSISTENT) {
        let _ = write!(out, " persistent {}", s.timeout);
        if let Some(mask) = persistence_mask(s) {
            let _ = write!(out, " mask {mask}");
        }
    }
    if s.flags.contains(ServiceFlags::ONE_PACKET) {
        out.push_str(" ops");
    }
    out
}

/// `IP_VS_SVC_F_SCHED1..3` as ipvsadm names them for the service's
/// scheduler (`sh-fallback,sh-port`; `flag-1` for schedulers without
/// names). `Some("")` when a bit is set that the scheduler has no name
/// for: ipvsadm then prints `()`.
pub fn scheduler_flags(s: &Service) -> Option<String> {
    const SCHED: [u32; 3] = [0x8, 0x10, 0x20];
    if s.flags.0 & SCHED.iter().sum::<u32>() == 0 {
        return None;
    }
    let names: &[&str] = match s.scheduler.as_str() {
        "sh" => &["sh-fallback", "sh-port"],
        "mh" => &["mh-fallback", "mh-port"],
        _ => &["flag-1", "flag-2", "flag-3"],
    };
    let set: Vec<&str> = names.iter().zip(SCHED).filter(|(_, bit)| s.flags.0 & bit != 0).map(|(n, _)| *n).collect();
    Some(set.join(","))
}

/// The persistence mask as ipvsadm prints it after `mask`
/// (`255.255.255.0`; an IPv6 prefix length such as `64`), or `None` for
/// the whole address, when it prints none.
pub fn persistence_mask(s: &Service) -> Option<String> {
    let family = s.key.family();
    if s.netmask >= family.max_prefix() {
        return None;
    }
    Some(match family {
        Family::Inet => Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(s.netmask)).unwrap_or(0)).to_string(),
        Family::Inet6 => s.netmask.to_string(),
    })
}

/// The `Forward` column. ipvsadm passes a NULL name to `printf` for an
/// unknown method, which glibc prints as `(null)`.
pub fn forward_name(forward: Forward) -> &'static str {
    match forward {
        Forward::Masq => "Masq",
        Forward::Local => "Local",
        Forward::Tunnel(_) => "Tunnel",
        Forward::Direct => "Route",
        Forward::Other(_) => "(null)",
    }
}

/// `10.244.1.2:8080`, `[fd00::2]:8080`, with glibc's `inet_ntop` text.
pub fn address_port(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{}]:{port}", inet_ntop6(a)),
    }
}

/// Rust prints RFC 5952 text, as glibc does, except for the deprecated
/// IPv4-compatible form: glibc writes `::a.b.c.d` (six zero words, the
/// seventh not zero), Rust `::xxxx:xxxx`.
fn inet_ntop6(a: Ipv6Addr) -> String {
    let s = a.segments();
    if s[..6].iter().all(|w| *w == 0) && s[6] != 0 {
        let [.., a, b, c, d] = a.octets();
        return format!("::{}", Ipv4Addr::new(a, b, c, d));
    }
    a.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_text_is_glibcs() {
        let text = |s: &str| inet_ntop6(s.parse().unwrap());
        assert_eq!(text("fd00:10:244:1::2"), "fd00:10:244:1::2");
        assert_eq!(text("::1"), "::1");
        assert_eq!(text("::"), "::");
        assert_eq!(text("::1.2.3.4"), "::1.2.3.4");
        assert_eq!(text("::ffff:10.0.0.1"), "::ffff:10.0.0.1");
        assert_eq!(text("fd00:0:1::"), "fd00:0:1::");
        assert_eq!(text("1:0:2:0:0:3:0:0"), "1:0:2::3:0:0");
    }
}
