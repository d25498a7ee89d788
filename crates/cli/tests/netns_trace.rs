//! `kproxy trace` with no manifests, asked inside the node's namespace,
//! against a running kproxy: the same verdict as real packets, in nftables
//! mode and in iptables mode on both backends (IPVS mode: vm_ipvs_trace).

mod lab;

use lab::Mode;
use lab::live_trace::live_trace_matches_real_packets;

#[test]
fn nftables_mode_traces_on_the_node_match_real_packets() {
    live_trace_matches_real_packets(Mode::Nftables);
}

#[test]
fn iptables_legacy_mode_traces_on_the_node_match_real_packets() {
    live_trace_matches_real_packets(Mode::Iptables("legacy"));
}

#[test]
fn iptables_nft_mode_traces_on_the_node_match_real_packets() {
    live_trace_matches_real_packets(Mode::Iptables("nft"));
}
