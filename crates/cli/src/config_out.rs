//! `kproxy run --write-config-to FILE`: the effective configuration as a
//! `KubeProxyConfiguration` file, as kube-proxy's flag of the same name
//! writes it, then exit 0.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use kproxy_config::{Flags, Loaded};
use tracing::{info, warn};

/// Writes `loaded`'s document to `path` (JSON for a `.json` name, else
/// YAML). Flags the document has no field for are named, as they will not
/// be in effect when the file is read back without them.
pub fn write(path: &Path, loaded: &Loaded, flags: &Flags) -> anyhow::Result<ExitCode> {
    let json = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let text = if json { kproxy_config::to_json(&loaded.document) } else { kproxy_config::to_yaml(&loaded.document) };
    std::fs::write(path, text).with_context(|| format!("--write-config-to {}: cannot write", path.display()))?;
    for flag in kproxy_config::not_in_document(flags) {
        warn!(flag, "a KubeProxyConfiguration has no field for this flag; pass it again with --config");
    }
    info!(file = %path.display(), "wrote configuration");
    Ok(ExitCode::SUCCESS)
}
