//! Kubernetes label keys, label values and DNS names: the checks the
//! selector parser and the config parsers share, and what is wrong with a
//! rejected one, as a phrase that follows the quoted text.

use super::quote::quote;

/// Maximum lengths from the Kubernetes label rules, which Hetzner follows.
const MAX_PREFIX: usize = 253;
const MAX_NAME: usize = 63;
const MAX_VALUE: usize = 63;

/// Which part of a label a [`LabelProblem`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelPart {
    Prefix,
    Name,
    Value,
    DnsName,
}

impl LabelPart {
    fn noun(self) -> &'static str {
        match self {
            LabelPart::Prefix => "the prefix",
            LabelPart::Name => "the name",
            LabelPart::Value => "a label value",
            LabelPart::DnsName => "a DNS name",
        }
    }

    fn allowed(self) -> &'static str {
        match self {
            LabelPart::Prefix | LabelPart::DnsName => {
                "lowercase letters a-z, digits 0-9, \"-\" and \".\""
            }
            LabelPart::Name | LabelPart::Value => {
                "letters A-Z and a-z, digits 0-9, \"-\", \"_\" and \".\""
            }
        }
    }
}

/// What is wrong with a label key, label value or DNS name. Displays as a
/// phrase that follows the quoted text ("label key \"x/\" has an empty name …").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelProblem {
    #[error("is empty")]
    Empty,
    #[error("has an empty prefix before \"/\"; remove the \"/\" or put a DNS name before it")]
    EmptyPrefix,
    #[error("has an empty name after the prefix")]
    EmptyName,
    #[error(
        "contains more than one \"/\"; a key is an optional DNS-name prefix, \"/\" and a name"
    )]
    TooManySlashes,
    #[error("is too long: {} has {len} characters, at most {max} are allowed", .part.noun())]
    TooLong {
        part: LabelPart,
        len: usize,
        max: usize,
    },
    #[error(
        "contains {} (character {index}), which {} may not contain; use {}",
        quote(&.ch.to_string()), .part.noun(), .part.allowed()
    )]
    BadCharacter {
        part: LabelPart,
        ch: char,
        index: usize,
    },
    #[error("{}", edge_rule(*.part))]
    BadEdge { part: LabelPart },
    #[error("has an empty part between dots")]
    EmptyDnsPart,
}

fn edge_rule(part: LabelPart) -> &'static str {
    match part {
        LabelPart::Prefix => {
            "must start and end each dot-separated part of its prefix with a letter or digit"
        }
        LabelPart::DnsName => "must start and end each dot-separated part with a letter or digit",
        LabelPart::Name => "must start and end its name with a letter or digit",
        LabelPart::Value => "must start and end with a letter or digit",
    }
}

/// Checks a label (or annotation) key: `[prefix/]name` as Kubernetes defines it.
pub fn check_label_key(key: &str) -> Result<(), LabelProblem> {
    if key.is_empty() {
        return Err(LabelProblem::Empty);
    }
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if name.contains('/') {
            return Err(LabelProblem::TooManySlashes);
        }
        if prefix.is_empty() {
            return Err(LabelProblem::EmptyPrefix);
        }
        check_dns(prefix, LabelPart::Prefix, MAX_PREFIX)?;
    }
    if name.is_empty() {
        return Err(LabelProblem::EmptyName);
    }
    check_word(name, LabelPart::Name, MAX_NAME)
}

/// Checks a label value; the empty value is valid.
pub fn check_label_value(value: &str) -> Result<(), LabelProblem> {
    if value.is_empty() {
        return Ok(());
    }
    check_word(value, LabelPart::Value, MAX_VALUE)
}

/// Checks a DNS-1123 subdomain, the rule for most Kubernetes object names.
pub fn check_dns_subdomain(name: &str) -> Result<(), LabelProblem> {
    if name.is_empty() {
        return Err(LabelProblem::Empty);
    }
    check_dns(name, LabelPart::DnsName, MAX_PREFIX)
}

/// The first character `allowed` refuses, then a length over `max`. Both
/// callers allow only ASCII, so past the first check the byte length is the
/// character count.
fn check_characters(
    text: &str,
    part: LabelPart,
    max: usize,
    allowed: impl Fn(char) -> bool,
) -> Result<(), LabelProblem> {
    if let Some((i, ch)) = text.chars().enumerate().find(|(_, ch)| !allowed(*ch)) {
        return Err(LabelProblem::BadCharacter {
            part,
            ch,
            index: i + 1,
        });
    }
    if text.len() > max {
        return Err(LabelProblem::TooLong {
            part,
            len: text.len(),
            max,
        });
    }
    Ok(())
}

fn check_word(text: &str, part: LabelPart, max: usize) -> Result<(), LabelProblem> {
    check_characters(text, part, max, |ch| {
        ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.')
    })?;
    let alnum_edges = text
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && text
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric());
    if !alnum_edges {
        return Err(LabelProblem::BadEdge { part });
    }
    Ok(())
}

fn check_dns(text: &str, part: LabelPart, max: usize) -> Result<(), LabelProblem> {
    check_characters(text, part, max, |ch| {
        ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '-' | '.')
    })?;
    for piece in text.split('.') {
        if piece.is_empty() {
            return Err(LabelProblem::EmptyDnsPart);
        }
        if piece.starts_with('-') || piece.ends_with('-') {
            return Err(LabelProblem::BadEdge { part });
        }
    }
    Ok(())
}
