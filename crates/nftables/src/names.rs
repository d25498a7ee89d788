//! The names of kproxy's kernel objects, in one place.
//!
//! Both tables (`ip kproxy`, `ip6 kproxy`) hold the same objects. Names of
//! objects that exist once per table are constants; objects made per
//! endpoint count or per service port have names built here.

/// The table, in both families.
pub const TABLE: &str = "kproxy";

// Verdict maps indexed by frontend (`daddr . l4proto . dport`).
/// Frontend -> the policy chain handling it.
pub const SERVICE_IPS: &str = "service-ips";
/// Frontend -> the chain picking among its (primary) endpoints.
pub const PICK: &str = "pick";
/// Frontend (external, `externalTrafficPolicy: Local`) -> the chain
/// picking among its cluster endpoints, for in-cluster clients.
pub const SHORT_CIRCUIT: &str = "short-circuit";
/// Frontend -> reject or drop, when it has no endpoint to offer.
pub const NO_ENDPOINTS: &str = "no-endpoints";

// Sets.
/// Frontends with `loadBalancerSourceRanges`.
pub const FIREWALLED: &str = "firewalled";
/// Frontend . allowed source range.
pub const ALLOWED_SOURCES: &str = "allowed-sources";
/// Every cluster IP: a packet to one that no rule took has an unserved port.
pub const CLUSTER_IPS: &str = "cluster-ips";
/// The service CIDRs: an address in one that no service owns is dropped.
pub const SERVICE_CIDRS: &str = "service-cidrs";
/// Local endpoint . itself: a pod reaching itself through a service.
pub const HAIRPIN: &str = "hairpin";

// Chains every table has.
pub const NAT_PREROUTING: &str = "nat-prerouting";
pub const NAT_OUTPUT: &str = "nat-output";
pub const NAT_POSTROUTING: &str = "nat-postrouting";
pub const FILTER_PREROUTING: &str = "filter-prerouting";
pub const FILTER_INPUT: &str = "filter-input";
pub const FILTER_FORWARD: &str = "filter-forward";
pub const FILTER_OUTPUT: &str = "filter-output";
pub const FILTER_OUTPUT_POST_DNAT: &str = "filter-output-post-dnat";
pub const SERVICES: &str = "services";
pub const MARK_FOR_MASQUERADE: &str = "mark-for-masquerade";
pub const MASQUERADING: &str = "masquerading";
pub const FIREWALL_CHECK: &str = "firewall-check";
pub const ENDPOINTS_CHECK: &str = "endpoints-check";
pub const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
pub const REJECT: &str = "reject-chain";
/// External traffic to a Local-policy frontend without local endpoints.
pub const NO_LOCAL_ENDPOINTS: &str = "no-local-endpoints";
/// Policy chains: what happens before picking, by frontend kind.
pub const CLUSTER_IP: &str = "cluster-ip";
pub const EXTERNAL: &str = "external";
pub const EXTERNAL_LOCAL: &str = "external-local";

/// Picks one of `n` endpoints at random: goes to `dnat-0` .. `dnat-{n-1}`.
pub fn pick(n: u32) -> String {
    format!("pick-{n}")
}

/// Picks one of `n` endpoints by a hash of the source (`sh`) or the
/// destination (`dh`) address; `short` for the cluster endpoints of a
/// Local-policy frontend.
pub fn hashed(by: &str, short: bool, n: u32) -> String {
    if short { format!("{by}-short-{n}") } else { format!("{by}-pick-{n}") }
}

/// The seed of every `jhash`: fixed, so an address hashes to the same
/// endpoint across syncs and restarts (the kernel picks a random seed
/// when none is given).
pub const HASH_SEED: u32 = 0x6b70_726f;

/// Picks one of `n` cluster endpoints (for in-cluster clients of a
/// Local-policy frontend): `cluster-dnat-0` .. .
pub fn short(n: u32) -> String {
    format!("short-{n}")
}

/// The map of every frontend's endpoint number `i`: frontend -> address . port.
///
/// One map per index, rather than one keyed by `frontend . index`: `nft`
/// 1.0.6 cannot add a rule that DNATs through an existing map whose key
/// holds a `numgen` (it mis-derives the data's type from the kernel and
/// fails with "conflicting protocols"), so the index is chosen by a
/// verdict map and each index has its own plain map.
pub fn endpoint_map(i: u32) -> String {
    format!("endpoint-{i}")
}

/// DNATs a frontend to its endpoint number `i`.
pub fn dnat(i: u32) -> String {
    format!("dnat-{i}")
}

/// The cluster endpoints, likewise, for in-cluster clients of Local-policy
/// frontends.
pub fn cluster_endpoint_map(i: u32) -> String {
    format!("cluster-endpoint-{i}")
}

pub fn cluster_dnat(i: u32) -> String {
    format!("cluster-dnat-{i}")
}

/// A chain or set owned by one service port: `prefix-id`, where `id` is a
/// stable hash of the port's name and role.
pub fn owned(prefix: &str, id: &str) -> String {
    format!("{prefix}-{id}")
}

/// FNV-1a, 64 bits, as 13 base-32 digits: short, stable across versions
/// and runs (std's hasher is neither).
pub fn stable_id(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    const DIGITS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    (0..13).map(|i| DIGITS[((hash >> (i * 5)) & 31) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_ids_are_fixed_and_distinct() {
        assert_eq!(stable_id(&["default/web:http/TCP", "cluster"]), stable_id(&["default/web:http/TCP", "cluster"]));
        assert_ne!(stable_id(&["a", "bc"]), stable_id(&["ab", "c"]));
        // Pinned: chain names must not change between releases.
        assert_eq!(stable_id(&["x"]), "fhi2y26ayg4ra");
    }
}
