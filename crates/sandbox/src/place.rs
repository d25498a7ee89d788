//! Where a probe's or a backend's sockets are made: a network namespace,
//! and optionally a test [`Cgroup`] whose BPF programs then see them.

use crate::{Cgroup, Netns, SandboxError};

/// A namespace, optionally with a cgroup: a thread entering it joins both.
///
/// A `&Netns` converts into a `Place` without a cgroup, so every function
/// taking `impl Into<Place>` still takes a plain namespace.
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    netns: &'a Netns,
    cgroup: Option<&'a Cgroup>,
}

impl<'a> Place<'a> {
    /// `netns`, and `cgroup` if given.
    pub fn new(netns: &'a Netns, cgroup: Option<&'a Cgroup>) -> Place<'a> {
        Place { netns, cgroup }
    }

    /// The namespace.
    pub fn netns(&self) -> &'a Netns {
        self.netns
    }

    /// The cgroup, if any.
    pub fn cgroup(&self) -> Option<&'a Cgroup> {
        self.cgroup
    }

    /// Runs `f` on a fresh thread that joined the namespace (and the cgroup, if any).
    pub fn try_enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, SandboxError> {
        match self.cgroup {
            Some(cgroup) => self.netns.try_enter_in(cgroup, f),
            None => self.netns.try_enter(f),
        }
    }
}

impl<'a> From<&'a Netns> for Place<'a> {
    fn from(netns: &'a Netns) -> Place<'a> {
        Place { netns, cgroup: None }
    }
}
