//! `kproxy cleanup`: remove kproxy's kernel objects, nothing else.

use std::process::ExitCode;

use kproxy_netlink::routes::ROUTE_PROTOCOL;

use crate::UsageError;
use crate::args::CleanupArgs;

pub fn cleanup(args: CleanupArgs) -> anyhow::Result<ExitCode> {
    if !matches!(args.mode.as_str(), "nftables" | "iptables" | "ipvs" | "userspace") {
        return Err(UsageError(format!(
            "--proxy-mode {}: nothing to clean up for it in this build (only nftables, iptables, ipvs and userspace)",
            args.mode
        ))
        .into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    if args.mode == "userspace" {
        // Routes of other protocols, even for the same addresses, stay.
        let removed = runtime.block_on(crate::claim::cleanup())?;
        eprintln!("removed {removed} local routes of protocol {ROUTE_PROTOCOL} (kproxy's claimed addresses)");
        return Ok(ExitCode::SUCCESS);
    }
    if args.mode == "iptables" {
        let backend = crate::mode::iptables_backend(args.iptables_backend.as_deref())?;
        let cleaned = runtime.block_on(kproxy_dataplane::cleanup_iptables(backend))?;
        eprintln!(
            "removed {} jump rules and {} chains of kproxy's (both families)",
            cleaned.jumps,
            cleaned.chains.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if args.mode == "ipvs" {
        let mut exclude = Vec::new();
        for cidr in &args.ipvs_exclude_cidrs {
            let net = cidr
                .parse::<kproxy_model::IpNet>()
                .map_err(|e| UsageError(format!("--ipvs-exclude-cidrs {cidr}: {e}")))?;
            exclude.push(net);
        }
        let cleaned = runtime.block_on(kproxy_dataplane::cleanup_ipvs(&exclude)).map_err(|e| anyhow::anyhow!(e))?;
        eprintln!(
            "removed {} IPVS virtual servers, {} ({} addresses) and tables ip kproxy-ipvs and ip6 kproxy-ipvs (if they existed)",
            cleaned.servers,
            if cleaned.interface { kproxy_dataplane::IPVS_INTERFACE } else { "no interface" },
            cleaned.addresses
        );
        return Ok(ExitCode::SUCCESS);
    }
    runtime.block_on(kproxy_dataplane::cleanup_nftables())?;
    eprintln!("removed tables ip kproxy and ip6 kproxy (if they existed)");
    Ok(ExitCode::SUCCESS)
}
