//! How a service port picks an endpoint for a new connection.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// The schedulers kproxy knows, named as IPVS names them. Which ones a
/// mode supports is the mode's business ([`crate::ModeSupport`]); a Service
/// asking for one its mode cannot do gets the mode's default, with an
/// [`crate::AnnotationWarning`] saying so.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    Random,
    /// Round robin.
    Rr,
    /// Weighted round robin.
    Wrr,
    /// Least connections.
    Lc,
    /// Weighted least connections.
    Wlc,
    /// Shortest expected delay.
    Sed,
    /// Never queue.
    Nq,
    /// Source hashing.
    Sh,
    /// Destination hashing.
    Dh,
    /// Maglev hashing.
    Mh,
    /// Weighted failover.
    Fo,
    /// Weighted overflow.
    Ovf,
    /// Locality-based least connections.
    Lblc,
    /// Locality-based least connections with replication.
    Lblcr,
    /// Power of two choices.
    Twos,
}

impl Scheduler {
    pub const ALL: [Scheduler; 15] = [
        Scheduler::Random,
        Scheduler::Rr,
        Scheduler::Wrr,
        Scheduler::Lc,
        Scheduler::Wlc,
        Scheduler::Sed,
        Scheduler::Nq,
        Scheduler::Sh,
        Scheduler::Dh,
        Scheduler::Mh,
        Scheduler::Fo,
        Scheduler::Ovf,
        Scheduler::Lblc,
        Scheduler::Lblcr,
        Scheduler::Twos,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scheduler::Random => "random",
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
            Scheduler::Lc => "lc",
            Scheduler::Wlc => "wlc",
            Scheduler::Sed => "sed",
            Scheduler::Nq => "nq",
            Scheduler::Sh => "sh",
            Scheduler::Dh => "dh",
            Scheduler::Mh => "mh",
            Scheduler::Fo => "fo",
            Scheduler::Ovf => "ovf",
            Scheduler::Lblc => "lblc",
            Scheduler::Lblcr => "lblcr",
            Scheduler::Twos => "twos",
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scheduler {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheduler::ALL.into_iter().find(|x| x.as_str() == s).ok_or(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheduler_parses_from_its_own_name() {
        for s in Scheduler::ALL {
            assert_eq!(s.as_str().parse::<Scheduler>(), Ok(s));
        }
        assert_eq!("RR".parse::<Scheduler>(), Err(()));
    }
}
