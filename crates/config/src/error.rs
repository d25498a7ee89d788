//! The one error type of this crate.
//!
//! Every variant renders as a single line that starts with where the problem
//! is: a JSON field path (`iptables.masqueradeBit`, `nodePortAddresses[1]`),
//! a flag (`--proxy-mode`), or a line and column for syntax errors. The
//! binary maps every variant to the same usage exit code.

/// Why a configuration file or a flag was rejected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not well-formed YAML (or JSON), e.g. bad indentation or a
    /// duplicate key.
    #[error("syntax error at line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line of the problem.
        line: u64,
        /// 1-based column of the problem.
        column: u64,
        /// What the parser found, without the position.
        message: String,
    },

    /// A key that `KubeProxyConfiguration` does not have at that place.
    #[error("{path}: unknown field (allowed: {})", .allowed.join(", "))]
    UnknownField {
        /// JSON path of the unknown key, e.g. `iptables.masqueradeBitt`.
        path: String,
        /// The field names allowed beside it, in upstream's order.
        allowed: Vec<&'static str>,
    },

    /// A value of the wrong JSON type, e.g. a number where a duration string
    /// or a mapping belongs, or a duration string that does not parse.
    #[error("{path}: {message}")]
    Decode {
        /// JSON path of the value, e.g. `iptables.syncPeriod`.
        path: String,
        /// What was found and what was expected.
        message: String,
    },

    /// A value of the right type that is not allowed: out of range, not one
    /// of the supported values, or inconsistent with another field.
    #[error("{name}: {reason} (allowed: {allowed})")]
    InvalidValue {
        /// JSON path of the field, or the flag when it came from a flag.
        name: String,
        /// The bad value and what is wrong with it.
        reason: String,
        /// The allowed values or range.
        allowed: String,
    },
}

impl ConfigError {
    /// An [`ConfigError::InvalidValue`] from anything printable.
    pub(crate) fn invalid(name: impl Into<String>, reason: impl Into<String>, allowed: impl Into<String>) -> Self {
        ConfigError::InvalidValue { name: name.into(), reason: reason.into(), allowed: allowed.into() }
    }
}
