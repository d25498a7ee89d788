//! The nftables dataplane: plans with `kproxy-nftables`, applies each plan
//! as one nf_tables transaction over netlink (`kproxy-netlink`), then
//! deletes stale UDP conntrack entries over ctnetlink. A full plan's
//! elements are encoded as the planner makes them (`plan_streamed` into a
//! `Streamer`): no list of every element is held, and the batch grows in
//! chunks, sent whole in one `sendmsg`.
//!
//! What was applied is kept in memory; the kernel is never read back. A
//! failed transaction leaves the kernel as it was (transactions are
//! atomic) and forgets what was applied, so the next sync rebuilds the
//! tables. The `nft` tool is not needed at runtime; [`nft`] remains for
//! tests, benchmarks and debugging.

use std::collections::BTreeSet;
use std::process::Stdio;

use kproxy_model::IpFamily;
use kproxy_netlink::nft::{self as netlink, ApplyError, IntervalSets};
use kproxy_nftables::{Applied, FamilyPlan, Op, Plan, PlanConfig, names, plan_streamed, render};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::conntrack::flush_stale_udp;
use crate::dataplane::{Dataplane, DataplaneError, SyncFuture, SyncKind, SyncReport, SyncRequest};

/// What can go wrong talking to the kernel.
#[derive(Debug, thiserror::Error)]
pub enum NftablesError {
    /// The kernel refused the transaction; nothing was changed.
    #[error("the kernel refused the transaction at `{op}`: {reason}")]
    Refused {
        /// The first op refused, as nft syntax.
        op: String,
        /// The kernel's errno for it (positive).
        errno: i32,
        /// The family of that op, when it is one of the plan's.
        family: Option<IpFamily>,
        /// The errno's text and the kernel's extended message.
        reason: String,
    },
    /// The transaction could not be sent, or its outcome read.
    #[error("applying the transaction failed")]
    Apply(#[source] ApplyError),
    /// The `nft` tool could not be started.
    #[error("cannot run nft (install the nftables package)")]
    Spawn(#[source] std::io::Error),
    /// `nft` rejected the transaction; nothing was changed.
    #[error("nft rejected the transaction: {stderr}")]
    Rejected { stderr: String },
    #[error("writing the transaction to nft failed")]
    Write(#[source] std::io::Error),
}

/// The nftables mode.
pub struct Nftables {
    config: PlanConfig,
    applied: Option<Applied>,
    /// The interval sets in the tables, as of the last successful sync.
    interval_sets: IntervalSets,
    /// Sequence number of the next batch's first message.
    seq: u32,
    /// Skips already reported, so a persistent one is reported once.
    reported: BTreeSet<String>,
}

impl Nftables {
    pub fn new(config: PlanConfig) -> Self {
        // Distinct from any earlier process's numbers, for readable traces.
        let seq =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as u32).unwrap_or(1);
        Self { config, applied: None, interval_sets: IntervalSets::default(), seq, reported: BTreeSet::new() }
    }

    async fn sync_inner(&mut self, request: SyncRequest<'_>) -> Result<SyncReport, DataplaneError> {
        let full = request.kind == SyncKind::Full;
        let mut streamer = netlink::Streamer::default();
        let planned =
            plan_streamed(request.state, request.changes, full, &self.config, self.applied.take(), &mut streamer);
        let (mut messages, mut bytes) = (0, 0);
        if !planned.plan.is_empty() {
            // After a failure the plan starts by deleting the tables, and
            // with them what is known of their sets.
            let batch = netlink::encode_streamed(&planned.plan, self.seq, &self.interval_sets, streamer);
            self.seq = batch.next_seq().wrapping_add(1);
            (messages, bytes) = (batch.origins.len(), batch.len());
            let result = tokio::task::spawn_blocking(move || netlink::apply_batch(&batch))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            if let Err(e) = result {
                self.applied = None;
                return Err(refused(&planned.plan, e).into());
            }
            self.interval_sets.applied(&planned.plan);
        }
        let elements = planned.applied.element_count(IpFamily::V4) + planned.applied.element_count(IpFamily::V6);
        self.applied = Some(planned.applied);
        let full = planned.plan.full;
        drop(planned.plan);
        if full {
            release_freed_memory();
        }
        let conntrack_runs = flush_stale_udp(request.changes).await;
        let conntrack = crate::conntrack::deleted(&conntrack_runs);

        let current: BTreeSet<String> = planned.skips.into_iter().collect();
        let skipped: Vec<String> = current.difference(&self.reported).cloned().collect();
        if full {
            self.reported = current;
        } else {
            self.reported.extend(skipped.iter().cloned());
        }
        let kind = if full { "full" } else { "partial" };
        let summary = format!(
            "{kind}: {messages} messages ({bytes} bytes), {elements} elements in the tables, {conntrack} conntrack entries deleted"
        );
        Ok(SyncReport { summary, skipped, conntrack: conntrack_runs, ..SyncReport::default() })
    }
}

impl Dataplane for Nftables {
    fn mode(&self) -> &'static str {
        "nftables"
    }

    fn sync<'a>(&'a mut self, request: SyncRequest<'a>) -> SyncFuture<'a> {
        Box::pin(self.sync_inner(request))
    }
}

/// Hands memory freed after a full sync back to the system. A full plan
/// at 10k services allocates hundreds of MiB for a moment; glibc keeps
/// freed memory for reuse unless asked, so without this the process would
/// stay at its peak for its whole life.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The error for a refused plan, naming the first op the kernel refused.
pub(crate) fn refused(plan: &Plan, error: ApplyError) -> NftablesError {
    let ApplyError::Rejected(errors) = &error else { return NftablesError::Apply(error) };
    let Some(first) = errors.first() else { return NftablesError::Apply(error) };
    let origin = first.origin.and_then(|(f, o)| {
        let family_plan: &FamilyPlan = plan.families.get(f)?;
        let family = family_plan.family?;
        Some((family, describe(family, family_plan.ops.get(o)?)))
    });
    let family = origin.as_ref().map(|(family, _)| *family);
    let op = origin.map_or_else(|| "the transaction itself".to_owned(), |(_, op)| op);
    let mut reason = first.reason();
    if errors.len() > 1 {
        reason.push_str(&format!(" (and {} more errors)", errors.len() - 1));
    }
    NftablesError::Refused { op, errno: first.errno, family, reason }
}

/// An op as nft syntax, shortened to its first line.
fn describe(family: IpFamily, op: &Op) -> String {
    if let Op::AddElements { set, elements } = op
        && elements.is_empty()
    {
        // A full plan's elements went to the batch, not into the op.
        let word = match family {
            IpFamily::V4 => "ip",
            IpFamily::V6 => "ip6",
        };
        return format!("add element {word} {} {set} {{ the planned elements }}", names::TABLE);
    }
    let text = render::op(family, op);
    let first = text.lines().next().unwrap_or_default();
    const MAX: usize = 300;
    match first.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{} ...", &first[..cut]),
        None => first.to_owned(),
    }
}

/// Runs one `nft -f -` transaction (for tests, benchmarks and debugging).
pub async fn nft(script: &str) -> Result<(), NftablesError> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(NftablesError::Spawn)?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    stdin.write_all(script.as_bytes()).await.map_err(NftablesError::Write)?;
    drop(stdin);
    let output = child.wait_with_output().await.map_err(NftablesError::Spawn)?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // nft echoes the whole offending line; the first lines say enough.
        let stderr: Vec<&str> = stderr.lines().take(6).collect();
        Err(NftablesError::Rejected { stderr: stderr.join(" | ") })
    }
}

/// Removes kproxy's tables, and nothing else. Missing tables are fine.
pub async fn cleanup() -> Result<(), NftablesError> {
    let ops = vec![Op::AddTable, Op::DeleteTable];
    let families = IpFamily::ALL.map(|f| FamilyPlan { family: Some(f), ops: ops.clone() }).to_vec();
    let plan = Plan { full: true, families };
    let encoded = netlink::encode(&plan, 1, &IntervalSets::default());
    let result = tokio::task::spawn_blocking(move || netlink::apply(&encoded))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
    result.map_err(|e| refused(&plan, e))
}

#[cfg(test)]
mod tests {
    use kproxy_netlink::nft::KernelError;

    use super::*;

    fn refusal(origin: (usize, usize)) -> ApplyError {
        ApplyError::Rejected(vec![KernelError { errno: libc::ENOENT, message: None, origin: Some(origin) }])
    }

    #[test]
    fn a_refused_element_message_of_a_streamed_plan_is_named_by_its_set() {
        let ops = vec![Op::AddTable, Op::AddElements { set: "service-ips".into(), elements: Vec::new() }];
        let plan = Plan { full: true, families: vec![FamilyPlan { family: Some(IpFamily::V6), ops }] };
        let NftablesError::Refused { op, family, .. } = refused(&plan, refusal((0, 1))) else {
            panic!("not a refusal")
        };
        assert_eq!(op, "add element ip6 kproxy service-ips { the planned elements }");
        assert_eq!(family, Some(IpFamily::V6));
        let NftablesError::Refused { op, .. } = refused(&plan, refusal((0, 0))) else { panic!("not a refusal") };
        assert!(op.starts_with("add table ip6 kproxy"), "{op}");
    }
}
