//! What a mode leaves out of a state, each with its reason, asked of the
//! planner `run` uses for that mode (the same function, with the same
//! settings): a frontend another Service holds, a loopback node port the
//! mode does not serve, SCTP in userspace mode. `kproxy state` and `/state`
//! report it; annotation fallbacks are the state's own (`warnings`).
//!
//! What only applying shows (a kernel that refuses a rule, a port already
//! taken in userspace mode) is logged by `run` and counted in
//! `kproxy_sync_skipped_objects_total`, not reported here.

use std::sync::Arc;

use kproxy_admin::NotProgrammed;
use kproxy_config::{Config, ProxyMode};
use kproxy_model::{Changes, IpFamily, ProxyState};

/// The planner of `mode` with this configuration's settings; `None` (a dry
/// run) programs nothing, so it leaves nothing out.
pub fn for_mode(config: &Config, mode: Option<ProxyMode>) -> anyhow::Result<Arc<dyn NotProgrammed>> {
    Ok(match mode {
        Some(ProxyMode::Nftables) => {
            let config = crate::mode::nftables_config(config);
            // What a full plan skips, without collecting its elements.
            Arc::new(move |state: &ProxyState| {
                let sink = &mut kproxy_nftables::Discard;
                kproxy_nftables::plan_streamed(state, &Changes::default(), true, &config, None, sink).skips
            })
        }
        Some(ProxyMode::Iptables) => {
            let config = crate::mode::iptables_config(config)?.plan;
            Arc::new(move |state: &ProxyState| {
                IpFamily::ALL
                    .into_iter()
                    .flat_map(|family| kproxy_iptables::plan(state, family, &config, None).skips)
                    .collect()
            })
        }
        Some(ProxyMode::Ipvs) => {
            let config = crate::mode::ipvs_config(config)?.plan;
            Arc::new(move |state: &ProxyState| {
                kproxy_ipvs::plan(state, &config).rejected.iter().map(ToString::to_string).collect()
            })
        }
        Some(ProxyMode::Userspace) => Arc::new(kproxy_userspace::not_served),
        Some(ProxyMode::Ebpf) => {
            let config = crate::mode::ebpf_config(config)?.plan;
            Arc::new(move |state: &ProxyState| match kproxy_ebpf::desired(state, &config) {
                Ok(planned) => planned.skips,
                Err(e) => vec![format!("nothing: {e}")],
            })
        }
        None => Arc::new(|_: &ProxyState| Vec::new()),
    })
}
