//! `kproxy run --proxy-mode userspace` end to end on loopback (no root
//! needed): a manifest Service reaches its backend through kproxy, and
//! `kproxy list` shows the frontend with its endpoint.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_service_is_proxied_through_kproxy_and_listed() {
    // A backend greeting every connection.
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in backend.incoming().flatten() {
            let _ = conn.write_all(b"hello from the backend\n");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let frontend: SocketAddr = "127.0.91.7:18080".parse().unwrap();
    std::fs::write(
        dir.path().join("web.yaml"),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec:\n  clusterIP: {}\n  \
             ports: [{{name: http, port: {}, targetPort: {backend_port}}}]\n---\n\
             apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: default, \
             labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\n\
             endpoints: [{{addresses: [127.0.0.1], conditions: {{ready: true}}}}]\n\
             ports: [{{name: http, port: {backend_port}, protocol: TCP}}]\n",
            frontend.ip(),
            frontend.port()
        ),
    )
    .unwrap();
    let (health, metrics) = (free_port(), free_port());
    let _kproxy = Killed(
        Command::new(env!("CARGO_BIN_EXE_kproxy"))
            .args(["run", "--proxy-mode", "userspace", "--hostname-override", "node-a", "--manifests"])
            .arg(dir.path())
            .args(["--healthz-bind-address", &health.to_string(), "--metrics-bind-address", &metrics.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    let greeting = loop {
        if let Ok(conn) = TcpStream::connect_timeout(&frontend, Duration::from_millis(200)) {
            conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut line = String::new();
            if BufReader::new(conn).read_line(&mut line).is_ok() && !line.is_empty() {
                break line;
            }
        }
        assert!(Instant::now() < deadline, "the frontend never answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(greeting, "hello from the backend\n");

    let out =
        Command::new(env!("CARGO_BIN_EXE_kproxy")).args(["list", "--address", &metrics.to_string()]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(table.contains(&format!("TCP  {frontend} rr    # ClusterIP default/web:http")), "{table}");
    assert!(table.contains(&format!("  -> 127.0.0.1:{backend_port}")), "{table}");

    // The relay's own metrics: the greeting went through a copy buffer.
    let mut conn = TcpStream::connect(metrics).unwrap();
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    std::io::Read::read_to_string(&mut conn, &mut body).unwrap();
    let copied = body
        .lines()
        .find_map(|l| l.strip_prefix("kproxy_userspace_copied_bytes_total "))
        .unwrap_or_else(|| panic!("no kproxy_userspace_copied_bytes_total in\n{body}"));
    assert!(copied.parse::<u64>().unwrap() >= 23, "{copied}");
    assert!(body.contains("kproxy_userspace_spliced_bytes_total 0"), "{body}");

    // Nothing listens on a free port: a clear error.
    let out = Command::new(env!("CARGO_BIN_EXE_kproxy"))
        .args(["list", "--address", &free_port().to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no kproxy answers on"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
