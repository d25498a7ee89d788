//! The manifest folder source: parsing, bad input, file changes.

use std::path::Path;
use std::time::Duration;

use kproxy_source::manifests::{Folder, ManifestSource, Parsed, SourceCounters, WatchOptions, parse_file};
use kproxy_state::{Kind, Object, ObjectKey, SourceEvent};

const WEB: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 8080
";

fn errors(parsed: &[Parsed]) -> Vec<String> {
    parsed.iter().filter_map(|p| if let Parsed::Invalid(e) = p { Some(e.to_string()) } else { None }).collect()
}

fn keys(parsed: &[Parsed]) -> Vec<String> {
    parsed
        .iter()
        .filter_map(|p| if let Parsed::Object { object, .. } = p { Some(object.key().to_string()) } else { None })
        .collect()
}

#[test]
fn documents_and_lists_each_become_objects_and_other_kinds_are_skipped() {
    let text = format!(
        "# comment only: not a document\n---\n{WEB}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: x}}\n---\n\
apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {{name: p, namespace: shop}}\n\
- apiVersion: v1\n  kind: Node\n  metadata: {{name: node-a}}\n---\n"
    );
    let parsed = parse_file(Path::new("a.yaml"), &text);
    assert_eq!(errors(&parsed), Vec::<String>::new());
    assert_eq!(keys(&parsed), ["Service default/web", "Pod shop/p", "Node node-a"]);
    assert!(parsed.iter().any(|p| matches!(p, Parsed::Skipped { document: 2, kind, .. } if kind == "Deployment")));
}

#[test]
fn a_syntax_error_names_the_file_document_and_line_in_the_file() {
    let text = format!("{WEB}---\napiVersion: v1\nkind: Service\nmetadata:\n  name: [broken\nspec: {{}}\n");
    let parsed = parse_file(Path::new("svc.yaml"), &text);
    assert_eq!(keys(&parsed), ["Service default/web"]);
    assert_eq!(
        errors(&parsed),
        ["svc.yaml: document 2 (line 17): invalid YAML: line 17 column 5: illegal placement of ':' indicator"]
    );
}

#[test]
fn an_invalid_field_names_the_object_field_and_reason() {
    let bad_port = WEB.replace("port: 80", "port: 70000");
    let bad_ip = WEB.replace("10.96.0.10", "10.96.0.300").replace("name: web", "name: other");
    let bad_protocol = WEB.replace("name: http", "name: http\n    protocol: ICMP").replace("name: web", "name: third");
    let text = format!("{bad_port}---\n{bad_ip}---\n{bad_protocol}");
    assert_eq!(
        errors(&parse_file(Path::new("m/bad.yaml"), &text)),
        [
            "m/bad.yaml: document 1 (line 1): Service default/web: spec.ports[0].port: 70000 is out of range (allowed: 1-65535)",
            "m/bad.yaml: document 2 (line 13): Service default/other: spec.clusterIP: \"10.96.0.300\" is not a valid IP address",
            "m/bad.yaml: document 3 (line 25): Service default/third: spec.ports[0].protocol: unsupported value \"ICMP\" (allowed: TCP, UDP, SCTP)",
        ]
    );
}

#[test]
fn a_wrong_type_or_api_version_is_an_error_naming_the_object() {
    let text =
        format!("{}---\n{}", WEB.replace("port: 80", "port: eighty"), WEB.replace("apiVersion: v1", "apiVersion: v2"));
    assert_eq!(
        errors(&parse_file(Path::new("x.yaml"), &text)),
        [
            "x.yaml: document 1 (line 1): Service default/web: spec.ports[0].port: invalid type: string \"eighty\", expected i32",
            "x.yaml: document 2 (line 13): Service default/web: apiVersion \"v2\" is not supported for kind Service (allowed: v1)",
        ]
    );
    assert_eq!(
        errors(&parse_file(Path::new("y.yaml"), "just: a map\n")),
        ["y.yaml: document 1 (line 1): not a Kubernetes object: apiVersion and kind must be set"]
    );
}

fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn applied(events: &[SourceEvent]) -> Vec<String> {
    events.iter().filter_map(|e| if let SourceEvent::Apply(o) = e { Some(o.key().to_string()) } else { None }).collect()
}

fn deleted(events: &[SourceEvent]) -> Vec<String> {
    events.iter().filter_map(|e| if let SourceEvent::Delete(k) = e { Some(k.to_string()) } else { None }).collect()
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: web}}}}\nstatus: {{podIP: 10.1.0.1}}\n"
    )
}

#[test]
fn a_malformed_file_next_to_good_ones_only_loses_its_own_bad_document() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a-web.yaml", WEB);
    write(dir.path(), "b-broken.yaml", &format!("{}---\nkind: [\n", pod("p1")));
    write(dir.path(), "sub/c-pod.yml", &pod("p2"));
    write(dir.path(), ".hidden.yaml", &pod("p3"));
    write(dir.path(), "notes.txt", "not yaml at all: [");
    let mut folder = Folder::new(dir.path()).unwrap();
    let reload = folder.reload().unwrap();
    assert_eq!(applied(&reload.events), ["Service default/web", "Pod default/p1", "Pod default/p2"]);
    assert_eq!(reload.errors.len(), 1);
    assert!(
        reload.errors[0].to_string().contains("b-broken.yaml: document 2 (line 6): invalid YAML"),
        "{}",
        reload.errors[0]
    );
    assert_eq!(reload.files, 3);
    // Nothing changed: nothing to send, nothing to report again.
    let again = folder.reload().unwrap();
    assert!(again.events.is_empty() && again.errors.is_empty());
}

/// An address with leading zeros (written before the API server's strict
/// validation) is served as kube-proxy reads it, decimal, and reported once
/// with its file, document, object and field.
#[test]
fn an_address_with_leading_zeros_is_served_and_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", &format!("{}---\n{}", pod("p1"), WEB.replace("10.96.0.10", "10.96.0.010")));
    let mut folder = Folder::new(dir.path()).unwrap();
    let reload = folder.reload().unwrap();
    assert_eq!(applied(&reload.events), ["Service default/web", "Pod default/p1"]);
    assert!(reload.errors.is_empty(), "{:?}", reload.errors);
    let file = dir.path().join("web.yaml");
    assert_eq!(
        reload.warnings,
        [format!(
            "{}: document 2: Service default/web: spec.clusterIP: \"10.96.0.010\" has leading zeros; read as 10.96.0.10, as kube-proxy reads it",
            file.display()
        )]
    );
    let Some(SourceEvent::Apply(Object::Service(web))) = reload.events.first() else { panic!("{:?}", reload.events) };
    assert_eq!(web.cluster_ips, ["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]);
    let again = folder.reload().unwrap();
    assert!(again.events.is_empty() && again.warnings.is_empty(), "an unchanged file is not reported again");
}

#[test]
fn deleting_a_file_removes_its_objects() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", WEB);
    write(dir.path(), "pods.yaml", &pod("p1"));
    let mut folder = Folder::new(dir.path()).unwrap();
    folder.reload().unwrap();
    std::fs::remove_file(dir.path().join("pods.yaml")).unwrap();
    let reload = folder.reload().unwrap();
    assert_eq!(deleted(&reload.events), ["Pod default/p1"]);
    assert!(applied(&reload.events).is_empty());
}

#[test]
fn a_file_that_turns_bad_keeps_its_last_valid_objects_until_fixed() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", &format!("{WEB}---\n{}", pod("p1")));
    let mut folder = Folder::new(dir.path()).unwrap();
    folder.reload().unwrap();
    // The Service gets a typo; the Pod is removed in the same edit.
    write(dir.path(), "web.yaml", &WEB.replace("port: 80", "port: 0"));
    let reload = folder.reload().unwrap();
    assert!(reload.events.is_empty(), "{:?}", reload.events);
    assert_eq!(reload.kept, ["Service default/web", "Pod default/p1"]);
    assert_eq!(reload.errors.len(), 1);
    // Fixed: the Pod's removal now takes effect.
    write(dir.path(), "web.yaml", WEB);
    let reload = folder.reload().unwrap();
    assert_eq!(deleted(&reload.events), ["Pod default/p1"]);
}

#[test]
fn an_object_defined_twice_keeps_the_first_and_reports_the_second_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", WEB);
    write(dir.path(), "b.yaml", &WEB.replace("10.96.0.10", "10.96.0.11"));
    let mut folder = Folder::new(dir.path()).unwrap();
    let reload = folder.reload().unwrap();
    let first = reload.events.iter().find_map(|e| match e {
        SourceEvent::Apply(Object::Service(s)) => Some(s.cluster_ips[0].to_string()),
        _ => None,
    });
    assert_eq!(first.as_deref(), Some("10.96.0.10"));
    let text: Vec<String> = reload.errors.iter().map(ToString::to_string).collect();
    let b = dir.path().join("b.yaml");
    let a = dir.path().join("a.yaml");
    assert_eq!(
        text,
        [format!(
            "{}: document 1 (line 1): Service default/web: also defined in {} document 1; this copy is ignored",
            b.display(),
            a.display()
        )]
    );
    assert!(folder.reload().unwrap().errors.is_empty());
    // Once the first goes, the second takes over.
    std::fs::remove_file(&a).unwrap();
    let reload = folder.reload().unwrap();
    assert_eq!(applied(&reload.events), ["Service default/web"]);
    assert!(deleted(&reload.events).is_empty());
}

/// The last read's view is compared with the new one object by object,
/// wherever the objects now live: only what differs is sent.
#[test]
fn a_rewritten_or_moved_object_is_sent_only_when_it_differs() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", &format!("{WEB}---\n{}", pod("p1")));
    write(dir.path(), "b.yaml", &pod("p2"));
    let mut folder = Folder::new(dir.path()).unwrap();
    assert_eq!(applied(&folder.reload().unwrap().events).len(), 3);
    // a.yaml rewritten: the Service changes, p1 does not.
    write(dir.path(), "a.yaml", &format!("{}---\n{}", WEB.replace("10.96.0.10", "10.96.0.12"), pod("p1")));
    let reload = folder.reload().unwrap();
    assert_eq!(applied(&reload.events), ["Service default/web"]);
    // p1 moves to b.yaml unchanged (a.yaml rewritten, b.yaml too): nothing.
    write(dir.path(), "a.yaml", &WEB.replace("10.96.0.10", "10.96.0.12"));
    write(dir.path(), "b.yaml", &format!("{}---\n{}", pod("p2"), pod("p1")));
    let reload = folder.reload().unwrap();
    assert!(reload.events.is_empty(), "{:?}", reload.events);
    // b.yaml goes: both Pods with it.
    std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
    assert_eq!(deleted(&folder.reload().unwrap().events), ["Pod default/p1", "Pod default/p2"]);
}

#[test]
fn a_missing_folder_is_a_clear_error() {
    let err = Folder::new(Path::new("/nonexistent/kproxy-manifests")).unwrap_err();
    assert_eq!(err.to_string(), "/nonexistent/kproxy-manifests: not a directory");
}

#[tokio::test]
async fn changes_on_disk_reach_the_state_and_bad_documents_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", WEB);
    let counters = SourceCounters::default();
    let counter = counters.invalid_documents.clone();
    let reads = counters.reads.clone();
    let options =
        WatchOptions { debounce: Duration::from_millis(50), rescan: Duration::from_secs(3600), ..Default::default() };
    let source = ManifestSource::new(Folder::new(dir.path()).unwrap(), options, counters);
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let task = tokio::spawn(source.run(tx));
    let next = async |rx: &mut tokio::sync::mpsc::Receiver<SourceEvent>| {
        tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("an event within 10 s").expect("open")
    };
    assert!(matches!(next(&mut rx).await, SourceEvent::Apply(Object::Service(_))));
    assert_eq!(next(&mut rx).await, SourceEvent::Synced);
    assert_eq!(reads.get(), 1);
    // Reading the files (as the source itself does) is no change.
    std::fs::read_to_string(dir.path().join("web.yaml")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(reads.get(), 1, "reads must not trigger reads");

    write(dir.path(), "pods.yaml", &format!("{}---\nkind: [\n", pod("p1")));
    let event = next(&mut rx).await;
    assert!(matches!(&event, SourceEvent::Apply(Object::Pod(p)) if p.name == "p1"), "{event:?}");
    assert_eq!(counter.get(), 1);

    std::fs::remove_file(dir.path().join("pods.yaml")).unwrap();
    assert_eq!(next(&mut rx).await, SourceEvent::Delete(ObjectKey::new(Kind::Pod, "default", "p1")));
    drop(rx);
    task.abort();
}

#[test]
fn an_unreadable_file_keeps_its_objects_and_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "web.yaml", WEB);
    let mut folder = Folder::new(dir.path()).unwrap();
    folder.reload().unwrap();
    // Not valid UTF-8: read_to_string fails as it would on a permission error.
    std::fs::write(dir.path().join("web.yaml"), [0xff, 0xfe, 0x00]).unwrap();
    let reload = folder.reload().unwrap();
    assert!(reload.events.is_empty(), "{:?}", reload.events);
    assert_eq!(reload.errors.len(), 1);
    assert!(
        reload.errors[0].to_string().ends_with("web.yaml: cannot read: stream did not contain valid UTF-8"),
        "{}",
        reload.errors[0]
    );
    assert!(folder.reload().unwrap().errors.is_empty(), "reported once");
    write(dir.path(), "web.yaml", &WEB.replace("10.96.0.10", "10.96.0.12"));
    assert_eq!(applied(&folder.reload().unwrap().events), ["Service default/web"]);
}
