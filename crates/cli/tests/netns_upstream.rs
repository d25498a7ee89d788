//! Upstream kube-proxy's packet-flow tests, ported to real packets in the
//! lab and run in every kernel mode: nftables, and iptables on both of its
//! backends. See `upstream/mod.rs` for how upstream's addresses map onto
//! the lab, and docs/upstream-tests.md for which scenario ports which
//! upstream test.

mod lab;
mod upstream;

use lab::Mode;

/// Runs `scenario` once per mode, each in its own lab: tests
/// `<name>::nftables`, `<name>::iptables_legacy`, `<name>::iptables_nft`.
macro_rules! in_every_mode {
    ($name:ident, $scenario:path) => {
        mod $name {
            use super::*;

            #[test]
            fn nftables() {
                $scenario(Mode::Nftables);
            }

            #[test]
            fn iptables_legacy() {
                $scenario(Mode::Iptables("legacy"));
            }

            #[test]
            fn iptables_nft() {
                $scenario(Mode::Iptables("nft"));
            }
        }
    };
}

in_every_mode!(no_endpoints_reject_on_every_frontend, upstream::small::no_endpoints_reject_on_every_frontend);
in_every_mode!(trace_packet_verdicts, upstream::small::trace_packet_verdicts);
in_every_mode!(
    load_balancer_ip_mode_proxy_is_left_to_the_load_balancer,
    upstream::small::load_balancer_ip_mode_proxy_is_left_to_the_load_balancer
);
in_every_mode!(
    addresses_with_leading_zeros_are_served_as_decimal,
    upstream::small::addresses_with_leading_zeros_are_served_as_decimal
);
in_every_mode!(
    cluster_ips_serve_their_ports_on_every_protocol,
    upstream::cluster_ip::cluster_ips_serve_their_ports_on_every_protocol
);
in_every_mode!(
    source_ranges_guard_load_balancer_ips_only,
    upstream::load_balancer::source_ranges_guard_load_balancer_ips_only
);
in_every_mode!(
    node_ports_answer_on_the_addresses_asked_for,
    upstream::node_ports::node_ports_answer_on_the_addresses_asked_for
);
in_every_mode!(
    external_traffic_policy_local_and_cluster,
    upstream::traffic_policy::external_traffic_policy_local_and_cluster
);
in_every_mode!(
    internal_traffic_policy_picks_local_endpoints,
    upstream::traffic_policy::internal_traffic_policy_picks_local_endpoints
);
in_every_mode!(
    terminating_endpoints_serve_only_when_nothing_is_ready,
    upstream::terminating::terminating_endpoints_serve_only_when_nothing_is_ready
);
in_every_mode!(
    masquerade_follows_source_frontend_and_policy,
    upstream::masquerade::masquerade_follows_source_frontend_and_policy
);
