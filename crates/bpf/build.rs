//! Embeds kproxy's BPF object. With clang (and `KPROXY_BPF_CLANG` not
//! `0`) the programs are compiled from `programs/` into OUT_DIR by
//! `programs/build.sh`, the one place their flags are written; without it
//! (a fresh machine with only Rust), or if that compile fails, the
//! committed `programs/kproxy.bpf.o` is embedded. A test
//! (`tests/object.rs`) keeps the committed object equal to its sources.
//!
//! `KPROXY_BPF_CLANG`: unset = `clang`; `0` = use the committed object;
//! anything else = the clang command to use.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCES: &[&str] =
    &["kproxy.bpf.c", "kp_lb.h", "kp_sock.h", "kp_tc.h", "kproxy_maps.h", "build.sh", "kproxy.bpf.o"];

fn main() {
    println!("cargo:rerun-if-env-changed=KPROXY_BPF_CLANG");
    for source in SOURCES {
        println!("cargo:rerun-if-changed=programs/{source}");
    }
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("kproxy.bpf.o");
    let programs = manifest.join("programs");
    let clang = env::var("KPROXY_BPF_CLANG").unwrap_or_else(|_| "clang".to_owned());

    let compiled = clang != "0" && has(&clang) && compile(&clang, &programs, &out);
    if !compiled {
        std::fs::copy(programs.join("kproxy.bpf.o"), &out).expect("copy the committed programs/kproxy.bpf.o");
    }
    println!("cargo:rustc-env=KPROXY_BPF_OBJECT_SOURCE={}", if compiled { "clang" } else { "committed" });
}

fn has(clang: &str) -> bool {
    Command::new(clang).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn compile(clang: &str, programs: &std::path::Path, out: &std::path::Path) -> bool {
    let status = Command::new("sh").arg(programs.join("build.sh")).arg("--out").arg(out).env("CLANG", clang).status();
    match status {
        Ok(s) if s.success() => true,
        // clang without libbpf's headers, say: the committed object still
        // builds a working binary, so warn instead of failing the build.
        _ => {
            println!("cargo:warning=compiling the BPF programs with {clang} failed; embedding the committed object");
            false
        }
    }
}
