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

/// Why a config was rejected: every problem found, with the file they are in.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<ConfigProblem>,
}

impl ConfigError {
    pub(crate) fn single(file: PathBuf, problem: ConfigProblem) -> Self {
        ConfigError { file, problems: vec![problem] }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", self.file.display())?;
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
