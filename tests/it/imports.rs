//! The code's structure, drawn from its imports: no two modules import each other, directly or
//! round a longer circle. A module and the modules inside it (a parent's `mod.rs` and its
//! children) are one room and may use each other; everything else must form a tree of
//! dependencies, in the core (`core/src`) and in the shell (`src`) alike.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path below its crate root: `["compile", "trainer", "torch"]`.
type Module = Vec<String>;

/// Every module of the crate whose sources are under `root`, with the text of its file.
fn modules(root: &Path) -> BTreeMap<Module, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path: PathBuf = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(root).expect("below the root");
            let mut module: Module = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module
                .last()
                .is_some_and(|m| m == "mod" || m == "lib" || m == "main")
            {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file");
            found.insert(module, text);
        }
    }
    found
}

/// The paths a file imports, as written after `use ` (one per leaf of a `{...}` group), up to
/// its first test module.
fn imports(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(start) = rest.find("\nuse ").or_else(|| rest.find("\npub use ")) {
        let after = &rest[start..];
        let body_start = after.find("use ").map_or(0, |i| i + 4);
        let end = after.find(';').unwrap_or(after.len());
        expand("", &after[body_start..end], &mut paths);
        rest = &after[end..];
    }
    paths
}

/// Expands `a::{b, c::{d}}` into `a::b`, `a::c::d` (prefixed with `prefix`).
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree: String = tree.replace(" as ", "@").split_whitespace().collect();
    match tree.find('{') {
        None => {
            let path = tree.split('@').next().unwrap_or_default();
            out.push(format!("{prefix}{path}"));
        }
        Some(open) => {
            let (head, group) = tree.split_at(open);
            let inner = &group[1..group.len().saturating_sub(1)];
            let mut depth = 0;
            let mut item = String::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&format!("{prefix}{head}"), &item, out);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            if !item.is_empty() {
                expand(&format!("{prefix}{head}"), &item, out);
            }
        }
    }
}

/// The module an import inside `from` names: the longest module that starts the path.
fn target(from: &Module, path: &str, known: &BTreeMap<Module, String>) -> Option<Module> {
    let mut parts = path.split("::").map(str::to_owned).peekable();
    let mut module: Module = match parts.peek().map(String::as_str) {
        Some("crate") => {
            parts.next();
            Vec::new()
        }
        Some("super") => {
            let mut base = from.clone();
            while parts.peek().is_some_and(|p| p == "super") {
                parts.next();
                base.pop();
            }
            base
        }
        Some("self") => {
            parts.next();
            from.clone()
        }
        _ => return None,
    };
    let mut longest = None;
    for part in parts {
        module.push(part);
        if known.contains_key(&module) {
            longest = Some(module.clone());
        }
    }
    longest
}

/// Whether one module is the other or inside it.
fn nested(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The circles among the modules of the crate at `root`, each as the modules it passes.
fn circles(root: &Path) -> Vec<Vec<Module>> {
    let known = modules(root);
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, text) in &known {
        for path in imports(text) {
            if let Some(to) = target(module, &path, &known).filter(|to| !nested(module, to)) {
                edges.entry(module.clone()).or_default().insert(to);
            }
        }
    }
    // A depth-first search that reports each back edge's circle.
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for start in known.keys() {
        let mut path: Vec<Module> = Vec::new();
        visit(start, &edges, &mut path, &mut done, &mut found);
    }
    found
}

fn visit(
    module: &Module,
    edges: &BTreeMap<Module, BTreeSet<Module>>,
    path: &mut Vec<Module>,
    done: &mut BTreeSet<Module>,
    found: &mut Vec<Vec<Module>>,
) {
    if let Some(at) = path.iter().position(|m| m == module) {
        found.push(path[at..].to_vec());
        return;
    }
    if done.contains(module) {
        return;
    }
    path.push(module.clone());
    for next in edges.get(module).into_iter().flatten() {
        visit(next, edges, path, done, found);
    }
    path.pop();
    done.insert(module.clone());
}

#[test]
fn neither_crate_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for crate_root in ["core/src", "src"] {
        let found = circles(&root.join(crate_root));
        let named: Vec<String> = found
            .iter()
            .map(|circle| {
                circle
                    .iter()
                    .map(|m| m.join("::"))
                    .collect::<Vec<_>>()
                    .join(" -> ")
            })
            .collect();
        assert!(named.is_empty(), "{crate_root}: import circles: {named:#?}");
    }
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let known: BTreeMap<Module, String> = [
        (vec!["a".to_owned()], String::new()),
        (vec!["b".to_owned()], String::new()),
    ]
    .into();
    assert_eq!(
        target(&vec!["a".to_owned()], "crate::b::Thing", &known),
        Some(vec!["b".to_owned()])
    );
    let mut paths = Vec::new();
    expand("", "crate::{a::X, b::{Y, Z as W}}", &mut paths);
    assert_eq!(paths, ["crate::a::X", "crate::b::Y", "crate::b::Z"]);
    let dir = std::env::temp_dir().join(format!("trainset-imports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\n").expect("lib.rs");
    std::fs::write(dir.join("a.rs"), "\nuse crate::b::Y;\n").expect("a.rs");
    std::fs::write(dir.join("b.rs"), "\nuse crate::a::X;\n").expect("b.rs");
    let found = circles(&dir);
    std::fs::remove_dir_all(&dir).expect("removing the temp dir");
    assert_eq!(found.len(), 1, "{found:?}");
}
