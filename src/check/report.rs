//! What `check` found, and how it is printed: text for people (grouped,
//! one marked line per check, the hint under each warning or failure) and
//! JSON for machines.

use std::fmt::Write as _;

use serde::Serialize;

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Warning,
    Failure,
}

impl Status {
    fn marker(self) -> &'static str {
        match self {
            Status::Pass => "√",
            Status::Warning => "‼",
            Status::Failure => "×",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub description: String,
    pub result: Status,
    /// What was found, when the description alone does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What to do (every warning and failure has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Check {
    pub fn pass(description: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            result: Status::Pass,
            detail: None,
            hint: None,
        }
    }

    pub fn warning(description: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            result: Status::Warning,
            detail: None,
            hint: Some(hint.into()),
        }
    }

    pub fn failure(description: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            result: Status::Failure,
            detail: None,
            hint: Some(hint.into()),
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }
}

/// A group of checks under one heading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Category {
    pub name: &'static str,
    pub checks: Vec<Check>,
}

/// Everything `check` found, in the order it looked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// No check failed (warnings do not count).
    pub success: bool,
    pub categories: Vec<Category>,
    /// Groups not checked, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// A group `check` could not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub name: &'static str,
    pub reason: &'static str,
}

impl Report {
    pub fn add(&mut self, name: &'static str, checks: Vec<Check>) {
        if !checks.is_empty() {
            self.categories.push(Category { name, checks });
        }
        self.success = self
            .categories
            .iter()
            .flat_map(|c| &c.checks)
            .all(|c| c.result != Status::Failure);
    }

    /// Says that `names` were not checked, and why.
    pub fn skip(&mut self, names: &[&'static str], reason: &'static str) {
        self.skipped
            .extend(names.iter().map(|&name| Skipped { name, reason }));
    }

    pub fn count(&self, status: Status) -> usize {
        self.categories
            .iter()
            .flat_map(|c| &c.checks)
            .filter(|c| c.result == status)
            .count()
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for category in &self.categories {
            let _ = writeln!(
                out,
                "{}\n{}",
                category.name,
                "-".repeat(category.name.len())
            );
            for check in &category.checks {
                let _ = writeln!(out, "{} {}", check.result.marker(), check.description);
                if let Some(detail) = &check.detail {
                    for line in detail.lines() {
                        let _ = writeln!(out, "    {line}");
                    }
                }
                if let Some(hint) = &check.hint {
                    let _ = writeln!(out, "    hint: {hint}");
                }
            }
            out.push('\n');
        }
        // Said once per reason: "Cilium, Pools: not checked (why)".
        let mut reasons: Vec<&str> = self.skipped.iter().map(|s| s.reason).collect();
        reasons.dedup();
        for reason in reasons {
            let names: Vec<&str> = self
                .skipped
                .iter()
                .filter(|s| s.reason == reason)
                .map(|s| s.name)
                .collect();
            let _ = writeln!(out, "Not checked: {} ({reason})\n", names.join(", "));
        }
        let _ = writeln!(
            out,
            "Status check results are {} ({} passed, {} warnings, {} failed)",
            if self.success { "√" } else { "×" },
            self.count(Status::Pass),
            self.count(Status::Warning),
            self.count(Status::Failure),
        );
        out
    }

    /// The report for machines (documented in docs/reference/cli.md).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_owned()) + "\n"
    }
}
