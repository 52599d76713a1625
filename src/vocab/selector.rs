//! Label selectors in the syntax Hetzner Cloud and Kubernetes share.
//!
//! The selector decides which servers' addresses end up in the pool, so it is
//! validated here, before any request, with errors that point at the exact
//! character; Hetzner's own 422 answer would only say "invalid input".

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;

use super::label::{check_label_key, check_label_value, LabelProblem};
use super::quote::quote;

/// One condition of a selector; all conditions must hold (comma = AND).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requirement {
    /// `key=value` or `key==value`.
    Equals { key: String, value: String },
    /// `key!=value`; like Kubernetes, also true when the key is absent.
    NotEquals { key: String, value: String },
    /// `key`.
    Exists { key: String },
    /// `!key`.
    NotExists { key: String },
    /// `key in (a,b)`.
    In { key: String, values: Vec<String> },
    /// `key notin (a,b)`; also true when the key is absent.
    NotIn { key: String, values: Vec<String> },
}

impl Requirement {
    pub fn key(&self) -> &str {
        match self {
            Requirement::Equals { key, .. }
            | Requirement::NotEquals { key, .. }
            | Requirement::Exists { key }
            | Requirement::NotExists { key }
            | Requirement::In { key, .. }
            | Requirement::NotIn { key, .. } => key,
        }
    }

    /// Evaluates the requirement against a label set, with Kubernetes semantics.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals { key, value } => labels.get(key) == Some(value),
            Requirement::NotEquals { key, value } => labels.get(key) != Some(value),
            Requirement::Exists { key } => labels.contains_key(key),
            Requirement::NotExists { key } => !labels.contains_key(key),
            Requirement::In { key, values } => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn { key, values } => {
                labels.get(key).is_none_or(|v| !values.contains(v))
            }
        }
    }

    fn validate(&self) -> Result<(), SelectorError> {
        let key = self.key();
        check_label_key(key).map_err(|problem| SelectorError::InvalidKey {
            key: key.to_owned(),
            position: None,
            problem,
        })?;
        let values: &[String] = match self {
            Requirement::Equals { value, .. } | Requirement::NotEquals { value, .. } => {
                std::slice::from_ref(value)
            }
            Requirement::In { values, .. } | Requirement::NotIn { values, .. } => {
                if values.is_empty() {
                    return Err(SelectorError::EmptyList {
                        key: key.to_owned(),
                        position: None,
                    });
                }
                values
            }
            Requirement::Exists { .. } | Requirement::NotExists { .. } => &[],
        };
        for value in values {
            check_label_value(value).map_err(|problem| SelectorError::InvalidValue {
                value: value.clone(),
                position: None,
                problem,
            })?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Equals { key, value } => write!(f, "{key}={value}"),
            Requirement::NotEquals { key, value } => write!(f, "{key}!={value}"),
            Requirement::Exists { key } => f.write_str(key),
            Requirement::NotExists { key } => write!(f, "!{key}"),
            Requirement::In { key, values } => write!(f, "{key} in ({})", values.join(",")),
            Requirement::NotIn { key, values } => write!(f, "{key} notin ({})", values.join(",")),
        }
    }
}

/// A parsed, validated, non-empty label selector.
///
/// `Display` gives the canonical form that is sent to Hetzner; parsing the
/// canonical form gives the same selector back.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Builds a selector from requirements, applying the same checks as parsing.
    pub fn new(requirements: Vec<Requirement>) -> Result<Self, SelectorError> {
        if requirements.is_empty() {
            return Err(SelectorError::Empty);
        }
        for requirement in &requirements {
            requirement.validate()?;
        }
        Ok(Self { requirements })
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when every requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The same selection as a Kubernetes `LabelSelector` (for the pool's
    /// `spec.serviceSelector`).
    pub fn to_kubernetes(&self) -> meta::LabelSelector {
        let mut match_labels = BTreeMap::new();
        let mut match_expressions = Vec::new();
        let expression = |key: &str, operator: &str, values: Option<Vec<String>>| {
            meta::LabelSelectorRequirement {
                key: key.to_owned(),
                operator: operator.to_owned(),
                values,
            }
        };
        for requirement in &self.requirements {
            match requirement {
                Requirement::Equals { key, value } => match match_labels.get(key) {
                    None => {
                        match_labels.insert(key.clone(), value.clone());
                    }
                    Some(existing) if existing == value => {}
                    // matchLabels holds one value per key; a second, contradictory
                    // equality must still be kept so the selector matches nothing,
                    // exactly like the original.
                    Some(_) => {
                        match_expressions.push(expression(key, "In", Some(vec![value.clone()])))
                    }
                },
                Requirement::NotEquals { key, value } => {
                    match_expressions.push(expression(key, "NotIn", Some(vec![value.clone()])))
                }
                Requirement::Exists { key } => {
                    match_expressions.push(expression(key, "Exists", None))
                }
                Requirement::NotExists { key } => {
                    match_expressions.push(expression(key, "DoesNotExist", None))
                }
                Requirement::In { key, values } => {
                    match_expressions.push(expression(key, "In", Some(values.clone())))
                }
                Requirement::NotIn { key, values } => {
                    match_expressions.push(expression(key, "NotIn", Some(values.clone())))
                }
            }
        }
        meta::LabelSelector {
            match_labels: (!match_labels.is_empty()).then_some(match_labels),
            match_expressions: (!match_expressions.is_empty()).then_some(match_expressions),
        }
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Parser::new(s).parse()
    }
}

impl serde::Serialize for LabelSelector {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for LabelSelector {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a selector was rejected. Positions count characters from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "the label selector is empty; an empty selector would match every server in the Hetzner \
         project, so one is required (for example kops.k8s.io/instance-role=Node)"
    )]
    Empty,
    #[error("unexpected {found} at position {position}; expected {expected}")]
    Unexpected {
        /// The offending character or word, already quoted.
        found: String,
        position: usize,
        expected: &'static str,
    },
    #[error("the selector ends too early after position {position}; expected {expected}")]
    UnexpectedEnd {
        position: usize,
        expected: &'static str,
    },
    #[error("\"(\" at position {position} is never closed; add \")\" after the last value")]
    UnclosedParenthesis { position: usize },
    #[error("label key {}{} {problem}", quote(.key), at(.position))]
    InvalidKey {
        key: String,
        position: Option<usize>,
        problem: LabelProblem,
    },
    #[error("value {}{} {problem}", quote(.value), at(.position))]
    InvalidValue {
        value: String,
        position: Option<usize>,
        problem: LabelProblem,
    },
    #[error(
        "the value list for {}{} is empty; give at least one value, e.g. {} in (a,b)",
        quote(.key), at(.position), .key
    )]
    EmptyList {
        key: String,
        position: Option<usize>,
    },
    #[error("empty value at position {position} in a value list; remove the extra \",\"")]
    EmptyListValue { position: usize },
}

fn at(position: &Option<usize>) -> String {
    position
        .map(|p| format!(" at position {p}"))
        .unwrap_or_default()
}

const EXPECT_KEY: &str = "a label key or \"!\"";
const EXPECT_KEY_AFTER_BANG: &str = "a label key after \"!\"";
const EXPECT_OPERATOR: &str = "\",\", \"=\", \"==\", \"!=\", \"in\" or \"notin\"";
const EXPECT_NEXT: &str = "\",\" or the end of the selector";
const EXPECT_OPEN: &str = "\"(\" to start the value list";
const EXPECT_REQUIREMENT: &str = "another requirement after \",\"";

/// Characters that end a key or a keyword.
fn is_delimiter(ch: char) -> bool {
    ch.is_whitespace() || matches!(ch, '=' | '!' | ',' | '(' | ')')
}

/// A hand-written scanner over characters: no recursion and no indexing that
/// can go out of bounds, so no input can make it panic.
struct Parser {
    chars: Vec<char>,
    /// Index of the next character (0-based); reported positions are `pos + 1`.
    pos: usize,
}

impl Parser {
    fn new(input: &str) -> Self {
        Self {
            chars: input.chars().collect(),
            pos: 0,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_second(&self) -> Option<char> {
        self.chars.get(self.pos + 1).copied()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// Reads a key or keyword; returns it with its 1-based position.
    fn word(&mut self) -> (String, usize) {
        let start = self.pos;
        while self.peek().is_some_and(|c| !is_delimiter(c)) {
            self.pos += 1;
        }
        (self.slice(start, self.pos), start + 1)
    }

    /// Reads raw text up to (not including) one of `stops` or the end, trimmed.
    /// Values are taken whole so that `a b` or `a(b` is reported as one bad
    /// value rather than as a confusing token error.
    fn raw_until(&mut self, stops: &[char]) -> (String, usize) {
        let start = self.pos;
        while self.peek().is_some_and(|c| !stops.contains(&c)) {
            self.pos += 1;
        }
        let mut first = start;
        while first < self.pos && self.chars.get(first).is_some_and(|c| c.is_whitespace()) {
            first += 1;
        }
        let mut end = self.pos;
        while end > first && self.chars.get(end - 1).is_some_and(|c| c.is_whitespace()) {
            end -= 1;
        }
        (self.slice(first, end), first + 1)
    }

    fn slice(&self, from: usize, to: usize) -> String {
        self.chars
            .get(from..to)
            .map(|c| c.iter().collect())
            .unwrap_or_default()
    }

    /// Reports what stands at the current position: a whole word if it is
    /// one, else the single character, else the end.
    fn unexpected(&self, expected: &'static str) -> SelectorError {
        match self.peek() {
            Some(ch) => SelectorError::Unexpected {
                found: if is_delimiter(ch) {
                    quote(&ch.to_string())
                } else {
                    let end = (self.pos..self.chars.len())
                        .find(|&i| self.chars.get(i).is_none_or(|&c| is_delimiter(c)))
                        .unwrap_or(self.chars.len());
                    quote(&self.slice(self.pos, end))
                },
                position: self.pos + 1,
                expected,
            },
            None => SelectorError::UnexpectedEnd {
                position: self.pos,
                expected,
            },
        }
    }

    fn parse(mut self) -> Result<LabelSelector, SelectorError> {
        self.skip_whitespace();
        if self.peek().is_none() {
            return Err(SelectorError::Empty);
        }
        let mut requirements = Vec::new();
        loop {
            requirements.push(self.requirement()?);
            self.skip_whitespace();
            match self.peek() {
                None => break,
                Some(',') => {
                    self.pos += 1;
                    self.skip_whitespace();
                    if self.peek().is_none() || self.peek() == Some(',') {
                        return Err(self.unexpected(EXPECT_REQUIREMENT));
                    }
                }
                Some(_) => return Err(self.unexpected(EXPECT_NEXT)),
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn key(&mut self, expected: &'static str) -> Result<String, SelectorError> {
        let (key, position) = self.word();
        if key.is_empty() {
            return Err(self.unexpected(expected));
        }
        check_label_key(&key).map_err(|problem| SelectorError::InvalidKey {
            key: key.clone(),
            position: Some(position),
            problem,
        })?;
        Ok(key)
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        self.skip_whitespace();
        if self.peek() == Some('!') {
            self.pos += 1;
            self.skip_whitespace();
            let key = self.key(EXPECT_KEY_AFTER_BANG)?;
            return Ok(Requirement::NotExists { key });
        }
        let key = self.key(EXPECT_KEY)?;
        self.skip_whitespace();
        match self.peek() {
            None | Some(',') => Ok(Requirement::Exists { key }),
            Some('=') => {
                self.pos += 1;
                if self.peek() == Some('=') {
                    self.pos += 1;
                }
                let value = self.single_value()?;
                Ok(Requirement::Equals { key, value })
            }
            Some('!') if self.peek_second() == Some('=') => {
                self.pos += 2;
                let value = self.single_value()?;
                Ok(Requirement::NotEquals { key, value })
            }
            Some(ch) if !is_delimiter(ch) => {
                let before = self.pos;
                let (word, _) = self.word();
                let negated = match word.as_str() {
                    "in" => false,
                    "notin" => true,
                    _ => {
                        self.pos = before;
                        return Err(self.unexpected(EXPECT_OPERATOR));
                    }
                };
                let values = self.value_list(&key)?;
                Ok(if negated {
                    Requirement::NotIn { key, values }
                } else {
                    Requirement::In { key, values }
                })
            }
            Some(_) => Err(self.unexpected(EXPECT_OPERATOR)),
        }
    }

    fn single_value(&mut self) -> Result<String, SelectorError> {
        let (value, position) = self.raw_until(&[',']);
        check_label_value(&value).map_err(|problem| SelectorError::InvalidValue {
            value: value.clone(),
            position: Some(position),
            problem,
        })?;
        Ok(value)
    }

    fn value_list(&mut self, key: &str) -> Result<Vec<String>, SelectorError> {
        self.skip_whitespace();
        if self.peek() != Some('(') {
            return Err(self.unexpected(EXPECT_OPEN));
        }
        let open = self.pos + 1;
        self.pos += 1;
        let mut values: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        loop {
            let (value, position) = self.raw_until(&[',', ')']);
            let closing = match self.peek() {
                None => return Err(SelectorError::UnclosedParenthesis { position: open }),
                Some(ch) => ch == ')',
            };
            if value.is_empty() {
                // Nothing before ")" in the first slot: `key in ()`.
                if closing && values.is_empty() {
                    return Err(SelectorError::EmptyList {
                        key: key.to_owned(),
                        position: Some(open),
                    });
                }
                return Err(SelectorError::EmptyListValue {
                    position: self.pos + 1,
                });
            }
            check_label_value(&value).map_err(|problem| SelectorError::InvalidValue {
                value: value.clone(),
                position: Some(position),
                problem,
            })?;
            if seen.insert(value.clone()) {
                values.push(value);
            }
            self.pos += 1;
            if closing {
                return Ok(values);
            }
        }
    }
}

#[cfg(test)]
mod tests;
