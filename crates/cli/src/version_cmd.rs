//! `kproxy version` and `kproxy --version`: the release, the git commit and
//! the build date stamped by `build.rs`.

use std::process::ExitCode;

use crate::args::{VersionArgs, VersionOutput};

/// The release (`Cargo.toml`'s version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The abbreviated git commit the binary was built from, or `unknown`.
pub const GIT_COMMIT: &str = env!("KPROXY_GIT_COMMIT");
/// When the binary was built (UTC, RFC 3339; `SOURCE_DATE_EPOCH` when set).
pub const BUILD_DATE: &str = env!("KPROXY_BUILD_DATE");

/// What `kproxy --version` prints after the name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KPROXY_GIT_COMMIT"),
    ", built ",
    env!("KPROXY_BUILD_DATE"),
    ")"
);

/// Prints the version, as text or JSON.
pub fn version(args: &VersionArgs) -> anyhow::Result<ExitCode> {
    let text = match args.output {
        VersionOutput::Text => format!("kproxy {VERSION}\ngit commit: {GIT_COMMIT}\nbuild date: {BUILD_DATE}\n"),
        VersionOutput::Json => {
            let json = serde_json::json!({ "version": VERSION, "gitCommit": GIT_COMMIT, "buildDate": BUILD_DATE });
            format!("{json}\n")
        }
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes to stdout; a closed pipe is not an error worth a panic.
fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
