//! `kproxy render`: the rules `run` would apply, as an `nft -f` script
//! (or, with `--proxy-mode iptables`, as `iptables-restore` input).

use std::process::ExitCode;

use kproxy_model::Changes;

use crate::args::RenderArgs;
use crate::state_cmd::load_state;

/// Prints the script of a first full sync (it replaces kproxy's tables);
/// loading it with `nft -f` programs what `run` would.
pub fn render(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_state(&args.common)?;
    if loaded.config.mode == Some(kproxy_config::ProxyMode::Iptables) {
        return render_iptables(&loaded);
    }
    let config = crate::mode::nftables_config(&loaded.config);
    let planned = kproxy_nftables::plan(loaded.builder.state(), &Changes::default(), true, &config, None);
    for skipped in &planned.skips {
        eprintln!("not programmed: {skipped}");
    }
    crate::output::print(&kproxy_nftables::render::plan(&planned.plan))?;
    Ok(loaded.exit_code())
}

/// Each family's payload of a first full sync, for `iptables-restore
/// --noflush` (`ip6tables-restore` for IPv6), and the jump rules `run`
/// ensures from the built-in chains.
fn render_iptables(loaded: &crate::state_cmd::Loaded) -> anyhow::Result<ExitCode> {
    use std::fmt::Write as _;
    let config = crate::mode::iptables_config(&loaded.config)?;
    let mut out = String::new();
    for family in kproxy_model::IpFamily::ALL {
        let planned = kproxy_iptables::plan(loaded.builder.state(), family, &config.plan, None);
        let tool = match family {
            kproxy_model::IpFamily::V4 => "iptables",
            kproxy_model::IpFamily::V6 => "ip6tables",
        };
        let _ = writeln!(out, "# {family}: {tool}-restore --noflush");
        out.push_str(&planned.payload.render());
        let _ = writeln!(out, "# {family}: jump rules ({tool} -C, else -I)");
        for jump in &planned.jump_rules {
            let args: Vec<String> = jump.args.iter().map(|a| quoted(a)).collect();
            let _ = writeln!(out, "# -t {} -I {} {}", jump.table.as_str(), jump.chain, args.join(" "));
        }
        for skipped in &planned.skips {
            eprintln!("not programmed: {skipped}");
        }
    }
    crate::output::print(&out)?;
    Ok(loaded.exit_code())
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
