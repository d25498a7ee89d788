//! Reading a namespace's conntrack table with `conntrack -L`: which
//! entries a connection left, by original destination. The ebpf mode's
//! promise is that a socket-level translated connection leaves none with
//! the service's address; the nftables mode's DNAT leaves one, which is
//! how the check itself is proven.

use std::net::IpAddr;

use kproxy_sandbox::Netns;

use super::{Lab, chain};

/// One conntrack entry, as `conntrack -L` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The whole line.
    pub line: String,
    /// The original direction's destination (the first `dst=`).
    pub original_destination: IpAddr,
    /// The reply direction's source (the second `src=`): differs from the
    /// original destination when the connection was DNATed.
    pub reply_source: Option<IpAddr>,
}

impl Entry {
    /// Parses one line of `conntrack -L`; `None` for anything else.
    pub fn parse(line: &str) -> Option<Entry> {
        let values = |key: &str| -> Vec<IpAddr> {
            line.split_whitespace().filter_map(|word| word.strip_prefix(key)?.parse().ok()).collect()
        };
        let original_destination = *values("dst=").first()?;
        let reply_source = values("src=").get(1).copied();
        Some(Entry { line: line.to_owned(), original_destination, reply_source })
    }

    /// Whether the kernel translated the destination (a DNAT entry).
    pub fn is_dnat(&self) -> bool {
        self.reply_source.is_some_and(|source| source != self.original_destination)
    }
}

impl Lab {
    /// The conntrack entries in `ns` whose original destination is `destination`.
    pub fn conntrack_entries_to(&self, ns: &Netns, destination: IpAddr) -> Vec<Entry> {
        let listed = ns
            .exec("conntrack", &["-L", "-f", if destination.is_ipv4() { "ipv4" } else { "ipv6" }])
            .unwrap_or_else(|e| panic!("conntrack -L in {}: {}", ns.name(), chain(&e)));
        listed.lines().filter_map(Entry::parse).filter(|entry| entry.original_destination == destination).collect()
    }
}
