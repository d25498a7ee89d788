//! Layer-4 protocols and IP families.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::Serialize;

/// A Service port's protocol, as Kubernetes spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses Kubernetes' spelling exactly (`TCP`, `UDP`, `SCTP`); the API
/// server rejects any other case, so kproxy does too.
impl FromStr for Protocol {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == s).ok_or(())
    }
}

/// IPv4 or IPv6. Each family has its own state and its own rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum IpFamily {
    #[serde(rename = "IPv4")]
    V4,
    #[serde(rename = "IPv6")]
    V6,
}

impl IpFamily {
    pub const ALL: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    pub fn of(ip: &IpAddr) -> Self {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_parses_only_kubernetes_spelling() {
        assert_eq!("UDP".parse::<Protocol>(), Ok(Protocol::Udp));
        assert_eq!("udp".parse::<Protocol>(), Err(()));
        assert_eq!("ICMP".parse::<Protocol>(), Err(()));
    }

    #[test]
    fn family_of_address() {
        assert_eq!(IpFamily::of(&"10.0.0.1".parse().expect("literal")), IpFamily::V4);
        assert_eq!(IpFamily::of(&"fd00::1".parse().expect("literal")), IpFamily::V6);
    }
}
