//! Applying an iptables-restore payload with `--noflush`, and dumping a
//! family's rules with `*-save`.
//!
//! `--noflush` leaves every chain the payload does not declare untouched;
//! a chain the payload declares (`:NAME - [0:0]`) is flushed and refilled.
//! Each table's section commits atomically.

use std::time::Duration;

use kproxy_model::IpFamily;

use crate::command::{self, Output};
use crate::save;
use crate::{Backend, IptablesError, Table};

/// How long one tool run may take before it is killed. A full payload of
/// 10,000 services takes seconds with the legacy backend.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// `-w`: how long a tool waits for the xtables lock another process holds.
pub const LOCK_WAIT_SECONDS: &str = "5";

/// The iptables tools of one backend, run in the calling thread's network namespace.
#[derive(Debug, Clone)]
pub struct Iptables {
    backend: Backend,
    timeout: Duration,
}

impl Iptables {
    /// Runs `backend`'s tools, each bounded by [`DEFAULT_TIMEOUT`].
    pub fn new(backend: Backend) -> Iptables {
        Iptables { backend, timeout: DEFAULT_TIMEOUT }
    }

    /// The same, with another time bound per tool run.
    pub fn with_timeout(self, timeout: Duration) -> Iptables {
        Iptables { timeout, ..self }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Feeds `payload` to `iptables-restore --noflush -w 5` (ip6tables-restore
    /// for IPv6).
    ///
    /// A refusal is [`IptablesError::Refused`] with the tool's stderr, the
    /// line number it names and that payload line; tables committed before
    /// the refused one stay applied.
    pub async fn restore(&self, family: IpFamily, payload: &str) -> Result<(), IptablesError> {
        let tool = self.backend.restore(family);
        let args = ["--noflush", "-w", LOCK_WAIT_SECONDS];
        let output = command::run(&tool, &args, Some(payload.as_bytes()), self.timeout).await?;
        if output.status.success() {
            tracing::debug!(tool = %tool, bytes = payload.len(), "restored");
            return Ok(());
        }
        Err(refused(output, payload))
    }

    /// [`Iptables::restore`] with the payload fed chunk by chunk as
    /// `chunks` yields them, never whole in memory: one restore, committed
    /// per table as with one string. On a refusal the blamed line is asked
    /// of `line` (1-based; regenerate the payload there). Returns the bytes
    /// written.
    pub async fn restore_streamed<I>(
        &self,
        family: IpFamily,
        chunks: I,
        line: impl FnOnce(usize) -> Option<String>,
    ) -> Result<usize, IptablesError>
    where
        I: Iterator<Item = String> + Send,
    {
        let tool = self.backend.restore(family);
        let args = ["--noflush", "-w", LOCK_WAIT_SECONDS];
        let (output, bytes) = command::run_streamed(&tool, &args, Some(chunks), |_| true, self.timeout).await?;
        if output.status.success() {
            tracing::debug!(tool = %tool, bytes, "restored");
            return Ok(bytes);
        }
        let blamed = blamed_line(&output.stderr);
        let offending = blamed.and_then(line);
        let stderr = output.stderr_head();
        Err(IptablesError::Refused { command: output.command, status: output.status, stderr, line: blamed, offending })
    }

    /// `iptables-save` of `family`, of one table or of every table the kernel has.
    ///
    /// With the legacy backend, naming a table that does not exist yet makes
    /// the kernel create it; pass `None` to only read.
    pub async fn save(&self, family: IpFamily, table: Option<Table>) -> Result<String, IptablesError> {
        let tool = self.backend.save(family);
        let args: &[&str] = match table {
            Some(table) => &["-t", table.as_str()],
            None => &[],
        };
        command::run(&tool, args, None, self.timeout).await?.success()
    }

    /// [`Iptables::save`] reduced to its outline: the table, chain and
    /// `COMMIT` lines, read line by line (a dump of 100,000 chains is tens
    /// of megabytes of rules), and the number of rule lines left out.
    pub(crate) async fn save_outline(&self, family: IpFamily, table: Option<Table>) -> Result<Outline, IptablesError> {
        let tool = self.backend.save(family);
        let args: &[&str] = match table {
            Some(table) => &["-t", table.as_str()],
            None => &[],
        };
        let mut rules = 0;
        let keep = |line: &str| {
            let rule = save::rule_count(line);
            rules += rule;
            rule == 0 && !line.starts_with('#')
        };
        let none: Option<std::iter::Empty<&[u8]>> = None;
        let (output, _) = command::run_streamed(&tool, args, none, keep, self.timeout).await?;
        Ok(Outline { text: output.success()?, rules })
    }

    /// Runs `iptables-<backend> -w 5 args` and returns its output whatever its status.
    pub(crate) async fn iptables(&self, family: IpFamily, args: &[&str]) -> Result<Output, IptablesError> {
        let tool = self.backend.iptables(family);
        let args: Vec<&str> = ["-w", LOCK_WAIT_SECONDS].into_iter().chain(args.iter().copied()).collect();
        command::run(&tool, &args, None, self.timeout).await
    }
}

/// A save dump without its rules; see [`Iptables::save_outline`].
#[derive(Debug)]
pub(crate) struct Outline {
    /// The `*TABLE`, `:CHAIN POLICY [p:b]` and `COMMIT` lines.
    pub text: String,
    /// The rule (`-A`) lines left out.
    pub rules: usize,
}

/// A failed restore as an error naming the payload line the tool blamed.
fn refused(output: Output, payload: &str) -> IptablesError {
    let stderr = output.stderr_head();
    let line = blamed_line(&output.stderr);
    let offending = line.and_then(|n| payload.lines().nth(n.checked_sub(1)?)).map(str::to_owned);
    IptablesError::Refused { command: output.command, status: output.status, stderr, line, offending }
}

/// The line number in "Error occurred at line: 4" (a rule the kernel or a
/// match refused) or "COMMIT expected at line 9" (a truncated table).
fn blamed_line(stderr: &str) -> Option<usize> {
    stderr.lines().find_map(|l| {
        let (_, after) = l.split_once("line")?;
        let digits: String = after.trim_start_matches([':', ' ']).chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blamed_line_is_read_from_both_messages() {
        let legacy = "iptables-restore v1.8.9 (legacy): unknown option \"--bogus\"\nError occurred at line: 4\n\
                      Try `iptables-restore -h' or 'iptables-restore --help' for more information.\n";
        assert_eq!(blamed_line(legacy), Some(4));
        assert_eq!(blamed_line("iptables-nft-restore: COMMIT expected at line 12\n"), Some(12));
        assert_eq!(blamed_line("iptables-restore: unable to initialize table 'nat'\n"), None);
    }
}
