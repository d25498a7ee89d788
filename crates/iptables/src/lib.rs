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
//!
//! Schedulers: iptables mode picks endpoints at random (`statistic`), as
//! upstream; a port asking for any other scheduler is skipped with a reason
//! and not served. Weights (`kproxy.io/weights`) are ignored by `random`.

mod base;
mod config;
pub mod names;
mod payload;
mod plan;
mod port;
mod ruleset;

pub use base::{FILTER_CHAINS, JumpRule, NAT_CHAINS, jump_rules};
pub use config::{LocalDetector, PlanConfig};
pub use payload::{Payload, Rule, Table, TablePayload};
pub use plan::{Applied, Planned, cleanup, fixed_chains, plan};
pub use port::probability;
