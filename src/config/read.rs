//! Reads config text into a `FileConfig` (or an included file's `FileIncluded`),
//! stepping over unknown keys and values of the wrong type so that one run reports
//! every one of them.
//!
//! serde stops at the first such problem. Each time it does, the key its error points at
//! is looked up in the document (`toml_edit` keeps where every key and value is written),
//! reported with its line and dotted key, and blanked out of the text: its bytes become
//! spaces and its newlines stay, so every offset and line number still holds. Then the
//! text is read again. A TOML syntax error, or a required key that is missing, ends the
//! reading; the report then holds what was found up to there.

use std::ops::Range;

use toml_edit::{ImDocument, Item, Table, Value};

use super::{line_of, ConfigProblem};

/// Problems reported before reading gives up: more than any real file has, and a bound
/// on the work for one that is not (each problem costs a parse of the whole text).
const MAX_PROBLEMS: usize = 100;

/// What reading found: the file as written (without the keys that had problems), unless
/// a problem ended the reading; and every problem met.
pub(super) struct Read<T> {
    pub file: Option<T>,
    pub problems: Vec<ConfigProblem>,
    /// The dotted keys left out of `file` for their problems.
    pub blanked: Vec<String>,
}

impl<T> Read<T> {
    /// Whether a problem validation finds at `key` may come from a key left out (a
    /// listener without the `upstream` whose value had the wrong type): `key` is a
    /// blanked key or a table holding one.
    pub fn is_after_blanking(&self, key: &str) -> bool {
        self.blanked.iter().any(|b| {
            b == key || b.strip_prefix(key).is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    }
}

pub(super) fn read<T: serde::de::DeserializeOwned>(text: &str) -> Read<T> {
    let mut rest = text.to_string();
    let mut problems = Vec::new();
    // A required key among these is missing because of a problem already reported.
    let mut blanked: Vec<String> = Vec::new();
    loop {
        let error = match toml::from_str::<T>(&rest) {
            Ok(file) => return Read { file: Some(file), problems, blanked },
            Err(error) => error,
        };
        let doc = match ImDocument::parse(rest.as_str()) {
            Ok(doc) => doc,
            // Blanking leaves valid TOML, so a syntax error is in the file as written,
            // and it is the only problem that can be told.
            Err(_) => {
                if blanked.is_empty() {
                    problems.push(problem_from_toml(text, &error));
                }
                return Read { file: None, problems, blanked };
            }
        };
        let Some((span, entry)) =
            error.span().and_then(|span| Some((span.clone(), find(&doc, span)?)))
        else {
            problems.push(problem_from_toml(text, &error));
            return Read { file: None, problems, blanked };
        };
        let line = Some(line_of(text, span.start));
        if let Some(field) = missing_field(error.message()) {
            if !blanked.contains(&join(&entry.key, field)) {
                let message = format!("`{field}` is required here");
                problems.push(ConfigProblem { line, key: entry.key, message });
            }
            return Read { file: None, problems, blanked };
        }
        problems.push(ConfigProblem { line, key: entry.key.clone(), message: describe(&error) });
        if problems.len() >= MAX_PROBLEMS {
            let message = format!("stopped after {MAX_PROBLEMS} problems; there may be more");
            problems.push(ConfigProblem { line: None, key: String::new(), message });
            return Read { file: None, problems, blanked };
        }
        if !blank(&mut rest, &entry.blank) {
            return Read { file: None, problems, blanked };
        }
        blanked.push(entry.key);
    }
}

/// A syntax error, or one that points nowhere: the place toml gives, and its message.
fn problem_from_toml(text: &str, e: &toml::de::Error) -> ConfigProblem {
    let line = e.span().map(|span| line_of(text, span.start));
    // toml's message repeats the position and a source excerpt; keep its first
    // meaningful line, since we print the position ourselves.
    let message = e.message().lines().next().unwrap_or("invalid TOML").to_string();
    let key = e.span().map(|span| key_before(text, span.start)).unwrap_or_default();
    ConfigProblem { line, key, message }
}

/// The `key = ` at the start of the line holding `offset`, if any.
fn key_before(text: &str, offset: usize) -> String {
    let start = text[..offset.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    line.split_once('=').map(|(k, _)| k.trim().to_string()).unwrap_or_default()
}

/// The field of serde's "missing field `name`".
fn missing_field(message: &str) -> Option<&str> {
    message.strip_prefix("missing field `")?.split('`').next()
}

/// The error in the operator's words: an unknown key gets the known key it is closest
/// to, or else the keys known in its table (serde's "unknown field `x`, expected one of
/// `a`, `b`" names them).
fn describe(error: &toml::de::Error) -> String {
    let message = error.message().lines().next().unwrap_or("invalid value");
    let Some((name, expected)) =
        message.strip_prefix("unknown field `").and_then(|rest| rest.split_once('`'))
    else {
        return message.to_string();
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match closest(name, &known) {
        Some(key) => format!("unknown key; did you mean `{key}`?"),
        None if known.is_empty() => "unknown key".to_string(),
        None => format!("unknown key; the keys here are {}", known.join(", ")),
    }
}

/// The known key `name` is most likely a misspelling of: at most a third of its letters
/// (and at least one) changed, added or removed.
pub(super) fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    let allowed = (name.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (strsim::levenshtein(&name, k), *k))
        .filter(|(distance, _)| *distance <= allowed)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

/// Turns every byte in `ranges` other than a line break into a space; whether anything
/// changed.
fn blank(text: &mut String, ranges: &[Range<usize>]) -> bool {
    let mut bytes = std::mem::take(text).into_bytes();
    let mut changed = false;
    for range in ranges {
        let end = range.end.min(bytes.len());
        for b in bytes.get_mut(range.start.min(end)..end).unwrap_or_default() {
            if !matches!(*b, b'\n' | b'\r' | b' ') {
                *b = b' ';
                changed = true;
            }
        }
    }
    // Whole entries are blanked, from a line start or a table header to the end of a
    // value, so no multi-byte character is cut; lossy only guards that.
    *text =
        String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into());
    changed
}

/// A key as written: its dotted name as problems show it, and the text that holds it
/// with its value (what blanking removes).
struct Entry {
    key: String,
    blank: Vec<Range<usize>>,
}

/// The innermost key that `span` (from a serde error) points at: the key itself, its
/// value or part of it, or a table's header.
fn find(doc: &ImDocument<&str>, span: Range<usize>) -> Option<Entry> {
    let finder = Finder { text: doc.raw(), span };
    finder.in_table(doc.as_table(), "")
}

struct Finder<'a> {
    text: &'a str,
    span: Range<usize>,
}

impl Finder<'_> {
    fn in_table(&self, table: &Table, prefix: &str) -> Option<Entry> {
        for (name, item) in table.iter() {
            let key_span = table.key(name).and_then(|k| k.span());
            let key = join(prefix, name);
            let found = match item {
                Item::None => None,
                Item::Value(value) => self
                    .lines(key_span.as_ref(), value)
                    .and_then(|lines| self.in_value(value, &key, key_span.as_ref(), &lines)),
                Item::Table(sub) => self.in_table(sub, &key).or_else(|| {
                    let header = sub.span().is_some_and(|s| s.start == self.span.start);
                    (header || key_span == Some(self.span.clone()))
                        .then(|| Entry { key, blank: self.extent(sub) })
                }),
                Item::ArrayOfTables(array) => {
                    let each = array.iter().enumerate().find_map(|(i, sub)| {
                        let key = format!("{key}[{i}]");
                        self.in_table(sub, &key).or_else(|| {
                            let header = sub.span().is_some_and(|s| s.start == self.span.start);
                            header.then(|| Entry { key, blank: self.extent(sub) })
                        })
                    });
                    each.or_else(|| {
                        (key_span == Some(self.span.clone())).then(|| Entry {
                            key,
                            blank: array.iter().flat_map(|sub| self.extent(sub)).collect(),
                        })
                    })
                }
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// The lines of a key-value pair written in a table: from the start of the key's
    /// line to the end of the value. They hold nothing else but a comment.
    fn lines(&self, key_span: Option<&Range<usize>>, value: &Value) -> Option<Range<usize>> {
        let (key_span, value_span) = (key_span?, value.span()?);
        let start = self.text.get(..key_span.start)?.rfind('\n').map_or(0, |i| i + 1);
        Some(start..value_span.end)
    }

    /// Where a table is written: its header and body, and its subtables and dotted keys
    /// wherever they are.
    fn extent(&self, table: &Table) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = table.span().into_iter().collect();
        for (name, item) in table.iter() {
            match item {
                Item::Table(sub) => out.extend(self.extent(sub)),
                Item::ArrayOfTables(array) => {
                    out.extend(array.iter().flat_map(|sub| self.extent(sub)))
                }
                Item::Value(value) => {
                    let key_span = table.key(name).and_then(|k| k.span());
                    out.extend(self.lines(key_span.as_ref(), value));
                }
                Item::None => {}
            }
        }
        out
    }

    /// A value and what is nested in it; `lines` holds the key-value pair written in
    /// a table, which is what goes when anything inside it is blanked (a key in an
    /// inline table cannot go alone without leaving a stray comma).
    fn in_value(
        &self,
        value: &Value,
        key: &str,
        key_span: Option<&Range<usize>>,
        lines: &Range<usize>,
    ) -> Option<Entry> {
        let nested = match value {
            Value::InlineTable(table) => table.iter().find_map(|(name, v)| {
                let span = table.key(name).and_then(|k| k.span());
                self.in_value(v, &join(key, name), span.as_ref(), lines)
            }),
            Value::Array(array) => array.iter().find_map(|v| self.in_value(v, key, None, lines)),
            _ => None,
        };
        nested.or_else(|| {
            let at_key = key_span == Some(&self.span);
            let in_value =
                value.span().is_some_and(|v| v.start <= self.span.start && self.span.end <= v.end);
            (at_key || in_value).then(|| Entry { key: key.to_string(), blank: vec![lines.clone()] })
        })
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}
