//! Every printing command whose reader goes away (`kproxy render | head
//! -3`) ends quietly with status 0, as ripgrep does, never with a panic.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn kproxy() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kproxy"));
    command.env_remove("RUST_LOG").env("RUST_BACKTRACE", "0").stdin(Stdio::null());
    command
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/basic")
}

/// A folder with `count` ClusterIP services: far more output than a
/// pipe's buffer (64 KiB), so the command is still writing when the
/// reader goes.
fn many_services(count: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..count {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}}}\n\
             spec: {{clusterIP: 10.96.{}.{}, ports: [{{name: http, port: 80}}]}}\n",
            i / 250,
            i % 250 + 1
        ));
    }
    std::fs::write(dir.path().join("services.yaml"), text).unwrap();
    dir
}

/// Runs `command`, reads `bytes` of its output, closes the pipe and
/// returns the exit code and stderr.
fn read_then_close(mut command: Command, bytes: usize) -> (Option<i32>, String) {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("the binary runs");
    let mut stdout = child.stdout.take().expect("piped");
    let mut head = vec![0; bytes];
    stdout.read_exact(&mut head).expect("the command prints at least that much");
    drop(stdout);
    let out = child.wait_with_output().expect("the binary ends");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs `command` with its stdout a pipe whose reader is already gone:
/// every write fails, however little the command prints.
fn closed_from_the_start(mut command: Command) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = command.stdout(writer).stderr(Stdio::piped()).output().expect("the binary runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_quiet((code, stderr): (Option<i32>, String), what: &str) {
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(!stderr.contains("Broken pipe") && !stderr.contains("standard output"), "{what}: {stderr}");
    assert_eq!(code, Some(0), "{what}: {stderr}");
}

#[test]
fn render_and_state_stop_quietly_when_the_reader_closes_midway() {
    let dir = many_services(1500);
    for args in [&["render"][..], &["render", "--proxy-mode", "iptables"], &["state"], &["state", "-o", "json"]] {
        let mut command = kproxy();
        command.args(args).arg("--manifests").arg(dir.path()).args(["--hostname-override", "node-a"]);
        assert_quiet(read_then_close(command, 100), &args.join(" "));
    }
}

#[test]
fn every_printing_command_stops_quietly_on_a_pipe_closed_before_it_writes() {
    let example = example();
    let offline: [&[&str]; 5] = [
        &["render"],
        &["render", "--proxy-mode", "iptables"],
        &["state"],
        &["state", "-o", "json"],
        &["trace", "--from", "192.168.1.200", "--to", "10.96.0.10:80", "--iif", "eth0"],
    ];
    for args in offline {
        let mut command = kproxy();
        command.args(args).arg("--manifests").arg(&example).args(["--hostname-override", "node-a"]);
        assert_quiet(closed_from_the_start(command), &args.join(" "));
    }
    let address = serve_one_list();
    let mut command = kproxy();
    command.args(["list", "--address", &address]);
    assert_quiet(closed_from_the_start(command), "list");
}

/// A stand-in for a running kproxy's `/list` that answers one request.
fn serve_one_list() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0; 1024];
        let _ = stream.read(&mut request);
        let body = r#"[{"protocol":"TCP","frontend":"10.96.0.10:80","kind":"ClusterIP","service":"default/web:http","scheduler":"random","persistent":null,"endpoints":[]}]"#;
        let _ = write!(stream, "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{body}");
    });
    address
}

#[test]
fn a_failed_command_still_reports_its_error_with_stdout_closed() {
    let mut command = kproxy();
    command.args(["state", "--manifests", "/nonexistent/kproxy-test"]);
    let (code, stderr) = closed_from_the_start(command);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("--manifests"), "{stderr}");
}
