//! The engine's modules form layers with no way back (issue 17):
//!
//! ```text
//! index   (text, vectors: access paths over their own structures)
//!   <- storage (WAL, records, state, branch pipeline)
//!     <- query (planning, ranking, fusion, paging)
//!       <- engine (branches, catalog, the public API)
//! ```
//!
//! Shared leaves (error, schema, names, model, faults, fsutil) may be used
//! by any layer. Within a layer, no two modules import each other, through
//! any chain (`storage/pipeline.rs` holds what the branch and its threads
//! share, so neither names the other). These tests read the sources and fail
//! on a `crate::` path that points up a layer or closes a circle, so an
//! import circle cannot come back unnoticed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Each layer and the modules it must not name.
const RULES: &[(&str, &[&str])] = &[
    ("index", &["storage", "query", "engine", "doctor"]),
    ("storage", &["query", "engine", "doctor"]),
    ("query", &["engine", "doctor"]),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a line names: `crate::a::...`, `crate::{a, b::c}`.
fn crate_modules(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let first = item.trim().split("::").next().unwrap_or("");
                out.push(first.trim().to_string());
            }
        } else {
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn no_module_names_a_layer_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for (layer, forbidden) in RULES {
        let mut files = Vec::new();
        sources(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "no sources under src/{layer}");
        for file in files {
            let text = fs::read_to_string(&file).expect("read source");
            // comments out, lines joined: a `use crate::{...}` group may span lines
            let code: Vec<&str> = text.lines().map(|line| line.split("//").next().unwrap_or("")).collect();
            for named in crate_modules(&code.join(" ")) {
                if forbidden.contains(&named.as_str()) {
                    found.push(format!("{}: {layer} names crate::{named}", file.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "imports up the layers:\n{}", found.join("\n"));
}

/// The crate paths a file names, each as its segments: `crate::a::b::C`,
/// `crate::a::{b, c::D}`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
        let base: Vec<String> = rest[..end].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
        if rest[end..].starts_with('{') {
            let group = &rest[end + 1..];
            let close = group.find('}').unwrap_or(group.len());
            for item in group[..close].split(',') {
                let mut path = base.clone();
                path.extend(item.trim().split("::").filter(|s| !s.is_empty()).map(str::to_string));
                out.push(path);
            }
        } else {
            out.push(base);
        }
    }
    out
}

#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    // module path of each file: src/storage/branch.rs is storage::branch, src/storage/mod.rs is storage
    let module_of = |file: &Path| -> String {
        let rel = file.strip_prefix(&src).expect("under src").with_extension("");
        let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
        match parts.last().map(String::as_str) {
            Some("lib") => String::new(),
            Some("mod") => parts[..parts.len() - 1].join("::"),
            _ => parts.join("::"),
        }
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(file);
        let text = fs::read_to_string(file).expect("read source");
        let code: Vec<&str> = text.lines().map(|line| line.split("//").next().unwrap_or("")).collect();
        for path in crate_paths(&code.join(" ")) {
            // the longest prefix of the path that is a module
            let to = (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m));
            if let Some(to) = to {
                // a parent declares and re-exports its children: not an import back
                let child_of_from = from.is_empty() || to.starts_with(&format!("{from}::"));
                if to != from && !child_of_from {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    // depth-first search for a back edge
    let mut circles = Vec::new();
    let mut done = BTreeSet::new();
    for start in graph.keys() {
        let mut stack = vec![start.clone()];
        visit(start, &graph, &mut stack, &mut done, &mut circles);
    }
    assert!(circles.is_empty(), "import circles between engine modules:\n{}", circles.join("\n"));
}

fn visit(
    module: &str,
    graph: &BTreeMap<String, BTreeSet<String>>,
    stack: &mut Vec<String>,
    done: &mut BTreeSet<String>,
    circles: &mut Vec<String>,
) {
    if done.contains(module) {
        return;
    }
    for next in graph.get(module).into_iter().flatten() {
        if let Some(at) = stack.iter().position(|m| m == next) {
            circles.push(format!("{} -> {next}", stack[at..].join(" -> ")));
        } else if !done.contains(next) {
            stack.push(next.clone());
            visit(next, graph, stack, done, circles);
            stack.pop();
        }
    }
    done.insert(module.to_string());
}
