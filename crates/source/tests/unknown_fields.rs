//! Unknown fields in manifests are named, as kubectl's strict decoding
//! names them, and one bad field never stops the other objects.

use std::path::Path;

use kproxy_source::manifests::{Folder, Parsed, parse_file};

const WEB: &str = "\
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.96.0.10
  ports:
  - port: 80
";

fn errors(parsed: &[Parsed]) -> Vec<String> {
    parsed.iter().filter_map(|p| if let Parsed::Invalid(e) = p { Some(e.to_string()) } else { None }).collect()
}

fn unknown(parsed: &[Parsed]) -> Vec<String> {
    parsed
        .iter()
        .filter_map(|p| match p {
            Parsed::Unknown { document, object, field } => Some(format!("{document}: {object}: {field}")),
            _ => None,
        })
        .collect()
}

fn served(parsed: &[Parsed]) -> Vec<String> {
    parsed
        .iter()
        .filter_map(|p| if let Parsed::Object { object, .. } = p { Some(object.key().to_string()) } else { None })
        .collect()
}

#[test]
fn a_misspelt_required_field_is_named_as_unknown_before_the_field_it_left_unset() {
    let text = WEB.replace("clusterIP:", "clusterIp:");
    let parsed = parse_file(Path::new("svc.yaml"), &text);
    assert_eq!(
        errors(&parsed),
        [
            "svc.yaml: document 1 (line 1): Service default/web: spec.clusterIp: unknown field (did you mean clusterIP?); \
spec.clusterIP: must be set to an IP address (or \"None\" for a headless service); without an API server nothing allocates one"
        ]
    );
    assert_eq!(served(&parsed), Vec::<String>::new());
}

#[test]
fn an_unknown_field_of_a_served_object_is_a_warning_and_the_others_are_served() {
    let extra = WEB.replace("name: web", "name: extra").replace("  - port: 80", "  - port: 80\n    nodeport: 30080");
    let misspelt = WEB.replace("name: web", "name: broken").replace("clusterIP:", "clusterIp:");
    let list =
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p, labelz: {a: b}}\n";
    let text = format!("{WEB}---\n{extra}---\n{misspelt}---\n{list}");
    let parsed = parse_file(Path::new("m.yaml"), &text);
    assert_eq!(served(&parsed), ["Service default/web", "Service default/extra", "Pod default/p"]);
    assert_eq!(
        unknown(&parsed),
        [
            "2: Service default/extra: spec.ports[0].nodeport: unknown field (did you mean nodePort?)",
            "4: item 0, Pod default/p: metadata.labelz: unknown field (did you mean labels?)",
        ]
    );
    assert_eq!(errors(&parsed).len(), 1, "{:?}", errors(&parsed));
    assert!(errors(&parsed)[0].contains("Service default/broken: spec.clusterIp: unknown field"));
}

#[test]
fn free_keys_of_labels_annotations_and_selectors_are_never_unknown() {
    let text = WEB.replace("  name: web\n", "  name: web\n  labels: {clusterIp: x}\n  annotations: {nodeport: v}\n")
        + "  selector: {whatever: z}\n";
    let parsed = parse_file(Path::new("m.yaml"), &text);
    assert_eq!(errors(&parsed), Vec::<String>::new());
    assert_eq!(unknown(&parsed), Vec::<String>::new());
    assert_eq!(served(&parsed), ["Service default/web"]);
}

#[test]
fn a_folder_reload_lists_unknown_fields_with_file_document_and_object() {
    let dir = tempfile::tempdir().unwrap();
    let text = WEB.replace("spec:\n", "spec:\n  sessionAfinity: ClientIP\n");
    std::fs::write(dir.path().join("web.yaml"), text).unwrap();
    let mut folder = Folder::new(dir.path()).unwrap();
    let reload = folder.reload().unwrap();
    assert_eq!(reload.errors, []);
    assert_eq!(reload.events.len(), 1);
    let file = dir.path().join("web.yaml");
    assert_eq!(
        reload.unknown_fields,
        [format!(
            "{}: document 1: Service default/web: spec.sessionAfinity: unknown field (did you mean sessionAffinity?)",
            file.display()
        )]
    );
}
