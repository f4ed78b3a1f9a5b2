//! The layering rule of docs/architecture.md, checked on `cargo metadata`:
//! no platform crate depends on a design, and no design on another design.
//!
//! The dependencies that still break the rule are listed in `KNOWN`, each
//! with what it is for; the test fails on any other, and on a listed one
//! that is gone (so the list only shrinks).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// (from, to): dependencies that break the rule today.
const KNOWN: &[(&str, &str, &str)] = &[(
    "tiercache-sim",
    "tiercache-azor-policy",
    "the platform's simulation driver replays through the SSD cache's engine",
)];

/// Where a workspace crate lives: "platform", "design:NAME", or "other"
/// (apps and checks, which may use anything).
fn layer(manifest: &Path, root: &Path) -> String {
    let rel = manifest.strip_prefix(root).unwrap_or(manifest);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.as_slice() {
        [c, p, ..] if c == "crates" && p == "platform" => "platform".into(),
        [c, d, name, ..] if c == "crates" && d == "designs" => format!("design:{name}"),
        _ => "other".into(),
    }
}

#[test]
fn platform_never_depends_on_a_design_nor_a_design_on_another() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let root = root.canonicalize().unwrap();
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let layer_of = |name: &str| {
        packages
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| layer(Path::new(p["manifest_path"].as_str().unwrap()), &root))
    };
    let mut broken = BTreeSet::new();
    let mut designs = BTreeSet::new();
    for p in packages {
        let name = p["name"].as_str().unwrap();
        let from = layer(Path::new(p["manifest_path"].as_str().unwrap()), &root);
        if from.starts_with("design:") {
            designs.insert(from.clone());
        }
        for d in p["dependencies"].as_array().unwrap() {
            // Normal and build dependencies; tests may reach across.
            if d["kind"] == "dev" {
                continue;
            }
            let to_name = d["name"].as_str().unwrap();
            let Some(to) = layer_of(to_name) else {
                continue;
            };
            let breaks = match (from.as_str(), to.as_str()) {
                ("platform", t) => t.starts_with("design:"),
                (f, t) if f.starts_with("design:") && t.starts_with("design:") => f != t,
                _ => false,
            };
            if breaks {
                broken.insert((name.to_string(), to_name.to_string()));
            }
        }
    }
    assert_eq!(
        designs.len(),
        4,
        "four designs under crates/designs: {designs:?}"
    );
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b, _)| (a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = broken.difference(&known).collect();
    assert!(
        new.is_empty(),
        "dependencies that break the layering rule: {new:?}"
    );
    let gone: Vec<_> = known.difference(&broken).collect();
    assert!(
        gone.is_empty(),
        "these no longer break the rule; remove them from KNOWN: {gone:?}"
    );
}
