//! Deciding which backend this network namespace uses, as upstream's
//! `iptables-wrapper` (kubernetes-sigs/iptables-wrappers) decides for
//! kube-proxy's image:
//!
//! 1. a configured backend wins (its tools must be installed);
//! 2. if only one backend's tools are installed, that one;
//! 3. kubelet 1.17+ declares `KUBE-IPTABLES-HINT` (and older ones
//!    `KUBE-KUBELET-CANARY`) in the mangle table of the backend it uses:
//!    checked in nft first, then in legacy;
//! 4. otherwise the backend holding more rules, IPv4 and IPv6 together
//!    (the wrapper's fallback before the hint existed);
//! 5. otherwise nft, unless its tools cannot even list rules while the
//!    legacy ones can.
//!
//! Detection only reads: the legacy dumps name no table, since asking the
//! legacy tools for one the kernel lacks makes the kernel create it.

use std::ffi::OsStr;
use std::time::Duration;

use kproxy_model::IpFamily;

use crate::command;
use crate::restore::Outline;
use crate::save::has_kubelet_hint;
use crate::{Backend, BackendChoice, Iptables, IptablesError, Table};

/// Each dump during detection is bounded on its own: some iptables-nft
/// versions (1.8.0-1.8.3) could loop forever on rules they did not write.
const DUMP_TIMEOUT: Duration = Duration::from_secs(5);

/// The backend chosen and why, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detection {
    pub backend: Backend,
    pub reason: Reason,
}

/// Why [`detect`] chose its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The configuration named it.
    Configured,
    /// The other backend's tools are not installed.
    OnlyInstalled,
    /// Kubelet's hint chain is in this backend.
    KubeletHint,
    /// This backend holds more rules (counts of both backends, both families).
    MoreRules { legacy: usize, nft: usize },
    /// Neither holds rules (or both as many); nft is the default.
    Default,
    /// The nft tools fail to list rules and the legacy ones do not.
    NftUnusable,
}

/// Picks the backend for this network namespace (see the module docs).
///
/// Fails with [`IptablesError::MissingTool`] when the configured backend's
/// tools are missing and [`IptablesError::NoBackend`] when neither
/// backend's are installed. Dumps that fail count as empty.
pub async fn detect(choice: BackendChoice) -> Result<Detection, IptablesError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    detect_on(choice, &path).await
}

/// [`detect`] with the tools looked up in `path` (a `PATH` value).
async fn detect_on(choice: BackendChoice, path: &OsStr) -> Result<Detection, IptablesError> {
    if let BackendChoice::Fixed(backend) = choice {
        if let Some(tool) = first_missing(backend, path) {
            return Err(IptablesError::MissingTool { tool });
        }
        return Ok(Detection { backend, reason: Reason::Configured });
    }
    match (first_missing(Backend::Legacy, path), first_missing(Backend::Nft, path)) {
        (Some(legacy), Some(nft)) => return Err(IptablesError::NoBackend { missing: format!("{legacy} and {nft}") }),
        (Some(_), None) => return Ok(Detection { backend: Backend::Nft, reason: Reason::OnlyInstalled }),
        (None, Some(_)) => return Ok(Detection { backend: Backend::Legacy, reason: Reason::OnlyInstalled }),
        (None, None) => {}
    }
    let nft_mangle = dumps(Backend::Nft, Some(Table::Mangle)).await;
    if nft_mangle.iter().flatten().any(|d| has_kubelet_hint(&d.text)) {
        return Ok(Detection { backend: Backend::Nft, reason: Reason::KubeletHint });
    }
    let legacy = dumps(Backend::Legacy, None).await;
    if legacy.iter().flatten().any(|d| has_kubelet_hint(&d.text)) {
        return Ok(Detection { backend: Backend::Legacy, reason: Reason::KubeletHint });
    }
    let nft = dumps(Backend::Nft, None).await;
    let count = |dumps: &[Option<Outline>]| dumps.iter().flatten().map(|d| d.rules).sum::<usize>();
    let (legacy_rules, nft_rules) = (count(&legacy), count(&nft));
    let detection = if legacy_rules != nft_rules {
        let backend = if legacy_rules > nft_rules { Backend::Legacy } else { Backend::Nft };
        Detection { backend, reason: Reason::MoreRules { legacy: legacy_rules, nft: nft_rules } }
    } else if nft[0].is_none() && legacy[0].is_some() {
        Detection { backend: Backend::Legacy, reason: Reason::NftUnusable }
    } else {
        Detection { backend: Backend::Nft, reason: Reason::Default }
    };
    Ok(detection)
}

/// Whether every tool of `backend` is on `PATH`.
pub fn installed(backend: Backend) -> bool {
    first_missing(backend, &std::env::var_os("PATH").unwrap_or_default()).is_none()
}

/// The first of `backend`'s tools that is not in `path`.
fn first_missing(backend: Backend, path: &OsStr) -> Option<String> {
    backend.tools().into_iter().find(|tool| !command::installed(tool, path))
}

/// `backend`'s dumps of IPv4 then IPv6, as outlines; `None` for a dump
/// that failed.
async fn dumps(backend: Backend, table: Option<Table>) -> [Option<Outline>; 2] {
    let tools = Iptables::new(backend).with_timeout(DUMP_TIMEOUT);
    let mut dumps = [None, None];
    for (slot, family) in dumps.iter_mut().zip(IpFamily::ALL) {
        match tools.save_outline(family, table).await {
            Ok(dump) => *slot = Some(dump),
            Err(error) => {
                tracing::debug!(backend = %backend, ?family, error = %error, "iptables dump failed during detection");
            }
        }
    }
    dumps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect_without_tools(choice: BackendChoice) -> Result<Detection, IptablesError> {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        // A directory that holds no tools at all.
        runtime.block_on(detect_on(choice, OsStr::new("/nonexistent/kproxy-no-tools")))
    }

    #[test]
    fn without_either_backend_the_error_names_a_tool_of_each() {
        let error = detect_without_tools(BackendChoice::Auto).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no iptables backend is installed: iptables-legacy and iptables-nft not found on PATH \
             (the Debian package is `iptables`)"
        );
    }

    #[test]
    fn a_configured_backend_without_its_tools_is_an_error_naming_the_tool() {
        let error = detect_without_tools(BackendChoice::Fixed(Backend::Legacy)).unwrap_err();
        assert_eq!(error.to_string(), "`iptables-legacy` is not installed (not found on PATH)");
    }
}
