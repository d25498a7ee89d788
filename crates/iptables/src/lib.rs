//! The iptables mode's planner. Pure: no kernel, no processes, no files, no
//! clock.
//!
//! It reproduces upstream kube-proxy's iptables layout (`pkg/proxy/iptables`)
//! so that operators' tooling keeps working: the same chain names (hashed as
//! upstream hashes them, see [`names`]), the same chains per table, the same
//! rule text and comments. nat: `KUBE-SERVICES`, `KUBE-NODEPORTS`,
//! `KUBE-POSTROUTING`, `KUBE-MARK-MASQ` and per service port `KUBE-SVC-*`,
//! `KUBE-SVL-*`, `KUBE-EXT-*`, `KUBE-FW-*`, `KUBE-SEP-*`; filter:
//! `KUBE-SERVICES`, `KUBE-EXTERNAL-SERVICES`, `KUBE-FORWARD` (with the
//! conntrack INVALID drop), `KUBE-NODEPORTS`, `KUBE-PROXY-FIREWALL` and,
//! with localhost node ports, kubelet's `KUBE-FIREWALL` localnet guard.
//!
//! [`plan`] turns a [`kproxy_model::ProxyState`] into a typed [`Payload`]
//! for one family (render it with [`Payload::render`] and feed it to
//! `iptables-restore --noflush` / `ip6tables-restore --noflush`), the
//! [`Applied`] record for the next partial plan, the [`JumpRule`]s the
//! applier ensures with `iptables -C`/`-I` on full syncs, and skips.
//! [`prepare`] plans the same without building the payload: the applier
//! asks it for its [`Restore`]s and writes each as [`Chunks`] of text
//! generated from the ports as they are written, so neither a payload nor
//! the rules of unchanged ports stay in memory ([`Applied`] keeps chain
//! names and content hashes).
//!
//! How kproxy differs from upstream's output, on purpose:
//! - partial payloads list only chains whose content hash changed (upstream
//!   always rewrites the dispatch chains); an unchanged state plans an empty
//!   payload, which the applier need not send;
//! - rules are grouped per chain (upstream interleaves them as it loops;
//!   the kernel ends up the same);
//! - filter KUBE-SERVICES ends with a REJECT per cluster IP for the ports
//!   it does not serve (SEMANTICS.md; upstream routes them on);
//! - no "large cluster mode" (comments are always written) and no nfacct
//!   counters; `--random-fully` is always used (every supported iptables
//!   has it).
//!
//! Stale per-service chains left by an earlier process are not known to a
//! full plan (it never reads the kernel): the applier lists the existing
//! chains once and sends [`cleanup`] with `keep` set to the new [`Applied`].
//!
//! Schedulers: iptables mode picks endpoints at random (`statistic`), as
//! upstream, with equal weights. A Service asking for another scheduler or
//! for weights is served at random all the same; the state says so with a
//! warning when built with [`support`].

mod base;
mod chunks;
mod claims;
mod cleanup;
mod config;
mod emit;
pub mod names;
mod payload;
mod plan;
mod port;
mod ruleset;
pub mod trace;

pub use base::{FILTER_CHAINS, JumpRule, NAT_CHAINS, jump_rules};
pub use chunks::Chunks;
pub use cleanup::{cleanup, fixed_chains};
pub use config::{LocalDetector, PlanConfig};
pub use emit::{CHUNK_BYTES, Prepared, Restore};
pub use payload::{Payload, Rule, Table, TablePayload};
pub use plan::{Applied, Planned, plan, prepare};
pub use port::{probability, support};
