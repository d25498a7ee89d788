//! kproxy's iptables kernel edge: everything it runs of the iptables tools.
//!
//! - [`detect`] picks the backend this network namespace uses, legacy
//!   (`ip_tables` over setsockopt) or nft (the `iptables-nft` tools over
//!   nf_tables), the way upstream's `iptables-wrapper` decides, unless the
//!   configuration names one;
//! - [`Iptables::restore`] feeds a payload to `iptables-restore --noflush`
//!   (or `ip6tables-restore`) and reports a refusal with the line it names;
//! - [`Iptables::ensure_canary`] and [`Iptables::canary_present`] keep the
//!   `KUBE-PROXY-CANARY` chains that reveal a flush by someone else;
//! - [`Iptables::chains`] lists the chains of tables: over netlink with
//!   the nft backend (much faster than `iptables-nft-save` with 100,000
//!   chains), from `*-save` with the legacy one;
//! - [`Iptables::cleanup`] removes listed jump rules and chains by prefix;
//! - [`Iptables::remove_chains`] removes chains another proxy left, with
//!   the jumps to them found in the built-in chains.
//!
//! This crate runs the tools (and its netlink dumps) in the calling
//! thread's network namespace and plans nothing: payloads come from the
//! planner, chain names from the caller. It never edits a rule or chain it
//! was not told about.

mod backend;
mod canary;
mod chains;
mod cleanup;
mod command;
mod detect;
mod error;
mod leftovers;
mod restore;
mod save;

pub use backend::{Backend, BackendChoice, Table};
pub use canary::CANARY_CHAIN;
pub use cleanup::{Cleaned, Cleanup, JumpRule};
pub use detect::{Detection, Reason, detect, installed};
pub use error::IptablesError;
pub use leftovers::Removed;
pub use restore::{DEFAULT_TIMEOUT, Iptables, LOCK_WAIT_SECONDS};
