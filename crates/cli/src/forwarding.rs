//! `/list` for the modes that list their state rather than the kernel
//! (nftables, iptables, the dry run): the forwarding column says whether
//! the rules masquerade, as the nftables planner decides it
//! ([`kproxy_nftables::masquerade`]; the iptables mode's rules decide the
//! same, which its tracer tests check against the nftables tracer). The
//! IPVS and userspace modes list themselves.

use std::sync::Arc;

use kproxy_admin::listing::{Forward, Listing, StateListing};
use kproxy_config::{Config, ProxyMode};
use kproxy_model::{ProxyState, Scheduler};
use tokio::sync::watch;

/// The listing of the latest `state`, with `config`'s masquerade settings.
pub fn state_listing(config: &Config, state: watch::Receiver<Arc<ProxyState>>) -> Arc<dyn Listing> {
    Arc::new(StateListing { state, default: Scheduler::Random, forward: rules_forward(config) })
}

/// The forwarding column of `mode` for a list planned from a state (`kproxy
/// list --manifests`): what the rules masquerade in the nftables and
/// iptables modes; IPVS's method (`Masq`, NAT) and the userspace proxy's
/// (`Masq`: endpoints see the node) otherwise, as their own listings say.
pub fn forward(config: &Config, mode: ProxyMode) -> Arc<Forward> {
    match mode {
        // The ebpf mode's tc programs masquerade as the nftables rules do
        // (its socket hooks never do: the connection goes to the endpoint).
        ProxyMode::Nftables | ProxyMode::Iptables | ProxyMode::Ebpf => rules_forward(config),
        ProxyMode::Ipvs | ProxyMode::Userspace => Arc::new(|_: &ProxyState, _: &_, _: &_, _: &_| "Masq".to_owned()),
    }
}

fn rules_forward(config: &Config) -> Arc<Forward> {
    let plan = crate::mode::nftables_config(config);
    Arc::new(move |state: &ProxyState, port, frontend, endpoint| {
        kproxy_nftables::masquerade::forwarding(&plan, &state.node, port, frontend, endpoint).to_string()
    })
}
