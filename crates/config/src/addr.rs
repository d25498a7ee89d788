//! Address text the way upstream reads it.
//!
//! kube-proxy parses IPs and CIDRs with `netutils.ParseIPSloppy` /
//! `ParseCIDRSloppy` (Go 1.16 rules), which accept IPv4 octets with leading
//! zeros ("010.0.0.1" is decimal 10.0.0.1) and treat IPv4-mapped IPv6 as
//! IPv4. Rust's parsers reject the former and keep the latter as IPv6, so a
//! file that works upstream needs these helpers to work here.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use kproxy_model::parse_ipv4_sloppy;

/// `netutils.ParseIPSloppy`, with IPv4-mapped IPv6 folded to IPv4.
pub(crate) fn parse_ip(s: &str) -> Option<IpAddr> {
    if let Some(v4) = parse_ipv4_sloppy(s) {
        return Some(IpAddr::V4(v4));
    }
    // Go rejects zones and brackets in ParseIP; so does the std parser.
    let ip: IpAddr = s.parse().ok()?;
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

/// `netutils.ParseCIDRSloppy`: the network of `ip/prefix`, host bits cleared
/// as Go's `ParseCIDR` returns it.
pub(crate) fn parse_cidr(s: &str) -> Option<IpNet> {
    let (ip, prefix) = s.split_once('/')?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix: u8 = prefix.parse().ok()?;
    // Only the dotted form is IPv4 here: "::ffff:10.0.0.0/104" stays IPv6
    // with its 128-bit prefix, as in Go.
    let ip = match parse_ipv4_sloppy(ip) {
        Some(v4) => IpAddr::V4(v4),
        None => ip.parse().ok()?,
    };
    IpNet::new(ip, prefix).ok().map(|net| net.trunc())
}

/// Go's `net.SplitHostPort`: `host:port` or `[host]:port`; the port is not
/// checked. `None` when the text has no port or too many colons.
pub(crate) fn split_host_port(s: &str) -> Option<(&str, &str)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return (!port.contains(':')).then_some((host, port));
    }
    let (host, port) = s.rsplit_once(':')?;
    (!host.contains(':') && !host.contains('[') && !host.contains(']')).then_some((host, port))
}

/// `proxyutil.AppendPortIfNeeded`: adds `port` to a bare IP, leaves
/// anything else alone for validation to judge.
pub(crate) fn append_port_if_needed(addr: &str, port: u16) -> String {
    if split_host_port(addr).is_some() {
        return addr.to_owned();
    }
    match parse_ip(addr) {
        Some(IpAddr::V4(ip)) => format!("{ip}:{port}"),
        Some(IpAddr::V6(ip)) => format!("[{ip}]:{port}"),
        None => addr.to_owned(),
    }
}

/// Why a bind address is not `IP:port`, for validation messages.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HostPortError {
    /// No `:port`, or an unbracketed IPv6 address.
    NotHostPort,
    /// The host part is not an IP.
    BadIp(String),
    /// The port is not a number in 1-65535.
    BadPort(String),
}

/// `validateHostPort`: an `IP:port` with a port of 1-65535.
pub(crate) fn parse_host_port(s: &str) -> Result<SocketAddr, HostPortError> {
    let (host, port) = split_host_port(s).ok_or(HostPortError::NotHostPort)?;
    let ip = parse_ip(host).ok_or_else(|| HostPortError::BadIp(host.to_owned()))?;
    // strconv.Atoi takes an optional sign; any sign is out of range anyway.
    match port.parse::<u16>() {
        Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(SocketAddr::new(ip, p)),
        _ => Err(HostPortError::BadPort(port.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_accepts_leading_zeros_and_folds_mapped_ipv6() {
        assert_eq!(parse_ip("010.001.0.1"), Some("10.1.0.1".parse().expect("ip")));
        assert_eq!(parse_ip("::ffff:1.2.3.4"), Some("1.2.3.4".parse().expect("ip")));
        assert_eq!(parse_ip("fd00::1"), Some("fd00::1".parse().expect("ip")));
        assert_eq!(parse_ip("256.0.0.1"), None);
        assert_eq!(parse_ip("1.2.3"), None);
        assert_eq!(parse_ip("1.2.3.4.5"), None);
        assert_eq!(parse_ip(""), None);
        assert_eq!(parse_ip("fe80::1%eth0"), None);
    }

    #[test]
    fn cidr_clears_host_bits_and_checks_prefix() {
        assert_eq!(parse_cidr("10.1.2.3/8"), Some("10.0.0.0/8".parse().expect("cidr")));
        assert_eq!(parse_cidr("010.0.0.0/08"), Some("10.0.0.0/8".parse().expect("cidr")));
        assert_eq!(parse_cidr("fd00::1/64"), Some("fd00::/64".parse().expect("cidr")));
        assert_eq!(parse_cidr("10.0.0.0/33"), None);
        assert_eq!(parse_cidr("10.0.0.0"), None);
        assert_eq!(parse_cidr("10.0.0.0/"), None);
        assert_eq!(parse_cidr("10.0.0.0/+8"), None);
        assert_eq!(parse_cidr(" 10.0.0.0/8"), None);
    }

    #[test]
    fn split_host_port_follows_go() {
        assert_eq!(split_host_port("1.2.3.4:80"), Some(("1.2.3.4", "80")));
        assert_eq!(split_host_port("[::1]:80"), Some(("::1", "80")));
        assert_eq!(split_host_port(":80"), Some(("", "80")));
        assert_eq!(split_host_port("1.2.3.4:"), Some(("1.2.3.4", "")));
        assert_eq!(split_host_port("::1"), None);
        assert_eq!(split_host_port("1.2.3.4"), None);
        assert_eq!(split_host_port("[::1]"), None);
    }

    #[test]
    fn append_port_only_to_bare_ips() {
        assert_eq!(append_port_if_needed("0.0.0.0", 10256), "0.0.0.0:10256");
        assert_eq!(append_port_if_needed("::", 10256), "[::]:10256");
        assert_eq!(append_port_if_needed("1.2.3.4:99", 10256), "1.2.3.4:99");
        assert_eq!(append_port_if_needed("nonsense", 10256), "nonsense");
    }

    #[test]
    fn host_port_rejects_port_zero_and_bad_hosts() {
        assert_eq!(parse_host_port("[::]:10256"), Ok("[::]:10256".parse().expect("addr")));
        assert_eq!(parse_host_port("0.0.0.0:0"), Err(HostPortError::BadPort("0".into())));
        assert_eq!(parse_host_port("0.0.0.0:+1"), Err(HostPortError::BadPort("+1".into())));
        assert_eq!(parse_host_port(":10256"), Err(HostPortError::BadIp(String::new())));
        assert_eq!(parse_host_port("::1"), Err(HostPortError::NotHostPort));
    }
}
