//! Tests that need a kernel with IPVS, which this project's machines do not
//! have: the test binary copies itself into the payload of the throwaway VM
//! in `tools/ipvs-vm` (a stock Debian kernel under qemu, no network device)
//! and runs one test there.
//!
//! ```ignore
//! #[test]
//! fn a_service_reaches_the_kernel() {
//!     if !vm::in_guest() {
//!         return vm::run_test("a_service_reaches_the_kernel");
//!     }
//!     // ... runs as root inside the VM, where IPVS exists ...
//! }
//! ```
//!
//! A test that needs more than its own binary in the guest (the `kproxy`
//! binary, say) names the files with [`run_test_with`] and finds them
//! there with [`payload_file`]:
//!
//! ```ignore
//! if !vm::in_guest() {
//!     let kproxy = Path::new(env!("CARGO_BIN_EXE_kproxy"));
//!     return vm::run_test_with("ipvs_mode_serves_a_cluster_ip", &[(kproxy, "kproxy")]);
//! }
//! let kproxy = vm::payload_file("kproxy"); // /payload/kproxy
//! ```
//!
//! A VM that cannot start (no qemu, no downloads) fails the test: the
//! tests are meant to run in CI, never to be skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this process runs inside the VM (`run.sh` sets the variable).
pub fn in_guest() -> bool {
    std::env::var_os("IPVS_QEMU_GUEST").is_some()
}

/// `tools/ipvs-vm/run.sh` of this repository.
pub fn runner() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/ipvs-vm/run.sh")
}

/// Where the payload folder is inside the guest; it is also the payload's
/// working directory there.
pub const GUEST_PAYLOAD: &str = "/payload";

/// The path inside the guest of a file copied in by [`run_test_with`]
/// under `name`.
pub fn payload_file(name: &str) -> PathBuf {
    Path::new(GUEST_PAYLOAD).join(name)
}

/// Runs the test `name` of the current test binary inside the VM (as root,
/// `IPVS_QEMU_GUEST` set); panics with the guest's console unless the test
/// passed there.
pub fn run_test(name: &str) {
    run_test_with(name, &[]);
}

/// [`run_test`], with each `(source, name)` of `files` copied into the
/// payload as `name` (a plain file name; executables stay executable and
/// get their shared libraries in the guest), found there with
/// [`payload_file`]. The guest's RAM grows with the payload (`run.sh`).
pub fn run_test_with(name: &str, files: &[(&Path, &str)]) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let payload = std::env::temp_dir().join(format!("kproxy-vm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&payload);
    std::fs::create_dir_all(&payload).expect("a payload folder");
    std::fs::copy(&exe, payload.join("test")).expect("copying the test binary into the payload");
    for (source, target) in files {
        assert!(
            *target != "test" && !target.is_empty() && !target.contains('/'),
            "payload file name {target:?}: a plain name other than `test`"
        );
        std::fs::copy(source, payload.join(target))
            .unwrap_or_else(|e| panic!("copying {} into the payload: {e}", source.display()));
    }
    let output = Command::new(runner())
        .arg("--payload")
        .arg(&payload)
        .args(["--", "./test", "--exact", name, "--nocapture", "--test-threads=1"])
        .env("IPVS_QEMU_TIMEOUT", std::env::var("IPVS_QEMU_TIMEOUT").unwrap_or_else(|_| "300".into()))
        .output()
        .unwrap_or_else(|e| panic!("starting {}: {e}", runner().display()));
    let _ = std::fs::remove_dir_all(&payload);
    let console = String::from_utf8_lossy(&output.stdout);
    let log = String::from_utf8_lossy(&output.stderr);
    let verdict = match output.status.code() {
        Some(0) => {
            // Captured by the test harness: shown with --nocapture (timings, guest RAM).
            eprintln!("--- console ---\n{console}\n--- run.sh ---\n{log}");
            return;
        }
        Some(124) => "the VM timed out".to_string(),
        Some(125) => "the VM did not start or gave no exit status".to_string(),
        Some(code) => format!("the test failed in the VM (exit {code})"),
        None => "run.sh was killed".to_string(),
    };
    panic!("{name}: {verdict}\n--- console ---\n{console}\n--- run.sh ---\n{log}");
}
