//! kube-proxy's configuration, read the way upstream reads it.
//!
//! This crate owns `KubeProxyConfiguration` v1alpha1 (the file kubeadm puts
//! in the kube-proxy ConfigMap), kube-proxy's configuration flags, upstream's
//! defaults and validation, and the resolved [`Config`] the rest of kproxy
//! reads. It is pure: the caller reads the file and parses the command line,
//! and passes the text and the [`Flags`] to [`load`].
//!
//! Differences from upstream, all deliberate:
//! - A flag that is given overrides the file (upstream ignores most flags
//!   once `--config` is given).
//! - `userspace` is an extra mode; `kernelspace` (Windows) is rejected.
//! - Errors name the JSON path (`iptables.masqueradeBit`) or the flag, and
//!   the first error found is reported.
//! - A known setting kproxy does not act on, or that the running mode does
//!   not use, is a [`Warning`] naming the mode, not silence (the table of
//!   [`settings`], also printed in `docs/configuration.md`).

mod addr;
mod config;
mod defaults;
mod document;
mod duration;
mod effective;
mod error;
mod flags;
mod overlay;
mod resolve;
mod support;
pub mod wire;

use std::fmt;

pub use config::{
    ClientConnection, Config, Conntrack, DetectLocalMode, EBPF_PIN_DIR, Ebpf, IptablesBackend, Ipvs, LogFormat,
    Logging, NodePortAddresses, ProxyMode,
};
pub use duration::{GoDuration, ParseDurationError};
pub use effective::{GROUP_NAME, configz, not_in_document, to_json, to_yaml};
pub use error::ConfigError;
pub use flags::Flags;
pub use support::{MODES, Setting, Support, markdown as support_markdown, settings};

/// A known setting that was given but has no effect in kproxy, or in the
/// running mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// JSON path (`conntrack.maxPerCore`) or flag (`--conntrack-min`).
    pub name: String,
    /// Why it has no effect: "...; ignored", or "no effect in ipvs mode
    /// (used by ...)".
    pub reason: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.reason)
    }
}

/// The outcome of [`load`].
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    /// The resolved configuration.
    pub config: Config,
    /// Settings that were given but are not acted on (in the configured
    /// mode, or the default mode of [`load_with`]); the caller logs them.
    pub warnings: Vec<Warning>,
    /// The same configuration as a `KubeProxyConfiguration` document, every
    /// field with the value in effect (see [`to_yaml`] and [`configz`]).
    pub document: wire::KubeProxyConfiguration,
}

/// Reads the configuration: the file's text (YAML or JSON) if there is
/// one, upstream's defaults, then the given flags on top, validated. With
/// no mode configured, only the settings no mode acts on are warned about.
pub fn load(file: Option<&str>, flags: &Flags) -> Result<Loaded, ConfigError> {
    load_with(file, flags, None)
}

/// [`load`], reading an unset `mode` as `default_mode` (the mode the binary
/// runs then): that mode's section and flags apply and its warnings are
/// given, while [`Config::mode`] stays `None`.
pub fn load_with(file: Option<&str>, flags: &Flags, default_mode: Option<ProxyMode>) -> Result<Loaded, ConfigError> {
    let (mut wire, present) = match file {
        Some(text) => {
            let doc = document::parse(text)?;
            (doc.config, doc.present)
        }
        None => (wire::KubeProxyConfiguration::default(), Vec::new()),
    };
    defaults::apply(&mut wire);
    wire::API_VERSION.clone_into(&mut wire.api_version);
    wire::KIND.clone_into(&mut wire.kind);
    let overlay = overlay::apply(flags, &mut wire, file.is_some(), default_mode)?;
    let mut config = resolve::resolve(&wire, &overlay)?;
    let warnings = support::warnings(&present, &flags.given(), config.mode);
    if overlay.default_mode {
        // The document says what was configured: an unset mode stays unset.
        config.mode = None;
        wire.mode.clear();
    }
    Ok(Loaded { config, warnings, document: wire })
}
