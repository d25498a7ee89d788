//! The committed `programs/kproxy.bpf.o` is what its sources compile to:
//! `programs/build.sh --check` compiles afresh and compares bytes.

use std::process::Command;

const PROGRAMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/programs");

/// The clang to check with, or None to skip (never under CI or
/// `KPROXY_REQUIRE_NETNS=1`, where a missing clang fails).
fn clang() -> Option<String> {
    let clang = std::env::var("KPROXY_BPF_CLANG").ok().filter(|c| c != "0").unwrap_or_else(|| "clang".into());
    if Command::new(&clang).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some(clang);
    }
    if std::env::var("KPROXY_REQUIRE_NETNS").as_deref() == Ok("1") || std::env::var("CI").is_ok() {
        panic!("{clang} is needed to check programs/kproxy.bpf.o (apt-get install clang libbpf-dev)");
    }
    eprintln!("skipping: no {clang}");
    None
}

#[test]
fn the_committed_object_matches_a_fresh_compile_of_its_sources() {
    let Some(clang) = clang() else { return };
    let script = format!("{PROGRAMS}/build.sh");
    let output = Command::new("sh").args([&script, "--check"]).env("CLANG", &clang).output().expect("run build.sh");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_compile_of_a_copy_at_another_path_is_byte_identical() {
    let Some(clang) = clang() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let copy = dir.path().join("elsewhere").join("programs");
    std::fs::create_dir_all(&copy).expect("mkdir");
    for entry in std::fs::read_dir(PROGRAMS).expect("read programs/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "c" || e == "h" || e == "sh") {
            std::fs::copy(&path, copy.join(path.file_name().expect("a name"))).expect("copy a source");
        }
    }
    let out = dir.path().join("out.o");
    let status = Command::new("sh")
        .arg(copy.join("build.sh"))
        .arg("--out")
        .arg(&out)
        .env("CLANG", &clang)
        .status()
        .expect("run the copy's build.sh");
    assert!(status.success());
    let committed = std::fs::read(format!("{PROGRAMS}/kproxy.bpf.o")).expect("the committed object");
    assert!(std::fs::read(&out).expect("the copy's object") == committed, "the object depends on its path");
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
