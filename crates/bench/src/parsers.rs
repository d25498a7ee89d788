//! `kproxy-bench parsers FILE...`: YAML parsers that kproxy could read
//! manifests with, measured in the same run on the same files, next to how
//! kproxy reads them (`docs/bench/yaml.md` has a run).
//!
//! Each candidate reads the whole multi-document file: the event parsers
//! only produce their events (a lower bound for anything built on them),
//! the serde ones build the untyped tree kproxy's decoding starts from.
//! kproxy's own rows split the file into documents as it does. A `.json`
//! file is read with serde_json and with kproxy. Times are the thread's
//! CPU time (user + system), so other work on a shared machine does not
//! inflate them. Nothing here touches the network or the kernel.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use nix::sys::resource::{UsageWho, getrusage};
use serde::Deserialize;
use serde_json::Value;

use crate::stats::Summary;

/// One measured way of reading the file: what it produced (documents,
/// events or objects), for a check that all candidates read the same.
struct Candidate {
    name: &'static str,
    read: fn(&str) -> anyhow::Result<usize>,
}

const YAML: &[Candidate] = &[
    Candidate { name: "kproxy parse_file (tree, strict decoding, conversion)", read: kproxy_parse },
    Candidate { name: "kproxy subset reader -> tree, per document", read: kproxy_subset },
    Candidate { name: "serde-saphyr 2.2 -> tree, per document (kproxy before)", read: saphyr_per_document },
    Candidate { name: "granit-parser 2.2 events (serde-saphyr's parser)", read: granit_events },
    Candidate { name: "saphyr-parser 0.3 events", read: saphyr_parser_events },
    Candidate { name: "libyaml-safer 0.3 events", read: libyaml_safer_events },
    Candidate { name: "yaml-rust2 0.13 tree (its own Yaml type)", read: yaml_rust2_tree },
    Candidate { name: "serde_yaml_ng 0.10 (unsafe-libyaml) -> tree", read: serde_yaml_ng_tree },
    Candidate { name: "serde_norway 0.9 (unsafe-libyaml) -> tree", read: serde_norway_tree },
];

const JSON: &[Candidate] = &[
    Candidate { name: "kproxy parse_file (tree, strict decoding, conversion)", read: kproxy_parse },
    Candidate { name: "serde_json -> tree", read: serde_json_tree },
];

/// Measures every candidate `runs` times on each file and prints a
/// Markdown table of medians.
pub fn compare(files: &[PathBuf], runs: usize) -> anyhow::Result<()> {
    anyhow::ensure!(runs > 0, "--runs must be at least 1");
    for file in files {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let json = file.extension().is_some_and(|e| e == "json");
        let mb = text.len() as f64 / 1e6;
        println!("\n{} ({mb:.1} MB), {runs} runs, medians\n", file.display());
        println!("| reader | median CPU ms | MB/s | min-max ms | read |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        for candidate in if json { JSON } else { YAML } {
            let mut samples = Vec::with_capacity(runs);
            let mut count = 0;
            for _ in 0..runs {
                let started = cpu_time()?;
                count = (candidate.read)(&text).with_context(|| candidate.name)?;
                samples.push((cpu_time()? - started).as_secs_f64() * 1e3);
            }
            let s = Summary::of(&samples).expect("runs > 0");
            println!(
                "| {} | {:.0} | {:.1} | {:.0}-{:.0} | {count} |",
                candidate.name,
                s.median,
                mb / (s.median / 1e3),
                s.min,
                s.max
            );
        }
    }
    Ok(())
}

/// This thread's CPU time so far.
fn cpu_time() -> anyhow::Result<Duration> {
    let usage = getrusage(UsageWho::RUSAGE_THREAD)?;
    let micros =
        |t: nix::sys::time::TimeVal| Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64);
    Ok(micros(usage.user_time()) + micros(usage.system_time()))
}

/// Documents as kproxy splits them (on `---` lines), non-empty.
fn documents(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for line in text.lines() {
        if line == "---" {
            out.push(String::new());
        } else {
            let last = out.last_mut().expect("never empty");
            last.push_str(line);
            last.push('\n');
        }
    }
    out.retain(|d| !d.trim().is_empty());
    out
}

fn kproxy_parse(text: &str) -> anyhow::Result<usize> {
    let parsed = kproxy_source::manifests::parse_file(Path::new("bench.yaml"), text);
    let invalid = parsed.iter().filter(|p| matches!(p, kproxy_source::manifests::Parsed::Invalid(_))).count();
    anyhow::ensure!(invalid == 0, "{invalid} documents are invalid");
    Ok(parsed.len())
}

fn kproxy_subset(text: &str) -> anyhow::Result<usize> {
    let docs = documents(text);
    let read = docs.iter().filter_map(|d| kproxy_source::manifests::subset_tree(d)).count();
    anyhow::ensure!(read == docs.len(), "the subset reader left {} of {} documents", docs.len() - read, docs.len());
    Ok(read)
}

fn saphyr_per_document(text: &str) -> anyhow::Result<usize> {
    let docs = documents(text);
    for doc in &docs {
        serde_saphyr::from_str::<Value>(doc)?;
    }
    Ok(docs.len())
}

fn granit_events(text: &str) -> anyhow::Result<usize> {
    let mut events = 0;
    for event in serde_saphyr::granit_parser::Parser::new_from_str(text) {
        event.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        events += 1;
    }
    Ok(events)
}

fn saphyr_parser_events(text: &str) -> anyhow::Result<usize> {
    let mut events = 0;
    for event in saphyr_parser::Parser::new_from_str(text) {
        event.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        events += 1;
    }
    Ok(events)
}

fn libyaml_safer_events(text: &str) -> anyhow::Result<usize> {
    let mut bytes = text.as_bytes();
    let mut parser = libyaml_safer::Parser::new();
    parser.set_input_string(&mut bytes);
    let mut events = 0;
    loop {
        let event = parser.parse().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        events += 1;
        if matches!(event.data, libyaml_safer::EventData::StreamEnd) {
            return Ok(events);
        }
    }
}

fn yaml_rust2_tree(text: &str) -> anyhow::Result<usize> {
    Ok(yaml_rust2::YamlLoader::load_from_str(text)?.len())
}

fn serde_yaml_ng_tree(text: &str) -> anyhow::Result<usize> {
    let mut docs = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        Value::deserialize(doc)?;
        docs += 1;
    }
    Ok(docs)
}

fn serde_norway_tree(text: &str) -> anyhow::Result<usize> {
    let mut docs = 0;
    for doc in serde_norway::Deserializer::from_str(text) {
        Value::deserialize(doc)?;
        docs += 1;
    }
    Ok(docs)
}

fn serde_json_tree(text: &str) -> anyhow::Result<usize> {
    let value: Value = serde_json::from_str(text)?;
    Ok(value.get("items").and_then(Value::as_array).map_or(1, Vec::len))
}
