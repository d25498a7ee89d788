//! `/list` for the modes that list their state rather than the kernel
//! (nftables, iptables, the dry run): the forwarding column says whether
//! the rules masquerade, as the nftables planner decides it
//! ([`kproxy_nftables::masquerade`]; the iptables mode's rules decide the
//! same, which its tracer tests check against the nftables tracer). The
//! IPVS and userspace modes list themselves.

use std::sync::Arc;

use kproxy_admin::listing::{Listing, StateListing};
use kproxy_config::Config;
use kproxy_model::{ProxyState, Scheduler};
use tokio::sync::watch;

/// The listing of the latest `state`, with `config`'s masquerade settings.
pub fn state_listing(config: &Config, state: watch::Receiver<Arc<ProxyState>>) -> Arc<dyn Listing> {
    let plan = crate::mode::nftables_config(config);
    Arc::new(StateListing {
        state,
        default: Scheduler::Random,
        forward: Arc::new(move |state, port, frontend, endpoint| {
            kproxy_nftables::masquerade::forwarding(&plan, &state.node, port, frontend, endpoint).to_string()
        }),
    })
}
