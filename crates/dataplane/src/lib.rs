//! The dataplane seam and the loop that drives it.
//!
//! [`Dataplane`] is what every mode implements (observe, plan, apply inside
//! one `sync`); [`Runner`] folds source events into the state and decides
//! when to sync: not more often than minSyncPeriod, at least every
//! syncPeriod, retrying with backoff after a failure (the retry is a full
//! sync), and a full sync every hour.

mod conntrack;
mod dataplane;
mod dry_run;
mod iptables;
mod ipvs;
mod nftables;
mod no_local;
mod runner;
mod warnings;

pub use dataplane::{Dataplane, DataplaneError, SyncFuture, SyncKind, SyncReport, SyncRequest};
pub use dry_run::DryRun;
pub use iptables::{Iptables, IptablesConfig, NFT_CHAINS_PER_RESTORE, cleanup as cleanup_iptables};
pub use ipvs::{
    Cleaned as CleanedIpvs, INTERFACE as IPVS_INTERFACE, Ipvs, IpvsConfig, IpvsError, cleanup as cleanup_ipvs,
};
pub use nftables::{Nftables, NftablesError, cleanup as cleanup_nftables, nft};
pub use runner::{Runner, RunnerConfig, RunnerHandles};
