//! The one error a scenario file can produce: where (file, line, key path) and what.

use std::fmt;

/// An invalid scenario file (the CLI exits 2 on it).
///
/// Displays as `<file>:<line>: <key path>: <message>`, e.g.
/// `scenarios/x.yaml:14: timeline[2].at: "30" is not a duration (use 30s)`. The key path is left
/// out when the error is not about a key (a YAML syntax error), and the line when there is none
/// (the file could not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    pub file: String,
    /// 1-based; 0 when the error has no line.
    pub line: usize,
    /// Dotted key path with list indexes (`timeline[2].at`); empty when not about a key.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_file_line_and_path() {
        let e = ScenarioError {
            file: "x.yaml".into(),
            line: 14,
            path: "timeline[2].at".into(),
            message: "\"30\" is not a duration (use 30s)".into(),
        };
        assert_eq!(
            e.to_string(),
            "x.yaml:14: timeline[2].at: \"30\" is not a duration (use 30s)"
        );
        let no_path = ScenarioError {
            path: String::new(),
            ..e.clone()
        };
        assert_eq!(
            no_path.to_string(),
            "x.yaml:14: \"30\" is not a duration (use 30s)"
        );
        let no_line = ScenarioError {
            line: 0,
            path: String::new(),
            message: "cannot read".into(),
            ..e
        };
        assert_eq!(no_line.to_string(), "x.yaml: cannot read");
    }
}
