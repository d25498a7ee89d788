//! The dataplane seam and the loop that drives it.
//!
//! [`Dataplane`] is what every mode implements (observe, plan, apply inside
//! one `sync`); [`Runner`] folds source events into the state and decides
//! when to sync: at once while its bucket of two syncs holds one (refilled
//! one per minSyncPeriod, as upstream paces its proxiers), at least every
//! syncPeriod, retrying with backoff after a failure (the retry is a full
//! sync), and a full sync every hour. [`KernelFiles`] is the one seam to
//! the node's sysctls; [`apply_conntrack_settings`] applies `conntrack.*`
//! through it at start.

mod companion;
mod conntrack;
mod conntrack_settings;
mod dataplane;
mod dry_run;
pub mod ebpf;
mod failure;
mod iptables;
mod ipvs;
pub mod leftovers;
mod nftables;
mod no_local;
mod pacing;
mod runner;
mod sysctl;
mod warnings;

pub use conntrack_settings::{
    ConntrackSettings, Outcome as ConntrackOutcome, Skip as ConntrackSkip, apply_conntrack_settings, conntrack_max,
    node_cpus,
};
pub use dataplane::{
    ConntrackCleanup, Dataplane, DataplaneError, RuleCount, SyncFuture, SyncKind, SyncReport, SyncRequest,
};
pub use dry_run::DryRun;
pub use failure::{FailureCause, RestoreFailed, cause_of, errno_name};
pub use iptables::{Iptables, IptablesConfig, NFT_CHAINS_PER_RESTORE, cleanup as cleanup_iptables};
pub use ipvs::{
    Cleaned as CleanedIpvs, INTERFACE as IPVS_INTERFACE, Ipvs, IpvsConfig, IpvsError, cleanup as cleanup_ipvs,
};
pub use nftables::{Nftables, NftablesError, cleanup as cleanup_nftables, nft};
pub use runner::{Runner, RunnerConfig, RunnerHandles};
pub use sysctl::{Ensured, KernelFiles, SysctlError};
