// The layering of `src/`, read from the source, no Redis needed: no two files
// import each other in a ring, no file imports a layer above its own, one module
// style, and few files at the root. Each folder of `src/` is a layer; `LAYERS`
// lists them bottom to top.
//
// A file's imports are the paths it names through `crate::`, `super::` and
// `self::` (in a `use` or in code), resolved to the deepest file that exists;
// line comments and doc comments do not count. A module naming its own
// descendants (`mod.rs` re-exporting its children) is no dependency, so the
// idiomatic `mod.rs` + `use super::Trait` pair is no circle, while siblings that
// import each other in a ring are.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, bottom to top; a file may import from its own
/// layer or any below. Modules on one line share a layer.
const LAYERS: &[&[&str]] = &[
    // root leaves: clocks and TTL bounds, counters, the formats a key can hold,
    // what the doctor finds
    &["time", "metrics", "format", "finding"],
    // an error names an owner (a latch participant gone: its session record);
    // owner/ reads records and imports no other layer
    &["error", "owner"],
    &["net"],
    &["scheme"],
    // a held lease's shared state: it names the scheme that renews it
    &["lease"],
    &["topology"],
    &["threads"],
    &["client"],
    &["primitives"],
    // the guide: markdown chapters as module docs, no code
    &["guide"],
];

/// At most this many `.rs` files sit directly in `src/`.
const ROOT_FILES: usize = 8;

/// One file of the library: where it is, and its text without comments.
struct File {
    path: PathBuf,
    text: String,
}

/// The library's files by module path, `src/bin/` left out (the CLI is a crate of
/// its own).
fn library(src: &Path) -> BTreeMap<String, File> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path != src.join("bin") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = strip_line_comments(&fs::read_to_string(&path).unwrap());
                files.insert(module_of(src, &path), File { path, text });
            }
        }
    }
    files
}

/// `a/b/mod.rs` and `a/b.rs` are module `a/b`; `lib.rs` is the root, the empty path.
fn module_of(src: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") || parts == ["lib"] {
        parts.pop();
    }
    parts.join("/")
}

/// The text with every `//` to the end of its line removed, so that prose (doc
/// comments included) names no module.
fn strip_line_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_lowercase() || c == b'_'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'
}

/// A lower-case identifier (a module name) at `at`, if any.
fn ident_at(bytes: &[u8], at: usize) -> Option<usize> {
    if at < bytes.len() && is_ident_start(bytes[at]) {
        let mut end = at + 1;
        while end < bytes.len() && is_ident(bytes[end]) {
            end += 1;
        }
        Some(end)
    } else {
        None
    }
}

/// The index of the `}` that closes the `{` just before `from`.
fn closing_brace(text: &str, from: usize) -> usize {
    let mut depth = 0;
    for (i, c) in text[from..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return from + i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// The paths of a `use` group's items (`a::B, c::{self, d}`), each as the module
/// names it starts with.
fn group_items(group: &str) -> Vec<Vec<String>> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices().chain([(group.len(), ',')]) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for item in items.into_iter().filter(|i| !i.is_empty()) {
        let item = item.split(" as ").next().unwrap_or_default();
        if let Some(open) = item.find("::{") {
            let head = lower_segments(&item[..open]);
            let inner = &item[open + 3..closing_brace(item, open + 3)];
            for tail in group_items(inner) {
                out.push(head.iter().cloned().chain(tail).collect());
            }
        } else {
            out.push(lower_segments(item));
        }
    }
    out
}

/// The leading module names of a path (`x::y::Z` gives `x`, `y`).
fn lower_segments(path: &str) -> Vec<String> {
    path.split("::")
        .map(str::trim)
        .take_while(|n| !n.is_empty() && ident_at(n.as_bytes(), 0) == Some(n.len()))
        .map(str::to_owned)
        .collect()
}

/// Every path the text names from `crate`, `super` or `self`, as its segments;
/// a `{…}` group after a path gives one path per item as well.
fn paths(text: &str) -> Vec<Vec<String>> {
    let bytes = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let head = ["crate", "super", "self"].into_iter().find(|h| {
            text[at..].starts_with(h)
                && (at == 0 || !word(bytes[at - 1]))
                && !bytes.get(at + h.len()).is_some_and(|&c| word(c))
        });
        let Some(head) = head else {
            at += 1;
            continue;
        };
        let mut parts = vec![head.to_owned()];
        let mut end = at + head.len();
        while text[end..].starts_with("::") {
            if let Some(stop) = ident_at(bytes, end + 2) {
                parts.push(text[end + 2..stop].to_owned());
                end = stop;
            } else {
                if bytes.get(end + 2) == Some(&b'{') {
                    let close = closing_brace(text, end + 3);
                    for tail in group_items(&text[end + 3..close]) {
                        out.push(parts.iter().cloned().chain(tail).collect());
                    }
                    end = close;
                }
                break;
            }
        }
        out.push(parts);
        at = end.max(at + 1);
    }
    out
}

/// The deepest file a path from module `from` names.
fn resolve(from: &str, parts: &[String], modules: &BTreeSet<&str>) -> String {
    let mut base: Vec<&str> = if parts[0] == "crate" || from.is_empty() {
        Vec::new()
    } else {
        from.split('/').collect()
    };
    if parts[0] == "super" {
        base.pop();
    }
    let mut rest = &parts[1..];
    while rest.first().is_some_and(|p| p == "super") {
        base.pop();
        rest = &rest[1..];
    }
    for name in rest {
        let mut next = base.clone();
        next.push(name);
        if modules.contains(next.join("/").as_str()) {
            base = next;
        } else {
            break;
        }
    }
    base.join("/")
}

/// File → the files it imports.
fn imports(files: &BTreeMap<String, File>) -> BTreeMap<&str, BTreeSet<String>> {
    let modules: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    let mut edges = BTreeMap::new();
    for (from, file) in files {
        let to: &mut BTreeSet<String> = edges.entry(from.as_str()).or_default();
        for parts in paths(&file.text) {
            let target = resolve(from, &parts, &modules);
            let own = from.is_empty() || format!("{target}/").starts_with(&format!("{from}/"));
            if !target.is_empty() && !own {
                to.insert(target);
            }
        }
    }
    edges
}

/// The strongly connected components of more than one file (Tarjan's, iterative
/// enough for a crate: the recursion is as deep as the longest import chain).
fn circles(edges: &BTreeMap<&str, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<&'a str, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.edges[v] {
                let Some((&w, _)) = self.edges.get_key_value(w.as_str()) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layer of a module: the position of its top-level module in `LAYERS`.
fn layer_of(module: &str) -> Option<usize> {
    let top = module.split('/').next().unwrap_or_default();
    LAYERS.iter().position(|layer| layer.contains(&top))
}

fn shown(files: &BTreeMap<String, File>, module: &str) -> String {
    let path = &files[module].path;
    path.strip_prefix(src().parent().unwrap())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_two_files_of_src_import_each_other_in_a_ring() {
    let files = library(&src());
    let files = &files;
    let edges = imports(files);
    let found: Vec<String> = circles(&edges)
        .iter()
        .map(|ring| {
            let inside: Vec<String> = ring
                .iter()
                .flat_map(|a| {
                    edges[a.as_str()]
                        .iter()
                        .filter(|b| ring.contains(b))
                        .map(move |b| format!("{} -> {}", shown(files, a), shown(files, b)))
                })
                .collect();
            format!("circle of {} files: {}", ring.len(), inside.join(", "))
        })
        .collect();
    let n_edges: usize = edges.values().map(BTreeSet::len).sum();
    assert!(
        found.is_empty(),
        "{} files, {n_edges} imports between them, and import circles:\n{}",
        files.len(),
        found.join("\n")
    );
    // The graph is not empty: the reader found the imports it checks.
    assert!(
        files.len() > 50 && n_edges > 200,
        "{} files, {n_edges} imports",
        files.len()
    );
}

#[test]
fn no_file_of_src_imports_a_layer_above_its_own() {
    let files = library(&src());
    let mut wrong = Vec::new();
    for (from, to) in imports(&files) {
        if from.is_empty() {
            continue; // lib.rs: `mod` and `pub use` of every layer
        }
        let Some(own) = layer_of(from) else {
            wrong.push(format!(
                "{}: its folder is in no layer of LAYERS",
                shown(&files, from)
            ));
            continue;
        };
        for target in &to {
            let Some(theirs) = layer_of(target) else {
                continue; // reported as the target's own file
            };
            if theirs > own {
                wrong.push(format!(
                    "{} (layer {:?}) imports {} (layer {:?}, above it)",
                    shown(&files, from),
                    LAYERS[own],
                    shown(&files, target),
                    LAYERS[theirs]
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "upward imports:\n{}", wrong.join("\n"));
}

#[test]
fn every_module_uses_mod_rs_and_no_file_sits_beside_a_folder_of_its_name() {
    let mut dirs = vec![src()];
    let mut wrong = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.with_extension("rs").exists() {
                    wrong.push(format!(
                        "{} beside {}/: the folder's module is its mod.rs",
                        path.with_extension("rs").display(),
                        path.display()
                    ));
                }
                dirs.push(path);
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn at_most_eight_files_sit_directly_in_src() {
    let root: Vec<String> = fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        root.len() <= ROOT_FILES,
        "{} files in src/: {root:?}",
        root.len()
    );
}

#[test]
fn the_reader_finds_a_ring_between_two_sibling_files() {
    // Proof that the check can fail: `a/x` and `a/y` import each other, while the
    // parent's re-export of its children and a child's `use super::` form no ring.
    let file = |text: &str| File {
        path: PathBuf::from("synthetic.rs"),
        text: strip_line_comments(text),
    };
    let files: BTreeMap<String, File> = [
        (
            "a",
            file("mod x;\nmod y;\npub use x::X;\npub(crate) use self::y::Y;\n"),
        ),
        ("a/x", file("use super::y::Y;\nuse super::Trait;\n")),
        (
            "a/y",
            file("use crate::a::{x::{self}, Trait};\n// crate::b in prose\n"),
        ),
        ("b", file("use crate::a::{x::X, y};\n")),
    ]
    .into_iter()
    .map(|(m, f)| (m.to_owned(), f))
    .collect();
    let edges = imports(&files);
    assert_eq!(edges["a"], BTreeSet::new());
    assert_eq!(
        edges["a/x"],
        BTreeSet::from(["a", "a/y"].map(str::to_owned))
    );
    assert_eq!(
        edges["a/y"],
        BTreeSet::from(["a", "a/x"].map(str::to_owned))
    );
    assert_eq!(
        edges["b"],
        BTreeSet::from(["a", "a/x", "a/y"].map(str::to_owned))
    );
    assert_eq!(
        circles(&edges),
        vec![vec!["a/x".to_owned(), "a/y".to_owned()]]
    );
}

#[test]
fn every_folder_module_doc_maps_its_files_in_a_layout_paragraph() {
    let mut dirs = vec![src()];
    let mut wrong = Vec::new();
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<String> = Vec::new();
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                dirs.push(path);
                entries.push(format!("{name}/"));
            } else if path.extension().is_some_and(|e| e == "rs") && name != "mod.rs" {
                entries.push(name);
            }
        }
        let module = dir.join("mod.rs");
        if dir == src() || dir.ends_with("bin") || !module.exists() || entries.is_empty() {
            continue; // the root's map is lib.rs; a lone mod.rs has nothing to map
        }
        let text = fs::read_to_string(&module).unwrap();
        let doc: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join(" ");
        let Some(layout) = doc.split("Layout:").nth(1) else {
            wrong.push(format!("{}: no \"Layout:\" paragraph", module.display()));
            continue;
        };
        for entry in entries {
            if !layout.contains(&format!("`{entry}")) {
                wrong.push(format!(
                    "{}: its Layout names no `{entry}`",
                    module.display()
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
