//! `docs/configuration.md` shows the support table the code warns from.
//!
//! The table between the file's markers must be what
//! `kproxy_config::support_markdown()` generates; run with `KPROXY_BLESS=1`
//! to rewrite it after changing the table in `src/support.rs`.

use std::path::PathBuf;

const START: &str = "<!-- support-table: generated from crates/config/src/support.rs; KPROXY_BLESS=1 cargo test -p kproxy-config --test support_docs -->\n";
const END: &str = "<!-- end of support-table -->";

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md")
}

#[test]
fn the_docs_support_table_is_the_one_the_code_generates() {
    let path = docs();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start =
        text.find(START).unwrap_or_else(|| panic!("{}: no start marker {START:?}", path.display())) + START.len();
    let end = start + text[start..].find(END).unwrap_or_else(|| panic!("{}: no end marker {END:?}", path.display()));
    let expected = kproxy_config::support_markdown();
    if text[start..end] == expected {
        return;
    }
    if std::env::var_os("KPROXY_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, format!("{}{expected}{}", &text[..start], &text[end..])).expect("docs are writable");
        return;
    }
    panic!(
        "{} differs from the support table in crates/config/src/support.rs; \
         rerun with KPROXY_BLESS=1 to rewrite it. The table should read:\n{expected}",
        path.display()
    );
}
