//! A real cluster's dump as a manifest folder: kubectl's `kind: List` of
//! thousands of objects loads, in YAML and in JSON, while a document that
//! aliases its way to millions of nodes is still refused.

mod kubectl;

use std::path::Path;

use kproxy_source::manifests::{Folder, Parsed, parse_file};
use kproxy_state::{Kind, SourceEvent};

const CLUSTER: kubectl::Cluster = kubectl::Cluster { services: 400, pods_per_service: 3, nodes: 100 };

fn load(name: &str, text: &str) -> (Vec<SourceEvent>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(name), text).unwrap();
    let reload = Folder::new(dir.path()).unwrap().reload().unwrap();
    (reload.events, reload.errors.iter().map(ToString::to_string).collect())
}

fn count(events: &[SourceEvent], kind: Kind) -> usize {
    events.iter().filter(|e| matches!(e, SourceEvent::Apply(o) if o.key().kind == kind)).count()
}

fn assert_whole_cluster(events: &[SourceEvent]) {
    assert_eq!(count(events, Kind::Service), CLUSTER.services);
    assert_eq!(count(events, Kind::EndpointSlice), CLUSTER.services);
    assert_eq!(count(events, Kind::Pod), CLUSTER.services * CLUSTER.pods_per_service);
    assert_eq!(count(events, Kind::Node), CLUSTER.nodes);
    assert_eq!(events.len(), CLUSTER.objects());
}

#[test]
fn a_kubectl_yaml_list_of_thousands_of_objects_loads_as_a_folder() {
    let yaml = kubectl::to_yaml(&CLUSTER.list());
    assert!(
        yaml.starts_with("apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n"),
        "{}",
        &yaml[..200]
    );
    let (events, errors) = load("cluster.yaml", &yaml);
    assert_eq!(errors, Vec::<String>::new());
    assert_whole_cluster(&events);
}

#[test]
fn a_kubectl_yaml_list_with_an_ampersand_in_a_value_loads_too() {
    // `&` could start an anchor, so this dump is measured item by item
    // before it is parsed (the path any dump with a URL query takes).
    let yaml = kubectl::to_yaml(&CLUSTER.list());
    let yaml = yaml.replacen("    annotations:\n", "    annotations:\n      example.com/scrape: /metrics?a=1&b=2\n", 1);
    let (events, errors) = load("cluster.yaml", &yaml);
    assert_eq!(errors, Vec::<String>::new());
    assert_whole_cluster(&events);
}

#[test]
fn a_kubectl_json_list_of_thousands_of_objects_loads_as_a_folder() {
    let json = kubectl::to_json(&CLUSTER.list());
    assert!(json.starts_with("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        {\n"), "{}", &json[..200]);
    let (events, errors) = load("cluster.json", &json);
    assert_eq!(errors, Vec::<String>::new());
    assert_whole_cluster(&events);
}

/// Nine levels of ten aliases each: a billion strings from 30 lines.
fn billion_laughs(indent: &str) -> String {
    let mut text = format!("{indent}l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..=9 {
        let previous = format!("*l{}", level - 1);
        let refs = [previous.as_str(); 10].join(", ");
        text.push_str(&format!("{indent}l{level}: &l{level} [{refs}]\n"));
    }
    text
}

const SERVICE: &str = "\
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.0.10
  ports: [{port: 80}]
";

fn errors(parsed: &[Parsed]) -> Vec<String> {
    parsed.iter().filter_map(|p| if let Parsed::Invalid(e) = p { Some(e.to_string()) } else { None }).collect()
}

fn objects(parsed: &[Parsed]) -> usize {
    parsed.iter().filter(|p| matches!(p, Parsed::Object { .. })).count()
}

#[test]
fn an_alias_bomb_is_refused_naming_its_file_and_document_and_the_rest_loads() {
    let bomb = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: lols}}\ndata:\n{}", billion_laughs("  "));
    let text = format!("{SERVICE}---\n{bomb}");
    let started = std::time::Instant::now();
    let parsed = parse_file(Path::new("m/bomb.yaml"), &text);
    let errors = errors(&parsed);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("m/bomb.yaml: document 2 (line 8): "), "{}", errors[0]);
    assert!(errors[0].contains("alias"), "{}", errors[0]);
    assert_eq!(objects(&parsed), 1, "the Service of document 1 still loads");
    // Refused before anything is expanded.
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn an_alias_bomb_inside_a_list_item_is_refused_naming_the_item() {
    let item =
        format!("- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: lols}}\n  data:\n{}", billion_laughs("    "));
    let text = format!("apiVersion: v1\nkind: List\nitems:\n- {}\n{item}", SERVICE.trim_end().replace('\n', "\n  "));
    let errors = errors(&parse_file(Path::new("list.yaml"), &text));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("list.yaml: document 1 (line 10): item 1: "), "{}", errors[0]);
    assert!(errors[0].contains("alias"), "{}", errors[0]);
}

#[test]
fn many_small_items_that_each_alias_one_large_anchor_are_refused() {
    // No single item is large, but together they expand a 20 kB document
    // to about a billion nodes.
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n- &big\n");
    for i in 0..100 {
        text.push_str(&format!("  k{i}: [{}]\n", vec!["x"; 1000].join(", ")));
    }
    for _ in 0..10_000 {
        text.push_str("- *big\n");
    }
    let errors = errors(&parse_file(Path::new("spread.yaml"), &text));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with("spread.yaml: document 1 (line 1): "), "{}", errors[0]);
    assert!(errors[0].contains("alias"), "{}", errors[0]);
}

#[test]
fn anchors_shared_by_the_items_of_a_list_still_work() {
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..300 {
        let ports = if i == 0 { "&ports [{name: http, port: 80, targetPort: 8080}]" } else { "*ports" };
        text.push_str(&format!(
            "- {{apiVersion: v1, kind: Service, metadata: {{name: s{i}}}, spec: {{clusterIP: 10.96.1.{}, ports: {ports}}}}}\n",
            i % 250 + 1
        ));
    }
    let parsed = parse_file(Path::new("shared.yaml"), &text);
    assert_eq!(errors(&parsed), Vec::<String>::new());
    assert_eq!(objects(&parsed), 300);
}
