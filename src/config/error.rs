//! Config errors that name the file, line and key.

use std::fmt;
use std::path::PathBuf;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// 1-based line, when the problem points at a place in the file.
    pub line: Option<usize>,
    /// The dotted key, e.g. `upstream.app.servers`.
    pub key: String,
    pub message: String,
}

/// Why a config was rejected: every problem found, with the file they are in, and
/// those of the files it includes.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<ConfigProblem>,
    /// The problems of included files, a file each.
    pub included: Vec<ConfigError>,
}

impl ConfigError {
    pub(crate) fn single(file: PathBuf, problem: ConfigProblem) -> Self {
        ConfigError::of_file(file, vec![problem])
    }

    /// The problems of one file, in file order; problems of the whole file (no line)
    /// last.
    pub(crate) fn of_file(file: PathBuf, mut problems: Vec<ConfigProblem>) -> Self {
        problems.sort_by_key(|p| p.line.unwrap_or(usize::MAX));
        ConfigError { file, problems, included: Vec::new() }
    }

    /// Every problem, with the file it is in.
    pub fn all(&self) -> impl Iterator<Item = (&PathBuf, &ConfigProblem)> {
        let own = self.problems.iter().map(|p| (&self.file, p));
        own.chain(self.included.iter().flat_map(|e| e.problems.iter().map(|p| (&e.file, p))))
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (file, p)) in self.all().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", file.display())?;
            if let Some(line) = p.line {
                write!(f, ":{line}")?;
            }
            if p.key.is_empty() {
                write!(f, ": {}", p.message)?;
            } else {
                write!(f, ": {}: {}", p.key, p.message)?;
            }
        }
        Ok(())
    }
}
