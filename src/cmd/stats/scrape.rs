//! Parses the OpenMetrics / Prometheus text of a scrape of `GET /metrics` into samples;
//! fetching the page is `cmd::admin_client`'s job.
//!
//! It knows nothing of holdfast's metric names: any well-formed exposition parses.

use std::collections::BTreeMap;

/// A sample line that is not `name{labels} value`.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub(super) struct ParseError {
    pub(super) line: usize,
    pub(super) message: String,
}

/// One line of the exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) value: f64,
}

/// Parses exposition text; `#` lines (HELP, TYPE, UNIT, EOF) and blank lines are
/// skipped, and a timestamp or exemplar after the value is ignored.
pub(super) fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(|message| ParseError { line: i + 1, message })?;
        samples.push(sample);
    }
    Ok(samples)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(|c: char| c == '{' || c.is_ascii_whitespace()).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() {
        return Err("no metric name".into());
    }
    let (labels, rest) = match line[name_end..].strip_prefix('{') {
        Some(inside) => parse_labels(inside)?,
        None => (BTreeMap::new(), &line[name_end..]),
    };
    let value = rest.split_ascii_whitespace().next().ok_or("no value")?;
    // f64's parser takes "+Inf", "-Inf" and "NaN" as written by Prometheus clients.
    let value = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    Ok(Sample { name: name.to_string(), labels, value })
}

/// Parses `a="x",b="y"}` (the text after `{`); returns the labels and the text after `}`.
fn parse_labels(mut text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(rest) = text.strip_prefix('}') {
            return Ok((labels, rest));
        }
        if text.is_empty() {
            return Err("the label set has no closing '}'".into());
        }
        let (name, rest) = text.split_once('=').ok_or("a label has no '='")?;
        let name = name.trim();
        let quoted = rest.trim_start().strip_prefix('"');
        let quoted = quoted.ok_or_else(|| format!("label {name} has no quoted value"))?;
        let (value, rest) = unquote(quoted).map_err(|e| format!("label {name}: {e}"))?;
        labels.insert(name.to_string(), value);
        text = rest;
    }
}

/// Reads a label value up to its closing quote, undoing the `\"`, `\\` and `\n`
/// escapes; returns the value and the text after the quote.
fn unquote(text: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[i + 1..])),
            '\\' => match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, escaped @ ('"' | '\\'))) => value.push(escaped),
                Some((_, other)) => {
                    value.push('\\');
                    value.push(other);
                }
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("the value has no closing quote".into())
}
