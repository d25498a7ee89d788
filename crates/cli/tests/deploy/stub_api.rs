//! A stand-in for the API server that kubectl's client-side dry run talks
//! to: discovery for the kinds of deploy/, 404 for every object, and a log
//! of the requests.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// What kubectl's client-side dry run still asks a server: discovery, to
/// map kinds to resources, and a GET of each object, to choose between
/// create and patch. This answers discovery for the kinds below and 404 to
/// everything else, and records every request (`GET /api`).
pub struct StubApiServer {
    pub url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

/// Group version, resource, kind, namespaced.
const RESOURCES: &[(&str, &str, &str, bool)] = &[
    ("v1", "namespaces", "Namespace", false),
    ("v1", "serviceaccounts", "ServiceAccount", true),
    ("v1", "configmaps", "ConfigMap", true),
    ("apps/v1", "daemonsets", "DaemonSet", true),
    ("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", false),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", false),
];

impl StubApiServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requests);
        // Runs until the test process exits.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let log = Arc::clone(&log);
                std::thread::spawn(move || serve(stream, &log));
            }
        });
        StubApiServer { url, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("not poisoned").clone()
    }
}

/// HTTP/1.1 with keep-alive, as Go's client speaks it over plain HTTP.
fn serve(stream: TcpStream, log: &Mutex<Vec<String>>) {
    let mut writer = stream.try_clone().expect("a second handle");
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) =
                header.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            {
                length = value.trim().parse().unwrap_or_else(|_| panic!("bad {name}"));
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        log.lock().expect("not poisoned").push(format!("{method} {path}"));
        let (code, value) = if method == "GET" { answer(path) } else { (405, status(405, "MethodNotAllowed")) };
        let text = value.to_string();
        let reason = if code == 200 { "OK" } else { "Error" };
        let head = format!(
            "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            text.len()
        );
        if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(text.as_bytes())).is_err() {
            return;
        }
    }
}

fn status(code: u16, reason: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code })
}

fn answer(path: &str) -> (u16, Value) {
    let group_versions: BTreeSet<&str> = RESOURCES.iter().map(|r| r.0).filter(|gv| gv.contains('/')).collect();
    let resources = |gv: &str| {
        let list: Vec<Value> = RESOURCES
            .iter()
            .filter(|r| r.0 == gv)
            .map(|(_, name, kind, namespaced)| {
                let verbs = ["create", "delete", "get", "list", "patch", "update", "watch"];
                json!({ "name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs })
            })
            .collect();
        (200, json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list }))
    };
    match path {
        "/api" => (200, json!({ "kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [] })),
        "/apis" => {
            let groups: Vec<Value> = group_versions
                .iter()
                .map(|gv| {
                    let (group, version) = gv.split_once('/').expect("group/version");
                    let v = json!({ "groupVersion": gv, "version": version });
                    json!({ "name": group, "versions": [v], "preferredVersion": v })
                })
                .collect();
            (200, json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }))
        }
        "/api/v1" => resources("v1"),
        _ => match path.strip_prefix("/apis/").filter(|gv| group_versions.contains(gv)) {
            Some(gv) => resources(gv),
            None => (404, status(404, "NotFound")),
        },
    }
}
