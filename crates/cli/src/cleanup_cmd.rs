//! `kproxy cleanup`: remove kproxy's kernel objects, nothing else.

use std::process::ExitCode;

use kproxy_netlink::routes::ROUTE_PROTOCOL;

use crate::UsageError;
use crate::args::CleanupArgs;

pub fn cleanup(args: CleanupArgs) -> anyhow::Result<ExitCode> {
    if !matches!(args.mode.as_str(), "nftables" | "userspace") {
        return Err(UsageError(format!(
            "--proxy-mode {}: nothing to clean up for it in this build (only nftables and userspace)",
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
    runtime.block_on(kproxy_dataplane::cleanup_nftables())?;
    eprintln!("removed tables ip kproxy and ip6 kproxy (if they existed)");
    Ok(ExitCode::SUCCESS)
}
