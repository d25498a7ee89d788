//! Running a program to completion and turning its failure into a
//! [`SandboxError`] that carries the command line and stderr.

use std::process::Command;

use crate::SandboxError;

/// Renders a command as a shell-like line for error messages and logs.
pub(crate) fn render(command: &Command) -> String {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Runs `command` to completion and returns its stdout; a non-zero exit is an error carrying stderr.
pub(crate) fn run(mut command: Command) -> Result<String, SandboxError> {
    let line = render(&command);
    tracing::trace!(command = %line, "running");
    let output = command.output().map_err(|source| SandboxError::Start { command: line.clone(), source })?;
    if !output.status.success() {
        return Err(SandboxError::Command {
            command: line,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Builds `program args..`.
pub(crate) fn new<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(program);
    command.args(args);
    command
}
