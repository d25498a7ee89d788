//! The two iptables backends, the configured choice between them, the
//! tables kproxy uses, and the names of each backend's tools.

use std::fmt;
use std::str::FromStr;

use kproxy_model::IpFamily;

use crate::IptablesError;

/// Which kernel interface the iptables tools drive.
///
/// Both can hold rules at once and the kernel runs both, but rules of one
/// are invisible to the other's tools, so kproxy must use the node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// `iptables-legacy`: the `ip_tables` / `ip6_tables` kernel modules.
    Legacy,
    /// `iptables-nft`: iptables rules stored as nf_tables objects.
    Nft,
}

impl Backend {
    pub const ALL: [Backend; 2] = [Backend::Legacy, Backend::Nft];

    /// `legacy` or `nft`, as in the tools' names.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Legacy => "legacy",
            Backend::Nft => "nft",
        }
    }

    /// `iptables-<backend>` (`ip6tables-<backend>` for IPv6).
    pub fn iptables(self, family: IpFamily) -> String {
        format!("{}-{}", prefix(family), self.as_str())
    }

    /// `iptables-<backend>-restore` (`ip6tables-…` for IPv6).
    pub fn restore(self, family: IpFamily) -> String {
        format!("{}-{}-restore", prefix(family), self.as_str())
    }

    /// `iptables-<backend>-save` (`ip6tables-…` for IPv6).
    pub fn save(self, family: IpFamily) -> String {
        format!("{}-{}-save", prefix(family), self.as_str())
    }

    /// Every tool of this backend that kproxy runs, both families.
    pub fn tools(self) -> Vec<String> {
        IpFamily::ALL.into_iter().flat_map(|f| [self.iptables(f), self.restore(f), self.save(f)]).collect()
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn prefix(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables",
        IpFamily::V6 => "ip6tables",
    }
}

/// The configured backend: detect it, or use the one named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// Decide from the rules already in the kernel (see [`crate::detect`]).
    #[default]
    Auto,
    /// Use this backend whatever the kernel holds.
    Fixed(Backend),
}

impl FromStr for BackendChoice {
    type Err = IptablesError;

    /// `auto` (or empty), `legacy` or `nft`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" | "auto" => Ok(BackendChoice::Auto),
            "legacy" => Ok(BackendChoice::Fixed(Backend::Legacy)),
            "nft" => Ok(BackendChoice::Fixed(Backend::Nft)),
            other => Err(IptablesError::UnknownBackend(other.to_owned())),
        }
    }
}

/// The iptables tables kproxy touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Filter,
    Nat,
    Mangle,
}

impl Table {
    /// The table's name, as after `-t` and `*` in a payload.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
            Table::Mangle => "mangle",
        }
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_debian_package() {
        assert_eq!(Backend::Legacy.restore(IpFamily::V4), "iptables-legacy-restore");
        assert_eq!(Backend::Nft.save(IpFamily::V6), "ip6tables-nft-save");
        assert_eq!(Backend::Nft.iptables(IpFamily::V4), "iptables-nft");
        assert_eq!(Backend::Legacy.tools().len(), 6);
    }

    #[test]
    fn choices_parse_from_configuration_values() {
        assert_eq!("".parse::<BackendChoice>().unwrap(), BackendChoice::Auto);
        assert_eq!("auto".parse::<BackendChoice>().unwrap(), BackendChoice::Auto);
        assert_eq!("legacy".parse::<BackendChoice>().unwrap(), BackendChoice::Fixed(Backend::Legacy));
        assert_eq!("nft".parse::<BackendChoice>().unwrap(), BackendChoice::Fixed(Backend::Nft));
        let error = "nftables".parse::<BackendChoice>().unwrap_err();
        assert_eq!(error.to_string(), "unknown iptables backend `nftables`: expected auto, legacy or nft");
    }
}
