//! Running one iptables tool to completion with a time bound, optionally
//! feeding it stdin, and rendering its command line for errors and logs.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::IptablesError;

/// How many stderr lines an error keeps: the tools print the cause first,
/// then a line number, then a usage hint.
const STDERR_LINES: usize = 4;

/// What a finished tool said.
#[derive(Debug)]
pub(crate) struct Output {
    /// The command line, for errors.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// The first stderr lines, joined into one line.
    pub fn stderr_head(&self) -> String {
        self.stderr.lines().filter(|l| !l.trim().is_empty()).take(STDERR_LINES).collect::<Vec<_>>().join(" | ")
    }

    /// This output as an error, for a tool that should have succeeded.
    pub fn failure(self) -> IptablesError {
        let stderr = self.stderr_head();
        IptablesError::Failed { command: self.command, status: self.status, stderr }
    }

    /// Stdout if the tool succeeded, else the failure.
    pub fn success(self) -> Result<String, IptablesError> {
        if self.status.success() { Ok(self.stdout) } else { Err(self.failure()) }
    }
}

/// Runs `program args` in the calling thread's network namespace and waits
/// at most `timeout`; a tool still running then is killed.
///
/// A non-zero exit is not an error here: callers know which statuses mean
/// "absent". A write error on stdin is only reported if the tool succeeded,
/// since a tool that refuses its input exits before reading all of it.
pub(crate) async fn run(
    program: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
    timeout: Duration,
) -> Result<Output, IptablesError> {
    Ok(run_streamed(program, args, stdin.map(std::iter::once), |_| true, timeout).await?.0)
}

/// [`run`], feeding stdin chunk by chunk as `stdin` yields them (each is
/// dropped once written, so the input is never whole in memory) and
/// keeping only the stdout lines `keep` accepts (read line by line, so a
/// large dump is never whole in memory either); also returns the bytes
/// written.
pub(crate) async fn run_streamed<I, B>(
    program: &str,
    args: &[&str],
    stdin: Option<I>,
    mut keep: impl FnMut(&str) -> bool + Send,
    timeout: Duration,
) -> Result<(Output, usize), IptablesError>
where
    I: Iterator<Item = B> + Send,
    B: AsRef<[u8]> + Send,
{
    let command = render(program, args);
    tracing::trace!(command = %command, "running");
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => IptablesError::MissingTool { tool: program.to_owned() },
            _ => IptablesError::Spawn { tool: program.to_owned(), source },
        })?;
    let pipe = child.stdin.take();
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        unreachable!("stdout and stderr are piped above");
    };
    // Write and read at once: a large payload must not wait on a full stderr pipe.
    let write = async move {
        let mut written = 0;
        if let (Some(mut pipe), Some(chunks)) = (pipe, stdin) {
            for chunk in chunks {
                pipe.write_all(chunk.as_ref()).await?;
                written += chunk.as_ref().len();
            }
        }
        Ok::<usize, std::io::Error>(written)
    };
    let read_stdout = async move {
        let (mut reader, mut line, mut kept) = (BufReader::new(stdout), Vec::new(), String::new());
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).await? == 0 {
                return Ok::<String, std::io::Error>(kept);
            }
            let text = String::from_utf8_lossy(&line);
            if keep(text.strip_suffix('\n').unwrap_or(&text)) {
                kept.push_str(&text);
            }
        }
    };
    let read_stderr = async move {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).await.map(|_| bytes)
    };
    let finished = tokio::time::timeout(timeout, async {
        let (written, stdout, stderr) = tokio::join!(write, read_stdout, read_stderr);
        (written, stdout, stderr, child.wait().await)
    })
    .await;
    // On timeout the child is dropped on return, which kills it.
    let Ok((written, stdout, stderr, status)) = finished else {
        return Err(IptablesError::Timeout { command, timeout });
    };
    let spawn_error = |source| IptablesError::Spawn { tool: program.to_owned(), source };
    let (status, stdout, stderr) =
        (status.map_err(spawn_error)?, stdout.map_err(spawn_error)?, stderr.map_err(spawn_error)?);
    let written = match written {
        Ok(written) => written,
        Err(source) if status.success() => return Err(IptablesError::Write { command, source }),
        Err(_) => 0,
    };
    let output = Output { command, status, stdout, stderr: String::from_utf8_lossy(&stderr).into_owned() };
    Ok((output, written))
}

/// `program args..` as one line.
pub(crate) fn render(program: &str, args: &[&str]) -> String {
    std::iter::once(program).chain(args.iter().copied()).collect::<Vec<_>>().join(" ")
}

/// Whether `program` is an executable file in a directory of `path` (a
/// `PATH` value; [`run`] looks for programs in the process's `PATH`).
pub(crate) fn installed(program: &str, path: &std::ffi::OsStr) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path).any(|dir| {
        std::fs::metadata(dir.join(program)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<T>(future: impl Future<Output = T>) -> T {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(future)
    }

    #[test]
    fn a_tool_running_past_its_bound_is_killed_and_reported() {
        let started = std::time::Instant::now();
        let error = block_on(run("sleep", &["30"], None, Duration::from_millis(200))).unwrap_err();
        assert!(matches!(error, IptablesError::Timeout { .. }), "{error}");
        assert_eq!(error.to_string(), "`sleep 30` did not finish within 200ms and was killed");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_payload_larger_than_a_pipe_is_written_while_output_is_read() {
        // 4 MiB: far beyond the 64 KiB pipe buffers on both sides.
        let payload = "-A KUBE-SVC-AAAA -j RETURN\n".repeat(160_000);
        let output = block_on(run("cat", &[], Some(payload.as_bytes()), Duration::from_secs(20))).unwrap();
        assert!(output.status.success());
        assert_eq!(output.stdout.len(), payload.len());
    }

    #[test]
    fn a_streamed_input_reaches_the_tool_whole_and_is_counted() {
        let chunks = (0..100).map(|i| format!("-A KUBE-SVC-{i:04} -j RETURN\n").repeat(1000));
        let expected: usize = (0..100).map(|i| format!("-A KUBE-SVC-{i:04} -j RETURN\n").len() * 1000).sum();
        let (output, written) =
            block_on(run_streamed("wc", &["-c"], Some(chunks), |_| true, Duration::from_secs(20))).unwrap();
        assert!(output.status.success());
        assert_eq!(written, expected);
        assert_eq!(output.stdout.trim(), expected.to_string());
    }

    #[test]
    fn only_the_stdout_lines_asked_for_are_kept() {
        let mut dropped = 0;
        let keep = |line: &str| {
            let kept = !line.starts_with('-');
            dropped += usize::from(!kept);
            kept
        };
        let none: Option<std::iter::Empty<&[u8]>> = None;
        let script = "printf '*nat\\n:KUBE-SVC-A - [0:0]\\n-A KUBE-SVC-A -j RETURN\\nCOMMIT'";
        let (output, _) = block_on(run_streamed("sh", &["-c", script], none, keep, Duration::from_secs(5))).unwrap();
        assert_eq!(output.stdout, "*nat\n:KUBE-SVC-A - [0:0]\nCOMMIT");
        assert_eq!(dropped, 1);
    }

    #[test]
    fn a_missing_tool_is_named() {
        let error = block_on(run("kproxy-no-such-tool", &[], None, Duration::from_secs(1))).unwrap_err();
        assert_eq!(error.to_string(), "`kproxy-no-such-tool` is not installed (not found on PATH)");
    }

    #[test]
    fn only_executable_files_count_as_installed() {
        assert!(installed("sh", std::ffi::OsStr::new("/nonexistent:/bin:/usr/bin")));
        assert!(!installed("sh", std::ffi::OsStr::new("/nonexistent")));
        assert!(!installed("passwd", std::ffi::OsStr::new("/etc")));
    }
}
