//! `scripts/image`: the OCI archive it writes from the release binary is an
//! image skopeo reads and umoci unpacks, configured to run
//! `/usr/local/bin/kproxy run` as root, and the unpacked layers run
//! `kproxy --version` under chroot, with a stripped binary; the iptables
//! variant adds every iptables tool kproxy runs, working. The same inputs
//! give the same archive, byte for byte.
//!
//! Needs root (chroot), skopeo, umoci and Debian's apt with package lists
//! (scripts/test installs them and builds the release binary first). It
//! fails, never skips, when something is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kproxy_iptables_exec::Backend;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(command: &mut Command) -> Output {
    let shown = format!("{command:?}");
    let output = command.output().unwrap_or_else(|e| panic!("{shown} could not be run: {e}"));
    assert!(
        output.status.success(),
        "{shown} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(command: &mut Command) -> String {
    String::from_utf8(run(command).stdout).expect("UTF-8 output")
}

/// `scripts/image --variant <variant> --out <dir>/kproxy.oci.tar`: the
/// release build's path, as CI ships it.
fn build(variant: &str, dir: &Path) -> PathBuf {
    assert!(is_root(), "scripts/image's test needs root: it unpacks the image and chroots into it");
    let out = dir.join("kproxy.oci.tar");
    let printed = stdout(Command::new(repo().join("scripts/image")).args(["--variant", variant, "--out"]).arg(&out));
    assert_eq!(printed.trim_end(), out.to_str().expect("a UTF-8 path"), "the script prints the archive's path");
    out
}

/// Whether this process runs as root: `/proc/self` belongs to its user.
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The architecture name OCI uses for this machine's.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn skopeo(args: &[&str], archive: &Path) -> Value {
    let reference = format!("oci-archive:{}", archive.display());
    let text = stdout(Command::new("skopeo").args(args).arg(reference));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("skopeo printed no JSON ({e}):\n{text}"))
}

/// The image's root file system: the archive's layout unpacked by umoci.
fn unpack(archive: &Path, tag: &str, dir: &Path) -> PathBuf {
    let layout = dir.join("layout");
    std::fs::create_dir(&layout).expect("a folder");
    run(Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(&layout));
    let bundle = dir.join("bundle");
    run(Command::new("umoci").arg("unpack").arg("--image").arg(format!("{}:{tag}", layout.display())).arg(&bundle));
    bundle.join("rootfs")
}

/// `program args` run inside `rootfs` with the image's PATH; its output.
fn chroot(rootfs: &Path, program: &str, args: &[&str]) -> String {
    let mut command = Command::new("chroot");
    command
        .arg(rootfs)
        .arg(program)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    let output = run(&mut command);
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The ELF section names of `binary` (readelf, from binutils like strip).
fn sections(binary: &Path) -> Vec<String> {
    let text = stdout(Command::new("readelf").args(["-S", "--wide"]).arg(binary));
    text.lines().filter_map(|l| l.split(']').nth(1)?.split_whitespace().next().map(str::to_owned)).collect()
}

/// Checks what both variants share, and returns the unpacked root.
fn check_image(archive: &Path, tag: &str, dir: &Path) -> PathBuf {
    let config = skopeo(&["inspect", "--config"], archive);
    assert_eq!(config["os"], "linux", "{config}");
    assert_eq!(config["architecture"], oci_arch(), "{config}");
    let run_config = &config["config"];
    assert_eq!(run_config["Entrypoint"], serde_json::json!(["/usr/local/bin/kproxy"]), "{config}");
    assert_eq!(run_config["Cmd"], serde_json::json!(["run"]), "{config}");
    assert_eq!(run_config["User"], "0", "{config}");
    let inspect = skopeo(&["inspect"], archive);
    assert_eq!(inspect["Labels"]["org.opencontainers.image.version"], tag, "{inspect}");
    assert_eq!(inspect["Layers"].as_array().map(Vec::len), Some(1), "one layer: {inspect}");

    let rootfs = unpack(archive, tag, dir);
    let version = chroot(&rootfs, "/usr/local/bin/kproxy", &["--version"]);
    let want = format!("kproxy {}", env!("CARGO_PKG_VERSION"));
    assert!(version.starts_with(&want), "`kproxy --version` printed {version:?}, not {want:?}...");
    let names = sections(&rootfs.join("usr/local/bin/kproxy"));
    assert!(names.iter().any(|s| s == ".text"), "readelf saw no sections: {names:?}");
    // `.debug_gdb_scripts` is loaded with the program (rustc's pretty
    // printers); strip keeps it, and it is no debug information.
    let debug = |s: &&String| s.starts_with(".debug") && *s != ".debug_gdb_scripts";
    let unstripped: Vec<&String> = names.iter().filter(|s| *s == ".symtab" || debug(s)).collect();
    assert!(unstripped.is_empty(), "the image's kproxy is not stripped: {unstripped:?}");
    // Image scanners read distroless' package records.
    assert!(rootfs.join("var/lib/dpkg/status.d/libc6").is_file(), "no package record for libc6");
    rootfs
}

#[test]
fn default_image_is_a_reproducible_oci_archive_whose_stripped_kproxy_runs_under_chroot() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let archive = build("default", dir.path());
    let again = tempfile::tempdir().expect("a temporary folder");
    let second = build("default", again.path());
    let (a, b) = (std::fs::read(&archive).expect("archive"), std::fs::read(&second).expect("archive"));
    assert!(a == b, "two builds from the same binary and packages differ ({} and {} bytes)", a.len(), b.len());

    let rootfs = check_image(&archive, env!("CARGO_PKG_VERSION"), dir.path());
    // nftables, IPVS and userspace modes need no tools: none are shipped.
    assert!(!rootfs.join("usr/sbin/iptables-legacy").exists(), "the default image holds iptables");
}

#[test]
fn iptables_image_runs_every_iptables_tool_kproxy_uses_in_both_backends() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let archive = build("iptables", dir.path());
    let tag = format!("{}-iptables", env!("CARGO_PKG_VERSION"));
    let rootfs = check_image(&archive, &tag, dir.path());
    let legacy = chroot(&rootfs, "iptables-legacy", &["--version"]);
    assert!(legacy.starts_with("iptables v") && legacy.contains("(legacy)"), "{legacy:?}");
    let nft = chroot(&rootfs, "iptables-nft", &["--version"]);
    assert!(nft.starts_with("iptables v") && nft.contains("(nf_tables)"), "{nft:?}");
    for backend in Backend::ALL {
        let kernel_side = if backend == Backend::Legacy { "(legacy)" } else { "(nf_tables)" };
        for tool in backend.tools() {
            let printed = chroot(&rootfs, &tool, &["--version"]);
            assert!(printed.contains(kernel_side), "{tool} --version printed {printed:?}");
        }
    }
}
