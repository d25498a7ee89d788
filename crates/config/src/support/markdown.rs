//! The support table as Markdown, for `docs/configuration.md`.
//!
//! A test in `tests/support_docs.rs` checks that the file holds exactly
//! this text between its markers; `KPROXY_BLESS=1` rewrites it.

use std::fmt::Write;

use super::{FIELDS, MODES, Setting, Support};

/// One row per setting: its path, its flag, one column per mode, notes.
pub fn markdown() -> String {
    let mut out = String::from("| Setting | Flag |");
    for mode in MODES {
        write!(out, " {mode} |").expect("writing to a String");
    }
    out.push_str(" Notes |\n| --- | --- |");
    out.push_str(&" :-: |".repeat(MODES.len()));
    out.push_str(" --- |\n");
    for setting in FIELDS {
        out.push_str(&row(setting));
    }
    out
}

fn code(name: Option<&str>) -> String {
    name.map(|n| format!("`{n}`")).unwrap_or_default()
}

fn row(setting: &Setting) -> String {
    let (cells, reason): (Vec<&str>, Option<String>) = match setting.support {
        Support::Modes(_) => (MODES.iter().map(|&m| if setting.applies_in(m) { "yes" } else { "no" }).collect(), None),
        Support::NotYet => (vec!["not yet"; MODES.len()], Some("not implemented yet".to_owned())),
        Support::Ignored(why) => (vec!["ignored"; MODES.len()], Some(why.to_owned())),
    };
    let notes: Vec<String> =
        reason.into_iter().chain(Some(setting.note.to_owned()).filter(|n| !n.is_empty())).collect();
    let mut out = format!("| {} | {} |", code(setting.path), code(setting.flag));
    for cell in cells {
        write!(out, " {cell} |").expect("writing to a String");
    }
    writeln!(out, " {} |", notes.join("; ")).expect("writing to a String");
    out
}
