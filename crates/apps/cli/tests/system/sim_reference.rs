//! The simulator's results do not change under refactoring: every
//! configuration in tests/reference/sim_modes.json (each mode and design,
//! recorded by scripts/sim_reference.py from an earlier build) runs through
//! the current binary and must print the same JSON, key by key (only the
//! trace path, which depends on the machine, is left out). Skips with a
//! message when the shared traces are absent.

use crate::common;

use serde_json::Value;
use std::path::PathBuf;

/// The keys where `a` and `b` differ, as paths.
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                differences(va, vb, &format!("{at}.{k}"), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(va, vb, &format!("{at}[{i}]"), out);
            }
        }
        _ if a != b => out.push(format!("{at}: reference {a}, now {b}")),
        _ => {}
    }
}

#[test]
fn every_mode_prints_the_recorded_results() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/reference/sim_modes.json")).expect("reference"),
    )
    .expect("reference JSON");
    let traces = root.join("../shared/traces");
    let runs = reference["runs"].as_array().expect("runs");
    assert!(runs.len() >= 15, "the reference covers every mode");
    let mut failures = Vec::new();
    for r in runs {
        let name = r["name"].as_str().unwrap();
        let trace = traces.join(r["trace"].as_str().unwrap());
        if !trace.exists() {
            eprintln!("skipped {name}: {} is absent", trace.display());
            continue;
        }
        let mut args = vec![
            "sim".to_string(),
            "--trace".into(),
            trace.display().to_string(),
        ];
        args.extend(
            r["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string()),
        );
        args.push("--json".into());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut now: Value = serde_json::from_str(&common::tiercache(&argv)).expect("sim --json");
        now.as_object_mut().unwrap().remove("trace");
        let mut d = Vec::new();
        differences(&r["json"], &now, name, &mut d);
        failures.extend(d);
    }
    assert!(
        failures.is_empty(),
        "results differ from tests/reference/sim_modes.json (recorded at commit {}):\n{}",
        reference["commit"],
        failures.join("\n")
    );
}
