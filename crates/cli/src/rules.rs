//! A proxy mode's kernel rules, planned from a state by the planners `run`
//! applies: what `kproxy trace` walks and `kproxy render` prints. The one
//! `match` over the mode for both commands: a mode without kernel rules
//! (userspace) is an error here, never another mode's answer.

use std::fmt::Write as _;

use anyhow::Context;
use kproxy_config::{Config, ProxyMode};
use kproxy_model::{Changes, IpFamily, ProxyState};
use kproxy_nftables::trace::{Packet, Trace};

use crate::UsageError;

/// The planner settings of a mode with kernel rules, resolved from the
/// configuration as `run` resolves them.
#[derive(Clone, Debug)]
pub enum Rules {
    Nftables(kproxy_nftables::PlanConfig),
    Iptables(kproxy_iptables::PlanConfig),
    Ipvs {
        plan: kproxy_ipvs::PlanConfig,
        companion: kproxy_nftables::PlanConfig,
    },
    /// `pins`: the running kproxy's pin directory, whose maps are traced
    /// and rendered as the kernel holds them; `None`: the planned maps.
    Ebpf {
        plan: kproxy_ebpf::PlanConfig,
        pins: Option<std::path::PathBuf>,
    },
}

/// What `render` prints: the rules, and what the planner could not program.
pub struct Rendered {
    pub text: String,
    pub skipped: Vec<String>,
}

impl Rules {
    /// The rules of `mode` under `config`; the userspace mode has none.
    pub fn of(mode: ProxyMode, config: &Config) -> anyhow::Result<Rules> {
        Ok(match mode {
            ProxyMode::Nftables => Rules::Nftables(crate::mode::nftables_config(config)),
            ProxyMode::Iptables => Rules::Iptables(crate::mode::iptables_config(config)?.plan),
            ProxyMode::Ipvs => {
                let ipvs = crate::mode::ipvs_config(config)?;
                Rules::Ipvs { plan: ipvs.plan, companion: ipvs.companion }
            }
            ProxyMode::Ebpf => Rules::Ebpf { plan: crate::mode::ebpf_config(config)?.plan, pins: None },
            ProxyMode::Userspace => return Err(UsageError(NO_KERNEL_RULES.into()).into()),
        })
    }

    /// Walks `packet` through the rules planned from `state`.
    pub fn trace(&self, state: &ProxyState, packet: &Packet) -> anyhow::Result<Trace> {
        let family = IpFamily::of(&packet.daddr);
        Ok(match self {
            Rules::Nftables(config) => {
                kproxy_nftables::trace::trace(&kproxy_nftables::table(state, family, config), family, packet)
            }
            Rules::Iptables(config) => {
                let planned = kproxy_iptables::plan(state, family, config, None);
                kproxy_iptables::trace::trace(&planned, packet).context("tracing the iptables payload")?
            }
            Rules::Ipvs { plan, companion } => {
                let planned = kproxy_ipvs::plan(state, plan);
                let table = kproxy_ipvs::companion::table(state, &planned, family, &companion.resolved(&state.node));
                kproxy_ipvs::trace::trace(&planned, &table, family, packet)
            }
            Rules::Ebpf { plan, pins } => {
                let contents = ebpf_contents(plan, pins.as_deref(), state)?;
                let packet = ebpf_packet(plan, state, packet);
                let cidrs = &state.family(family).service_cidrs;
                let mut trace = kproxy_ebpf::trace::trace(&contents, cidrs, &packet);
                if let Some(dir) = pins {
                    // Say where the maps walked came from: the kernel's, not a plan.
                    let source = format!("the maps pinned in {}", dir.display());
                    trace.branches.iter_mut().for_each(|branch| branch.path.insert(0, source.clone()));
                }
                trace
            }
        })
    }

    /// The rules of a first full sync from `state`, as text: an `nft -f`
    /// script (nftables), `iptables-restore --noflush` payloads with the
    /// jump rules (iptables), or the virtual servers in `ipvsadm-save`
    /// syntax followed by the companion table's `nft -f` script (ipvs).
    pub fn render(&self, state: &ProxyState) -> Rendered {
        match self {
            Rules::Nftables(config) => {
                let planned = kproxy_nftables::plan(state, &Changes::default(), true, config, None);
                Rendered { text: kproxy_nftables::render::plan(&planned.plan), skipped: planned.skips }
            }
            Rules::Iptables(config) => render_iptables(state, config),
            Rules::Ipvs { plan, companion } => {
                let planned = kproxy_ipvs::plan(state, plan);
                let mut text = String::from("# IPVS virtual servers (ipvsadm -R)\n");
                text.push_str(&kproxy_ipvs::render::save(&planned));
                let config = companion.resolved(&state.node);
                let families = IpFamily::ALL
                    .into_iter()
                    .map(|family| {
                        let table = kproxy_ipvs::companion::table(state, &planned, family, &config);
                        let ops = kproxy_ipvs::companion::ops(None, &table);
                        kproxy_nftables::FamilyPlan { family: Some(family), ops }
                    })
                    .collect();
                let script = kproxy_nftables::Plan { full: true, families };
                let _ = writeln!(text, "# the companion table {} (nft -f)", kproxy_ipvs::companion::TABLE);
                text.push_str(&kproxy_nftables::render::plan_of(kproxy_ipvs::companion::TABLE, &script));
                Rendered { text, skipped: planned.rejected.iter().map(ToString::to_string).collect() }
            }
            Rules::Ebpf { plan, pins } => {
                let tables = kproxy_ebpf::companion::tables(state, &plan.resolved(&state.node));
                let skipped = kproxy_ebpf::desired(state, plan).map_or_else(|e| vec![format!("{e}")], |p| p.skips);
                match ebpf_contents(plan, pins.as_deref(), state) {
                    Ok(contents) => Rendered { text: kproxy_ebpf::render::all(&contents, &tables), skipped },
                    Err(e) => Rendered { text: format!("# {e:#}\n"), skipped },
                }
            }
        }
    }
}

impl Rules {
    /// These rules as a running kproxy holds them: in ebpf mode, the maps
    /// pinned in `config`'s pin directory rather than a plan.
    pub fn live(self, config: &Config) -> Rules {
        match self {
            Rules::Ebpf { plan, .. } => Rules::Ebpf { plan, pins: Some(config.ebpf.pin_dir.clone()) },
            rules => rules,
        }
    }
}

/// The ebpf maps' contents: read from the pins of a running kproxy, or
/// planned from `state`.
fn ebpf_contents(
    plan: &kproxy_ebpf::PlanConfig,
    pins: Option<&std::path::Path>,
    state: &ProxyState,
) -> anyhow::Result<kproxy_ebpf::maps::Contents> {
    Ok(match pins {
        Some(dir) => {
            let (contents, _) = kproxy_bpf::read_pinned(dir)
                .with_context(|| format!("reading the maps pinned in {}", dir.display()))?;
            contents
        }
        None => kproxy_ebpf::desired(state, plan).context("planning the ebpf maps")?.applied.contents(),
    })
}

/// Where the ebpf programs first see `packet`: the socket hooks for the
/// node itself and for pods (the local-traffic detector's sources; every
/// pod is in the default cgroup), tc for everyone else. A socket's
/// network namespace is not known here, so hashing schedulers pick as for
/// namespace cookie 0.
fn ebpf_packet(config: &kproxy_ebpf::PlanConfig, state: &ProxyState, packet: &Packet) -> kproxy_ebpf::trace::Packet {
    let from_pod = config.resolved(&state.node).local_cidrs().iter().any(|net| net.contains(&packet.saddr));
    let origin = match packet.iif {
        None => kproxy_ebpf::trace::Origin::Socket { netns_cookie: 0 },
        Some(_) if from_pod => kproxy_ebpf::trace::Origin::Socket { netns_cookie: 0 },
        Some(_) => kproxy_ebpf::trace::Origin::Tc { saddr: packet.saddr },
    };
    kproxy_ebpf::trace::Packet { origin, daddr: packet.daddr, protocol: packet.protocol, dport: packet.dport }
}

/// Why `trace` and `render` refuse the userspace mode.
pub const NO_KERNEL_RULES: &str =
    "the userspace mode proxies through kproxy's own sockets and programs no kernel rules: nothing to trace or render";

/// Each family's payload of a first full sync, for `iptables-restore
/// --noflush` (`ip6tables-restore` for IPv6), and the jump rules `run`
/// ensures from the built-in chains.
fn render_iptables(state: &ProxyState, config: &kproxy_iptables::PlanConfig) -> Rendered {
    let mut text = String::new();
    let mut skipped = Vec::new();
    for family in IpFamily::ALL {
        let planned = kproxy_iptables::plan(state, family, config, None);
        let tool = match family {
            IpFamily::V4 => "iptables",
            IpFamily::V6 => "ip6tables",
        };
        let _ = writeln!(text, "# {family}: {tool}-restore --noflush");
        text.push_str(&planned.payload.render());
        let _ = writeln!(text, "# {family}: jump rules ({tool} -C, else -I)");
        for jump in &planned.jump_rules {
            let args: Vec<String> = jump.args.iter().map(|a| quoted(a)).collect();
            let _ = writeln!(text, "# -t {} -I {} {}", jump.table.as_str(), jump.chain, args.join(" "));
        }
        skipped.extend(planned.skips);
    }
    Rendered { text, skipped }
}

/// `arg` as a shell word: in double quotes (as `iptables-save` writes
/// comments) when it has white space or shell metacharacters, so that a
/// jump rule line can be run as printed. Jump rule arguments are kproxy's
/// own constants (chain names, matches, comments of plain words).
fn quoted(arg: &str) -> String {
    if !arg.is_empty() && !arg.chars().any(|c| c.is_whitespace() || "\"'\\$`;&|<>()*?[]#~{}".contains(c)) {
        return arg.to_owned();
    }
    let mut out = String::from('"');
    for c in arg.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}
