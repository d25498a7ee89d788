//! The committed `programs/kproxy.bpf.o` is what its sources compile to:
//! `programs/build.sh --check` compiles afresh and compares bytes.

use std::process::Command;

#[test]
fn the_committed_object_matches_a_fresh_compile_of_its_sources() {
    let clang = std::env::var("KPROXY_BPF_CLANG").ok().filter(|c| c != "0").unwrap_or_else(|| "clang".into());
    if !Command::new(&clang).arg("--version").output().is_ok_and(|o| o.status.success()) {
        if std::env::var("KPROXY_REQUIRE_NETNS").as_deref() == Ok("1") || std::env::var("CI").is_ok() {
            panic!("{clang} is needed to check programs/kproxy.bpf.o (apt-get install clang libbpf-dev)");
        }
        eprintln!("skipping: no {clang}");
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/programs/build.sh");
    let output = Command::new("sh").args([script, "--check"]).env("CLANG", &clang).output().expect("run build.sh");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_embedded_object_is_the_committed_one_or_a_fresh_compile() {
    let committed: &[u8] = include_bytes!("../../programs/kproxy.bpf.o");
    if crate::OBJECT_SOURCE == "committed" {
        assert_eq!(crate::object(), committed);
    } else {
        assert_eq!(crate::OBJECT_SOURCE, "clang");
        assert!(crate::object().starts_with(b"\x7fELF"));
    }
}
