//! Hetzner's label selector as the fake applies it to `label_selector`: its
//! own small parser, independent of the controller's, so a bug in one does
//! not hide in the other.

use std::collections::BTreeMap;

// ---------------------------------------------------------------------------
// Label selectors: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
// `k notin (a,b)`, joined by commas meaning AND.

pub(super) enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl Requirement {
    pub(super) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(key, value) => labels.get(key) == Some(value),
            // Like Kubernetes: a missing key satisfies `!=` and `notin`.
            Requirement::NotEquals(key, value) => labels.get(key) != Some(value),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::NotExists(key) => !labels.contains_key(key),
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => !labels.get(key).is_some_and(|v| values.contains(v)),
        }
    }
}

/// Parses a selector; an empty one matches everything.
pub(super) fn parse_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    if selector.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_top_level(selector)?
        .into_iter()
        .map(parse_requirement)
        .collect()
}

/// Splits at commas that are not inside `( … )`.
pub(super) fn split_top_level(selector: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| "unbalanced ')'".to_owned())?;
            }
            ',' if depth == 0 => {
                parts.push(&selector[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".to_owned());
    }
    parts.push(&selector[start..]);
    Ok(parts)
}

pub(super) fn parse_requirement(part: &str) -> Result<Requirement, String> {
    let part = part.trim();
    if part.is_empty() {
        return Err("empty requirement".to_owned());
    }
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(key_of(key)?));
    }
    if let Some((key, values)) = part.split_once(" notin ") {
        return Ok(Requirement::NotIn(key_of(key)?, value_set(values)?));
    }
    if let Some((key, values)) = part.split_once(" in ") {
        return Ok(Requirement::In(key_of(key)?, value_set(values)?));
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(key_of(key)?, value_of(value)?));
    }
    if let Some((key, value)) = part.split_once("==") {
        return Ok(Requirement::Equals(key_of(key)?, value_of(value)?));
    }
    if let Some((key, value)) = part.split_once('=') {
        return Ok(Requirement::Equals(key_of(key)?, value_of(value)?));
    }
    Ok(Requirement::Exists(key_of(part)?))
}

pub(super) fn key_of(key: &str) -> Result<String, String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid {
        Ok(key.to_owned())
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

pub(super) fn value_of(value: &str) -> Result<String, String> {
    let value = value.trim();
    let valid = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(value.to_owned())
    } else {
        Err(format!("invalid label value {value:?}"))
    }
}

pub(super) fn value_set(values: &str) -> Result<Vec<String>, String> {
    let inner = values
        .trim()
        .strip_prefix('(')
        .and_then(|rest| rest.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised value list, got {values:?}"))?;
    inner.split(',').map(value_of).collect()
}
