//! Standard output of the commands: written through one locked handle,
//! where a reader that went away (`kproxy render | head -3`) is an ordinary
//! outcome, not a panic (`print!` panics on `EPIPE`).
//!
//! Rust ignores `SIGPIPE`, so a closed pipe comes back as a write error;
//! [`print`] turns it into [`StdoutClosed`], which `main` ends with status 0
//! and no message, as ripgrep does: the reader had all it wanted. Any other
//! write error (a full disk) is a failure like any other.

use std::io;

/// The reader of standard output has gone away.
#[derive(Debug)]
pub struct StdoutClosed;

impl std::fmt::Display for StdoutClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output closed")
    }
}

impl std::error::Error for StdoutClosed {}

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> anyhow::Result<()> {
    write_to(&mut io::stdout().lock(), text)
}

/// [`print`] into any writer (tests).
fn write_to(out: &mut impl io::Write, text: &str) -> anyhow::Result<()> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to standard output")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Failing(io::ErrorKind);

    impl io::Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(self.0.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_is_stdout_closed_and_other_errors_stay_errors() {
        let closed = write_to(&mut Failing(io::ErrorKind::BrokenPipe), "x").unwrap_err();
        assert!(closed.downcast_ref::<StdoutClosed>().is_some());
        let full = write_to(&mut Failing(io::ErrorKind::StorageFull), "x").unwrap_err();
        assert!(full.downcast_ref::<StdoutClosed>().is_none());
        assert_eq!(format!("{full:#}"), "writing to standard output: no storage space");
    }
}
