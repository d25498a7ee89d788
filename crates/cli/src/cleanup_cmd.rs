//! `kproxy cleanup`: remove kproxy's kernel objects, nothing else.

use std::process::ExitCode;

use crate::UsageError;
use crate::args::CleanupArgs;

pub fn cleanup(args: CleanupArgs) -> anyhow::Result<ExitCode> {
    if args.mode != "nftables" {
        return Err(UsageError(format!(
            "--proxy-mode {}: nothing to clean up for it in this build (only nftables)",
            args.mode
        ))
        .into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(kproxy_dataplane::cleanup_nftables())?;
    eprintln!("removed tables ip kproxy and ip6 kproxy (if they existed)");
    Ok(ExitCode::SUCCESS)
}
