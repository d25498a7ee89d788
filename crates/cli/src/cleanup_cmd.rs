//! `kproxy cleanup`: remove proxy rules from this node. With `--proxy-mode`
//! only that mode's objects of kproxy's; without it (and for `--cleanup`)
//! every mode's, kproxy's and kube-proxy's.

use std::process::ExitCode;

use kproxy_config::{Config, ProxyMode};
use kproxy_netlink::routes::ROUTE_PROTOCOL;

use crate::UsageError;
use crate::args::CleanupArgs;

pub fn cleanup(args: CleanupArgs) -> anyhow::Result<ExitCode> {
    let mut exclude = Vec::new();
    for cidr in &args.ipvs_exclude_cidrs {
        let net =
            cidr.parse::<kproxy_model::IpNet>().map_err(|e| UsageError(format!("--ipvs-exclude-cidrs {cidr}: {e}")))?;
        exclude.push(net);
    }
    let Some(name) = args.mode.as_deref() else {
        let mut config = Config::default();
        config.ipvs.exclude_cidrs = exclude;
        if let Some(dir) = args.ebpf_pin_dir {
            config.ebpf.pin_dir = dir;
        }
        return everything(&config);
    };
    let mode = name.parse::<ProxyMode>().map_err(|()| {
        UsageError(format!(
            "--proxy-mode {name}: nothing to clean up for it (modes: nftables, iptables, ipvs, userspace, ebpf)"
        ))
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match mode {
        ProxyMode::Userspace => {
            // Routes of other protocols, even for the same addresses, stay.
            let removed = runtime.block_on(crate::claim::cleanup())?;
            eprintln!("removed {removed} local routes of protocol {ROUTE_PROTOCOL} (kproxy's claimed addresses)");
        }
        ProxyMode::Iptables => {
            let backend = crate::mode::iptables_backend(args.iptables_backend.as_deref())?;
            let cleaned = runtime.block_on(kproxy_dataplane::cleanup_iptables(backend))?;
            eprintln!(
                "removed {} jump rules and {} chains of kproxy's (both families)",
                cleaned.jumps,
                cleaned.chains.len()
            );
        }
        ProxyMode::Ipvs => {
            let cleaned = runtime.block_on(kproxy_dataplane::cleanup_ipvs(&exclude)).map_err(|e| anyhow::anyhow!(e))?;
            eprintln!(
                "removed {} IPVS virtual servers, {} ({} addresses) and tables ip kproxy-ipvs and ip6 kproxy-ipvs (if they existed)",
                cleaned.servers,
                if cleaned.interface { kproxy_dataplane::IPVS_INTERFACE } else { "no interface" },
                cleaned.addresses
            );
        }
        ProxyMode::Ebpf => {
            let pin_dir = args.ebpf_pin_dir.unwrap_or_else(|| kproxy_config::EBPF_PIN_DIR.into());
            let removed =
                runtime.block_on(kproxy_dataplane::ebpf::cleanup(&pin_dir)).map_err(|e| anyhow::anyhow!(e))?;
            eprintln!(
                "removed {} links, {} maps and {} tc filters of kproxy's ebpf mode (pinned in {}), and tables ip kproxy-ebpf and ip6 kproxy-ebpf (if they existed)",
                removed.links,
                removed.maps,
                removed.filters,
                pin_dir.display()
            );
        }
        ProxyMode::Nftables => {
            runtime.block_on(kproxy_dataplane::cleanup_nftables())?;
            eprintln!("removed tables ip kproxy and ip6 kproxy (if they existed)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Every proxy mode's objects, kproxy's and kube-proxy's (kube-proxy's
/// `--cleanup`): exits 0 when everything found went, 1 when something
/// could not be removed (named on stderr), as upstream.
pub fn everything(config: &Config) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = runtime.block_on(crate::leftovers::remove(None, config));
    let printed = crate::output::print(&format!("removed {report}\n"));
    for problem in &report.kernel.problems {
        eprintln!("kproxy: not removed: {problem}");
    }
    printed?;
    Ok(if report.kernel.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
