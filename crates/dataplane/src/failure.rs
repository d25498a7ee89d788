//! Why a sync failed, in the terms the log and the metrics need: a short
//! reason that keeps metric labels few (the kernel's errno name such as
//! `EPERM`, or the step: `timeout`, `exit-status`), the object or rule the
//! kernel refused, the families it concerned, and the whole error chain.

use std::error::Error;

use kproxy_admin::metrics::FailedStep;
use kproxy_iptables_exec::IptablesError;
use kproxy_model::IpFamily;
use kproxy_netlink::nft::ApplyError;

use crate::ipvs::IpvsError;
use crate::nftables::NftablesError;

/// A failed sync, explained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureCause {
    /// Few words, for a metric label.
    pub reason: String,
    pub step: FailedStep,
    /// What the kernel (or the tool) refused, when it said.
    pub object: Option<String>,
    /// The families the failed step programmed.
    pub families: Vec<IpFamily>,
    /// The error and each of its sources, joined by ": ".
    pub text: String,
}

/// iptables mode: a restore of one family failed.
#[derive(Debug, thiserror::Error)]
#[error("{family} restore failed")]
pub struct RestoreFailed {
    pub family: IpFamily,
    #[source]
    pub source: IptablesError,
}

/// Explains `error`, whichever mode returned it.
pub fn cause_of(error: &(dyn Error + 'static)) -> FailureCause {
    let text = chain(error);
    let errno = errno_in(error);
    let mut cause = FailureCause {
        reason: errno.map_or_else(|| "other".to_owned(), errno_name),
        step: FailedStep::Other,
        object: None,
        families: IpFamily::ALL.to_vec(),
        text,
    };
    if let Some(e) = error.downcast_ref::<NftablesError>() {
        cause.step = FailedStep::Transaction;
        nftables(e, &mut cause);
    } else if let Some(e) = error.downcast_ref::<RestoreFailed>() {
        cause.step = FailedStep::Restore;
        cause.families = vec![e.family];
        restore(&e.source, &mut cause);
    } else if let Some(e) = error.downcast_ref::<IpvsError>() {
        match e {
            IpvsError::Companion(inner) => {
                // The companion table plays upstream's iptables part.
                cause.step = FailedStep::Restore;
                nftables(inner, &mut cause);
            }
            IpvsError::Refused { first, errno, .. } => {
                cause.object = Some(first.clone());
                cause.reason = errno.map_or_else(|| "refused".to_owned(), errno_name);
            }
            IpvsError::Client(_) | IpvsError::Interface(_) => {}
        }
    }
    cause
}

fn nftables(error: &NftablesError, cause: &mut FailureCause) {
    match error {
        NftablesError::Refused { op, errno, family, .. } => {
            cause.reason = errno_name(*errno);
            cause.object = Some(op.clone());
            if let Some(family) = family {
                cause.families = vec![*family];
            }
        }
        NftablesError::Apply(ApplyError::Decode(_)) => cause.reason = "malformed-answer".into(),
        _ => {}
    }
}

fn restore(error: &IptablesError, cause: &mut FailureCause) {
    match error {
        IptablesError::Refused { offending, line, .. } => {
            cause.reason = "refused".into();
            cause.object = offending.clone().or_else(|| line.map(|l| format!("payload line {l}")));
        }
        IptablesError::Timeout { .. } => cause.reason = "timeout".into(),
        IptablesError::Failed { .. } => cause.reason = "exit-status".into(),
        IptablesError::MissingTool { tool } => {
            cause.reason = "missing-tool".into();
            cause.object = Some(tool.clone());
        }
        _ => {}
    }
}

/// The first errno in the chain: an `io::Error`'s, or a netlink refusal's.
fn errno_in(error: &(dyn Error + 'static)) -> Option<i32> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(errno) = io.raw_os_error()
        {
            return Some(errno);
        }
        if let Some(kernel) = e.downcast_ref::<kproxy_netlink::ipvs::ClientError>()
            && let Some(errno) = kernel.errno()
        {
            return Some(errno as i32);
        }
        next = e.source();
    }
    None
}

/// `EPERM` for 1: the C name, as `errno(1)` lists it.
pub fn errno_name(errno: i32) -> String {
    match nix::errno::Errno::from_raw(errno) {
        nix::errno::Errno::UnknownErrno => format!("errno-{errno}"),
        known => format!("{known:?}"),
    }
}

/// `error` and its sources, joined by ": " (anyhow's `{:#}`).
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(e) = next {
        let more = e.to_string();
        // Some errors repeat their source in their message.
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_nftables_op_gives_its_errno_name_and_the_op() {
        let error: Box<dyn Error + Send + Sync> = Box::new(NftablesError::Refused {
            op: "add table ip kproxy".into(),
            errno: 1,
            family: Some(IpFamily::V4),
            reason: "Operation not permitted (os error 1)".into(),
        });
        let cause = cause_of(error.as_ref());
        assert_eq!(cause.reason, "EPERM");
        assert_eq!(cause.step, FailedStep::Transaction);
        assert_eq!(cause.object.as_deref(), Some("add table ip kproxy"));
        assert_eq!(cause.families, [IpFamily::V4]);
    }

    #[test]
    fn a_send_failure_keeps_the_errno_of_its_source() {
        let source = std::io::Error::from_raw_os_error(nix::libc::EMSGSIZE);
        let error: Box<dyn Error + Send + Sync> =
            Box::new(NftablesError::Apply(ApplyError::Send { bytes: 10, source }));
        let cause = cause_of(error.as_ref());
        assert_eq!(cause.reason, "EMSGSIZE");
        assert_eq!(cause.families, IpFamily::ALL);
        assert!(
            cause.text.starts_with("applying the transaction failed: sending the transaction (10 bytes) failed: "),
            "{}",
            cause.text
        );
        assert!(cause.text.contains("Message too long"), "{}", cause.text);
    }

    #[test]
    fn a_refused_restore_names_the_line_and_counts_as_a_restore_of_its_family() {
        use std::os::unix::process::ExitStatusExt;
        let source = IptablesError::Refused {
            command: "ip6tables-nft-restore --noflush".into(),
            status: std::process::ExitStatus::from_raw(256),
            stderr: "ip6tables-restore: line 7 failed".into(),
            line: Some(7),
            offending: Some("-A KUBE-SVC-X -j KUBE-SEP-Y".into()),
        };
        let error: Box<dyn Error + Send + Sync> = Box::new(RestoreFailed { family: IpFamily::V6, source });
        let cause = cause_of(error.as_ref());
        assert_eq!((cause.reason.as_str(), cause.step), ("refused", FailedStep::Restore));
        assert_eq!(cause.object.as_deref(), Some("-A KUBE-SVC-X -j KUBE-SEP-Y"));
        assert_eq!(cause.families, [IpFamily::V6]);
        assert!(
            cause.text.starts_with("IPv6 restore failed: `ip6tables-nft-restore --noflush` refused"),
            "{}",
            cause.text
        );
    }

    #[test]
    fn ipvs_companion_table_failures_keep_the_kernels_errno() {
        let inner = NftablesError::Refused {
            op: "add chain ip kproxy-ipvs x".into(),
            errno: nix::libc::EEXIST,
            family: None,
            reason: "File exists (os error 17)".into(),
        };
        let error: Box<dyn Error + Send + Sync> = Box::new(IpvsError::Companion(inner));
        let cause = cause_of(error.as_ref());
        assert_eq!((cause.reason.as_str(), cause.step), ("EEXIST", FailedStep::Restore));
        assert!(
            cause.text.contains("companion table kproxy-ipvs: the kernel refused the transaction at `add chain"),
            "{}",
            cause.text
        );
        let error: Box<dyn Error + Send + Sync> = Box::new(IpvsError::Refused {
            count: 1,
            total: 3,
            first: "add service 10.96.0.1:80".into(),
            errno: Some(nix::libc::EINVAL),
        });
        assert_eq!(cause_of(error.as_ref()).reason, "EINVAL");
    }

    #[test]
    fn an_unknown_error_is_other() {
        let error: Box<dyn Error + Send + Sync> = "the event source stopped".into();
        let cause = cause_of(error.as_ref());
        assert_eq!((cause.reason.as_str(), cause.step), ("other", FailedStep::Other));
        assert_eq!(errno_name(4095), "errno-4095");
    }
}
