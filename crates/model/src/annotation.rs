//! kproxy's own Service annotations (`kproxy.io/*`) that a Service may get
//! wrong or a mode may not do, and what a mode can do of them.
//!
//! A bad or unsupported annotation never takes a Service down: the Service
//! is served with that annotation's default and carries an
//! [`AnnotationWarning`] saying what was asked, why it is not honoured and
//! what is done instead. The state computes the warnings from a
//! [`ModeSupport`] (given as a value: this crate knows no mode).

use std::fmt;

use serde::Serialize;

use crate::Scheduler;

/// One of kproxy's annotations; a health check's settings
/// (`kproxy.io/health-check-*`) count as [`Annotation::HealthCheck`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Annotation {
    #[default]
    Scheduler,
    Weights,
    HealthCheck,
}

impl Annotation {
    /// The annotation's key (for a health check, the main one).
    pub fn as_str(self) -> &'static str {
        match self {
            Annotation::Scheduler => "kproxy.io/scheduler",
            Annotation::Weights => "kproxy.io/weights",
            Annotation::HealthCheck => "kproxy.io/health-check",
        }
    }
}

impl fmt::Display for Annotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an annotation is not honoured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Problem {
    /// The value does not parse or is out of range.
    Invalid,
    /// A valid value the running mode cannot do.
    Unsupported,
}

impl Problem {
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Invalid => "invalid",
            Problem::Unsupported => "unsupported",
        }
    }
}

/// An annotation of a Service that kproxy does not honour, and the default
/// it uses instead.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationWarning {
    /// The annotation as written (`kproxy.io/health-check-interval`).
    pub annotation: String,
    /// Which of kproxy's annotations it is (the metric's label).
    #[serde(skip)]
    pub kind: Annotation,
    pub problem: Problem,
    /// Why, e.g. `scheduler lc is not supported in nftables mode (...)`.
    pub reason: String,
    /// What is done instead, e.g. `using random`.
    pub fallback: String,
}

impl fmt::Display for AnnotationWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; {}", self.annotation, self.reason, self.fallback)
    }
}

/// How a mode honours `kproxy.io/weights`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightSupport {
    /// Every weight, as given.
    Full,
    /// Each endpoint list becomes pick slots, as many per endpoint as its
    /// weight divided by the weights' greatest common divisor; a list
    /// needing more than `max` slots is not weighted. Maglev (`mh`) hashes
    /// into a table of fixed size and is not limited.
    Slots { max: usize },
    /// Not at all: every endpoint is equally likely.
    Ignored,
}

/// What the running mode can do of kproxy's annotations. The default
/// (a dry run, tests) does everything, with `random` as the default
/// scheduler.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModeSupport {
    /// The mode's name as `--proxy-mode` spells it, for messages.
    pub mode: &'static str,
    /// The scheduler of a Service that names none, names an unknown one or
    /// one this mode cannot do.
    pub default_scheduler: Scheduler,
    /// The schedulers this mode can do.
    pub schedulers: Vec<Scheduler>,
    pub weights: WeightSupport,
    /// Whether the mode runs `kproxy.io/health-check`s.
    pub health_checks: bool,
}

impl Default for ModeSupport {
    fn default() -> Self {
        Self {
            mode: "any",
            default_scheduler: Scheduler::Random,
            schedulers: Scheduler::ALL.to_vec(),
            weights: WeightSupport::Full,
            health_checks: true,
        }
    }
}

impl ModeSupport {
    pub fn supports(&self, scheduler: Scheduler) -> bool {
        self.schedulers.contains(&scheduler)
    }

    /// The supported schedulers, comma separated.
    pub fn scheduler_list(&self) -> String {
        self.schedulers.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_reads_as_annotation_reason_and_fallback() {
        let w = AnnotationWarning {
            annotation: "kproxy.io/scheduler".into(),
            kind: Annotation::Scheduler,
            problem: Problem::Unsupported,
            reason: "scheduler lc is not supported in nftables mode".into(),
            fallback: "using random".into(),
        };
        assert_eq!(w.to_string(), "kproxy.io/scheduler: scheduler lc is not supported in nftables mode; using random");
        let json = serde_json::to_string(&w).expect("serialises");
        assert_eq!(
            json,
            r#"{"annotation":"kproxy.io/scheduler","problem":"unsupported","reason":"scheduler lc is not supported in nftables mode","fallback":"using random"}"#
        );
    }
}
