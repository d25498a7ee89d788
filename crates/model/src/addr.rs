//! Address text the way Kubernetes' Go code reads it.
//!
//! Go before 1.17, and `k8s.io/utils/net`'s `ParseIPSloppy` /
//! `ParseCIDRSloppy` that kube-proxy still uses, accept IPv4 octets with
//! leading zeros and read them as decimal: `010.0.0.1` is 10.0.0.1, not the
//! octal 8.0.0.1 of `inet_aton`. Rust's parsers refuse such text. Objects
//! written before the API server validated addresses strictly still carry
//! it, so kproxy reads it as kube-proxy does.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// A dotted IPv4 address whose octets may carry leading zeros, read as
/// decimal (`172.30.0.041` is 172.30.0.41); `None` for anything else.
pub fn parse_ipv4_sloppy(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = text.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Any number of digits is fine as long as the value fits, as in Go's dtoi.
        let value = part.trim_start_matches('0');
        *octet = if value.is_empty() { 0 } else { value.parse().ok()? };
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
}

/// An IPv4 CIDR whose address and prefix may carry leading zeros
/// (`203.0.113.000/025` is 203.0.113.0/25), host bits cleared as Go's
/// `ParseCIDR` returns the network; `None` for anything else.
pub fn parse_ipv4_net_sloppy(text: &str) -> Option<Ipv4Net> {
    let (ip, prefix) = text.split_once('/')?;
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let prefix = prefix.trim_start_matches('0');
    let prefix: u8 = if prefix.is_empty() { 0 } else { prefix.parse().ok()? };
    Ipv4Net::new(parse_ipv4_sloppy(ip)?, prefix).ok().map(|net| net.trunc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_zeros_are_decimal_not_octal() {
        assert_eq!(parse_ipv4_sloppy("172.30.0.041"), Some(Ipv4Addr::new(172, 30, 0, 41)));
        assert_eq!(parse_ipv4_sloppy("010.180.00.001"), Some(Ipv4Addr::new(10, 180, 0, 1)));
        assert_eq!(parse_ipv4_sloppy("1.2.3.4"), Some(Ipv4Addr::new(1, 2, 3, 4)));
        assert_eq!(parse_ipv4_sloppy("0000000001.2.3.4"), Some(Ipv4Addr::new(1, 2, 3, 4)));
    }

    #[test]
    fn anything_but_four_decimal_octets_is_refused() {
        for text in ["256.0.0.1", "1.2.3", "1.2.3.4.5", "", "1..2.3", "0x1.2.3.4", "+1.2.3.4", " 1.2.3.4", "fd00::1"] {
            assert_eq!(parse_ipv4_sloppy(text), None, "{text:?}");
        }
    }

    #[test]
    fn cidrs_take_leading_zeros_in_address_and_prefix() {
        assert_eq!(parse_ipv4_net_sloppy("203.0.113.000/025"), Some("203.0.113.0/25".parse().expect("literal")));
        assert_eq!(parse_ipv4_net_sloppy("010.1.2.3/08"), Some("10.0.0.0/8".parse().expect("literal")));
        assert_eq!(parse_ipv4_net_sloppy("10.0.0.0/0"), Some("0.0.0.0/0".parse().expect("literal")));
        for text in ["10.0.0.0/33", "10.0.0.0", "10.0.0.0/", "10.0.0.0/+8", "fd00::/64", "10.0.0.0/8/8"] {
            assert_eq!(parse_ipv4_net_sloppy(text), None, "{text:?}");
        }
    }
}
