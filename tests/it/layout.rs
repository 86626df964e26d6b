//! The layering of `src/` as rules over who imports whom (`ARCHITECTURE.md`, "Who imports
//! whom"), between top-level modules: `proxy` for `src/proxy.rs` and everything under
//! `src/proxy/`. It reads the files rather than asking the compiler: a module's imports
//! are the `crate::NAME` paths in its files (and `super::` paths that climb to the crate
//! root), outside comments and test code. Tests may reach anything: a module's tests may
//! start a whole holdfast.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// One import of a module by another, as the rules name them.
#[derive(Debug, Clone, Copy)]
struct Import {
    from: &'static str,
    to: &'static str,
}

/// Imports that break a rule while they are being removed, each with a line saying why
/// it is there. None now: the last two, `http2 -> proxy` and `http1 -> http2`, went when
/// HTTP/2 serving moved to `client/h2` and both codecs took one head model (`message`).
/// The rules and the cycle check leave them out; one that is gone must leave the list.
const TOLERATED: &[Import] = &[];

/// What an operator runs: it starts and asks the instance, nothing calls back into it.
const COMMANDS: &str = "cmd";
/// Protocol syntax: parse, framing, encode; no I/O, no proxy logic.
const SYNTAX: &[&str] = &["http1", "http2"];
/// What the syntax modules serve and must not know.
const ABOVE_SYNTAX: &[&str] = &["proxy", "client", "upstream", "instance", "listener", "cmd"];

#[test]
fn no_module_imports_the_commands() {
    let graph = Graph::read();
    graph.assert_modules_exist(&[COMMANDS]);
    let offenders: Vec<String> = graph
        .modules
        .iter()
        .filter(|m| m.as_str() != COMMANDS)
        .flat_map(|m| graph.breaches(m, &[COMMANDS]))
        .collect();
    assert!(
        offenders.is_empty(),
        "only main.rs and lib.rs may name `cmd`:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn syntax_modules_import_nothing_of_the_request_path() {
    let graph = Graph::read();
    graph.assert_modules_exist(SYNTAX);
    graph.assert_modules_exist(ABOVE_SYNTAX);
    let offenders: Vec<String> =
        SYNTAX.iter().flat_map(|m| graph.breaches(m, ABOVE_SYNTAX)).collect();
    assert!(
        offenders.is_empty(),
        "syntax modules import the request path:\n{}",
        offenders.join("\n")
    );
}

#[test]
fn tls_does_not_import_upstream() {
    let graph = Graph::read();
    graph.assert_modules_exist(&["tls", "upstream"]);
    let offenders = graph.breaches("tls", &["upstream"]);
    assert!(offenders.is_empty(), "tls imports upstream:\n{}", offenders.join("\n"));
}

#[test]
fn module_imports_have_no_cycle() {
    let graph = Graph::read();
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "the imports between top-level modules have cycles (not counting TOLERATED ones):\n{}\n\
         \nall imports:\n{}",
        cycles.join("\n"),
        graph.describe(),
    );
}

#[test]
fn tolerated_imports_still_exist() {
    let graph = Graph::read();
    let gone: Vec<String> = TOLERATED
        .iter()
        .filter(|i| graph.files(i.from, i.to).is_none())
        .map(|i| format!("{} -> {}", i.from, i.to))
        .collect();
    assert!(gone.is_empty(), "no longer imported; remove from TOLERATED: {}", gone.join(", "));
}

/// Who imports whom among the top-level modules of `src/`.
struct Graph {
    modules: BTreeSet<String>,
    /// Importing module -> imported module -> the files (relative to `src/`) naming it.
    imports: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
}

impl Graph {
    /// Reads every `.rs` file under `src/`.
    fn read() -> Graph {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let files = rust_files(&src);
        let modules = top_level_modules(&src);
        let tests = test_code(&files);
        let mut imports: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for file in &files {
            let rel = file.strip_prefix(&src).expect("under src");
            let Some(from) = top_module(rel) else { continue };
            if tests.iter().any(|t| file.starts_with(t)) {
                continue;
            }
            let text = fs::read_to_string(file).expect("read a source file");
            let code = without_comments_and_tests(&text);
            for to in named_modules(&code, module_depth(rel)) {
                if to != from && modules.contains(&to) {
                    let files = imports.entry(from.clone()).or_default().entry(to).or_default();
                    files.insert(rel.display().to_string());
                }
            }
        }
        Graph { modules, imports }
    }

    /// Fails when a rule names a module `src/` no longer has (renamed or merged), so
    /// that the rule does not quietly stop applying.
    fn assert_modules_exist(&self, names: &[&str]) {
        for name in names {
            assert!(
                self.modules.contains(*name),
                "a rule names `{name}`, which src/ does not have"
            );
        }
    }

    /// The files of `from` that name `to`.
    fn files(&self, from: &str, to: &str) -> Option<&BTreeSet<String>> {
        self.imports.get(from)?.get(to)
    }

    /// The imports of `from` of any of `forbidden`, as lines naming the files, apart
    /// from tolerated ones.
    fn breaches(&self, from: &str, forbidden: &[&str]) -> Vec<String> {
        forbidden
            .iter()
            .filter(|to| !is_tolerated(from, to))
            .filter_map(|to| {
                let files = self.files(from, to)?;
                Some(format!(
                    "{from} -> {to}: {}",
                    files.iter().cloned().collect::<Vec<_>>().join(", ")
                ))
            })
            .collect()
    }

    /// The imports to follow for cycles: all but the tolerated ones.
    fn next(&self, from: &str) -> Vec<&str> {
        let Some(to) = self.imports.get(from) else { return Vec::new() };
        to.keys().map(String::as_str).filter(|to| !is_tolerated(from, to)).collect()
    }

    /// The cycles, as `a -> b -> a` with the files of each import: for each group of
    /// modules that reach each other (a strongly connected component), the shortest
    /// cycle through each module that no cycle listed before passes through.
    fn cycles(&self) -> Vec<String> {
        let mut cycles = Vec::new();
        for component in self.components().into_iter().filter(|c| c.len() > 1) {
            let members = component.iter().cloned().collect::<Vec<_>>().join(", ");
            cycles.push(format!("modules that import each other: {members}"));
            let mut covered = BTreeSet::new();
            for start in &component {
                if covered.contains(start) {
                    continue;
                }
                let path = self.cycle_through(start, &component);
                covered.extend(path.iter().cloned());
                cycles.push(format!("  {}", path.join(" -> ")));
                for step in path.windows(2) {
                    let files = self.files(&step[0], &step[1]).expect("an import on the path");
                    let files: Vec<&str> = files.iter().map(String::as_str).collect();
                    cycles.push(format!("    {} -> {}: {}", step[0], step[1], files.join(", ")));
                }
            }
        }
        cycles
    }

    /// Strongly connected components (Tarjan's algorithm; the graph has a few dozen
    /// modules, so recursion is shallow).
    fn components(&self) -> Vec<BTreeSet<String>> {
        struct Walk<'g> {
            graph: &'g Graph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            found: Vec<BTreeSet<String>>,
        }
        impl<'g> Walk<'g> {
            fn visit(&mut self, v: &'g str) {
                let i = self.index.len();
                self.index.insert(v, i);
                self.low.insert(v, i);
                self.stack.push(v);
                for w in self.graph.next(v) {
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let low = self.low[v].min(self.low[w]);
                        self.low.insert(v, low);
                    } else if self.stack.contains(&w) {
                        let low = self.low[v].min(self.index[w]);
                        self.low.insert(v, low);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut component = BTreeSet::new();
                    while let Some(w) = self.stack.pop() {
                        component.insert(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    self.found.push(component);
                }
            }
        }
        let mut walk = Walk {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            found: Vec::new(),
        };
        for m in &self.modules {
            if !walk.index.contains_key(m.as_str()) {
                walk.visit(m);
            }
        }
        walk.found
    }

    /// The shortest way from `start` back to it, within its component.
    fn cycle_through(&self, start: &str, component: &BTreeSet<String>) -> Vec<String> {
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(v) = queue.pop_front() {
            for w in self.next(v) {
                if !component.contains(w) {
                    continue;
                }
                if w == start {
                    // Back from `v` to `start` (which has no entry), then round to it.
                    let mut path = vec![v.to_string()];
                    let mut at = v;
                    while let Some(before) = came_from.get(at) {
                        path.push(before.to_string());
                        at = before;
                    }
                    path.reverse();
                    path.push(start.to_string());
                    return path;
                }
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        unreachable!("a strongly connected component has a cycle through each of its modules")
    }

    /// Every import, one importing module a line.
    fn describe(&self) -> String {
        self.imports
            .iter()
            .map(|(from, to)| {
                format!("  {from} -> {}", to.keys().cloned().collect::<Vec<_>>().join(", "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn is_tolerated(from: &str, to: &str) -> bool {
    TOLERATED.iter().any(|i| i.from == from && i.to == to)
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The crate root's modules: `src/NAME.rs` and `src/NAME/`.
fn top_level_modules(src: &Path) -> BTreeSet<String> {
    fs::read_dir(src)
        .expect("read src/")
        .map(|entry| entry.expect("a folder entry").path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_string();
            let is_module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
            (is_module && name != "lib" && name != "main").then_some(name)
        })
        .collect()
}

/// The top-level module a file belongs to; `None` for the crate root (lib.rs, main.rs).
fn top_module(rel: &Path) -> Option<String> {
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?;
    if parts.next().is_some() {
        return Some(first.to_string());
    }
    let stem = first.strip_suffix(".rs")?;
    (stem != "lib" && stem != "main").then(|| stem.to_string())
}

/// How many modules deep a file's module is: `proxy.rs` and `proxy/mod.rs` are 1,
/// `proxy/h1.rs` is 2. `super::` climbs one.
fn module_depth(rel: &Path) -> usize {
    let parts = rel.components().count();
    if rel.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

/// The folder a file's child modules live in: `a/mod.rs` -> `a/`, `a/b.rs` -> `a/b/`.
fn child_dir(file: &Path) -> PathBuf {
    let parent = file.parent().expect("a file in a folder");
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
        None => parent.to_path_buf(),
    }
}

/// The files and folders of modules declared under `#[cfg(test)]` (`mod tests;`): their
/// file and everything below them.
fn test_code(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut tests = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).expect("read a source file");
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let item = lines.by_ref().find(|l| !l.starts_with("#[") && !l.starts_with("//"));
            let Some(name) = item.and_then(declared_module) else { continue };
            let dir = child_dir(file);
            tests.push(dir.join(format!("{name}.rs")));
            tests.push(dir.join(name));
        }
    }
    tests
}

/// `NAME` of `mod NAME;` (with any visibility); `None` for other items and inline modules.
fn declared_module(line: &str) -> Option<&str> {
    let rest = line.strip_suffix(';')?;
    let (_, name) = rest.split_once("mod ")?;
    let is_name = !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    is_name.then_some(name)
}

/// The code of a file without comment lines and without items under `#[cfg(test)]`.
/// rustfmt's layout finds an item's end: the first later line at the item's indentation
/// that closes it.
fn without_comments_and_tests(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            skip_item(&mut lines);
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Consumes the item that follows an attribute: its other attributes, its first line and,
/// unless that line ends it, the lines to its closing one.
fn skip_item<'a>(lines: &mut impl Iterator<Item = &'a str>) {
    let Some(first) = lines.find(|l| {
        let t = l.trim_start();
        !t.starts_with("#[") && !t.starts_with("//")
    }) else {
        return;
    };
    let ends = |l: &str| l.trim_end().ends_with(';') || l.trim_end().ends_with('}');
    let opens = first.matches(['{', '(', '[']).count();
    let closes = first.matches(['}', ')', ']']).count();
    if ends(first) && opens == closes {
        return;
    }
    let indent = indentation(first);
    for line in lines {
        let t = line.trim_start();
        if indentation(line) == indent && t.starts_with(['}', ')', ']']) && ends(line) {
            return;
        }
    }
}

fn indentation(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The top-level modules `code` names: `crate::NAME`, `crate::{NAME, ..}`, and `NAME`
/// after as many `super::` as the file is deep.
fn named_modules(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if starts_path(code, at) {
            names.extend(path_heads(&code[at + "crate::".len()..]));
        }
    }
    for (at, _) in code.match_indices("super::") {
        if !starts_path(code, at) || code[..at].ends_with("::") {
            continue;
        }
        let mut rest = &code[at..];
        let mut climbs = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            rest = r;
            climbs += 1;
        }
        if climbs >= depth {
            names.extend(path_heads(rest));
        }
    }
    names
}

/// Whether a path keyword at `at` starts a path rather than ending a longer name
/// (`$crate::` counts: a macro's path to the crate).
fn starts_path(code: &str, at: usize) -> bool {
    !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
}

/// The first segment of a path (`name::..`), or of each path in a group (`{a, b::c}`).
fn path_heads(rest: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
    };
    let Some(group) = rest.strip_prefix('{') else { return vec![ident(rest)] };
    let mut heads = vec![ident(group)];
    let mut depth = 1;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => heads.push(ident(&group[i + 1..])),
            _ => {}
        }
    }
    heads.retain(|h| !h.is_empty());
    heads
}
