//! `include`: the files a config file takes in. Each pattern is a glob relative to the
//! directory of the file that names it; the files it matches are read in name order,
//! each once however many patterns match it, and may include others in turn. What an
//! included file may hold is `FileIncluded`: groups, routes and certificates.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::file::FileIncluded;
use super::read::{self, Read};
use super::{line_of, ConfigProblem};

/// Files taken in by one config, all told: a bound on the work for a pattern that
/// matches far more than anyone meant.
const MAX_FILES: usize = 10_000;

/// One included file: where it is, its text, what reading it found and the problems
/// found in it so far.
pub(super) struct Source {
    pub path: PathBuf,
    pub text: String,
    pub read: Read<FileIncluded>,
}

impl Source {
    /// The directory its relative paths start from.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }
}

/// The patterns of an `include` key as written, with the text they are written in
/// (for the lines of problems) and where problems with them go.
pub(super) struct Including<'a> {
    pub patterns: &'a Spanned<Vec<Spanned<String>>>,
    pub dir: &'a Path,
    pub text: &'a str,
}

/// Every file `main` (the file at `main_path`) takes in, directly or through the files
/// it includes, in the order their upstreams and routes count: each file's matches in
/// pattern order, then what those include. Problems with `main`'s own patterns go to
/// `problems`; those of an included file's, to that file.
pub(super) fn gather(
    main_path: &Path,
    main: Option<Including<'_>>,
    problems: &mut Vec<ConfigProblem>,
) -> Vec<Source> {
    let mut seen = HashSet::from([identity(main_path)]);
    let mut out = Vec::new();
    if let Some(main) = main {
        expand(&main, problems, &mut seen, &mut out);
    }
    let mut i = 0;
    while let Some(Source { path, text, read }) = out.get_mut(i) {
        if let Some(patterns) = read.file.as_mut().and_then(|f| f.include.take()) {
            let dir = path.parent().unwrap_or(Path::new(""));
            let including = Including { patterns: &patterns, dir, text };
            let mut found = Vec::new();
            expand(&including, &mut read.problems, &mut seen, &mut found);
            out.extend(found);
        }
        i += 1;
    }
    out
}

/// The file's canonical path where it has one, so that two spellings of one file are
/// read once.
fn identity(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Reads the files `including`'s patterns match into `out`, skipping those `seen`.
fn expand(
    including: &Including<'_>,
    problems: &mut Vec<ConfigProblem>,
    seen: &mut HashSet<PathBuf>,
    out: &mut Vec<Source>,
) {
    let problem = |span: std::ops::Range<usize>, message: String| ConfigProblem {
        line: Some(line_of(including.text, span.start)),
        key: "include".into(),
        message,
    };
    for pattern in including.patterns.get_ref() {
        let paths = match matches(including.dir, pattern.get_ref()) {
            Ok(paths) => paths,
            Err(message) => {
                problems.push(problem(pattern.span(), message));
                continue;
            }
        };
        for path in paths {
            if !seen.insert(identity(&path)) {
                continue;
            }
            if seen.len() > MAX_FILES {
                let message = format!("more than {MAX_FILES} files included; stopped there");
                problems.push(problem(pattern.span(), message));
                return;
            }
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let read = read::read::<FileIncluded>(&text);
                    out.push(Source { path, text, read });
                }
                Err(e) => {
                    let message = format!("{}: {e}", path.display());
                    problems.push(problem(pattern.span(), message));
                }
            }
        }
    }
}

/// The files `pattern` names from `dir`, in name order. A pattern without wildcards
/// names one file, which must exist; one with them may match none (no app yet).
fn matches(dir: &Path, pattern: &str) -> Result<Vec<PathBuf>, String> {
    if pattern.trim().is_empty() {
        return Err("is empty: use a file name or a pattern such as \"apps/*.toml\"".into());
    }
    let full = dir.join(pattern);
    let text = full.to_str().ok_or_else(|| format!("{pattern:?} is not valid UTF-8"))?;
    let walk = glob::glob(text).map_err(|e| format!("{pattern:?} is not a pattern: {e}"))?;
    let mut paths = Vec::new();
    for entry in walk {
        let path = entry.map_err(|e| e.to_string())?;
        if path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let wildcard = pattern.contains(['*', '?', '[']);
    if paths.is_empty() && !wildcard {
        return Err(format!("{} does not exist", full.display()));
    }
    Ok(paths)
}
