//! `kproxy trace` with no manifests, asked inside the node's namespace,
//! against kproxy running `--proxy-mode ipvs`: the same verdict as real
//! packets (the virtual server, its real servers and the companion table).
//! In the IPVS VM: this machine's kernel has no IPVS.

mod lab;

use std::path::Path;

use kproxy_testkit::vm;
use lab::Mode;
use lab::live_trace::live_trace_matches_real_packets;

#[test]
fn ipvs_mode_traces_on_the_node_match_real_packets() {
    if !vm::in_guest() {
        return vm::run_test_with(
            "ipvs_mode_traces_on_the_node_match_real_packets",
            &[(Path::new(env!("CARGO_BIN_EXE_kproxy")), "kproxy")],
        );
    }
    live_trace_matches_real_packets(Mode::Ipvs);
}
