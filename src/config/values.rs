//! Parsers for single setting values (durations, ratios, names, maps,
//! selectors, the endpoint) and the helpers that turn config.json values
//! into text. Each returns the problem as text for `ConfigProblem`. Pure.

use super::{BlockedAddresses, LeaderElectionMode, MAX_INTERVAL, MIN_INTERVAL};
use crate::vocab::label::{check_dns_subdomain, check_label_key, check_label_value};
use crate::vocab::quote::quote;
use crate::vocab::selector::{LabelSelector, Requirement};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

pub(super) fn parse_bool(text: &str) -> Result<bool, String> {
    let word = text.trim().to_ascii_lowercase();
    if TRUE_WORDS.contains(&word.as_str()) {
        Ok(true)
    } else if FALSE_WORDS.contains(&word.as_str()) {
        Ok(false)
    } else {
        Err("is not a boolean; use true or false".to_owned())
    }
}

/// The words `parse_bool` reads as true (in any case).
pub(super) const TRUE_WORDS: &[&str] = &["true", "yes", "on", "1"];
pub(super) const FALSE_WORDS: &[&str] = &["false", "no", "off", "0"];

pub(super) fn parse_leader_election(text: &str) -> Result<LeaderElectionMode, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(LeaderElectionMode::Auto),
        other => match parse_bool(other) {
            Ok(true) => Ok(LeaderElectionMode::On),
            Ok(false) => Ok(LeaderElectionMode::Off),
            Err(_) => Err("is not a leader-election mode; use auto, true or false".to_owned()),
        },
    }
}

pub(super) fn parse_object_name(text: &str, example: &str) -> Result<String, String> {
    let name = text.trim();
    check_dns_subdomain(name).map_err(|problem| {
        format!("is not a valid Kubernetes object name ({example}): it {problem}")
    })?;
    Ok(name.to_owned())
}

pub(super) fn parse_namespace(text: &str) -> Result<String, String> {
    let name = text.trim();
    let label_like = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if label_like {
        Ok(name.to_owned())
    } else {
        Err("is not a valid namespace name (lower-case letters, digits and -, at most 63 characters, e.g. canada-kaktus)".to_owned())
    }
}

pub(super) fn parse_bounded_duration(
    text: &str,
    min: Duration,
    max: Duration,
    accepted: &str,
) -> Result<Duration, String> {
    let value = humantime::parse_duration(text.trim())
        .map_err(|e| format!("is not a duration ({e}); use {accepted}"))?;
    if value < min || value > max {
        return Err(format!("is out of range; use {accepted}"));
    }
    Ok(value)
}

pub(super) fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    const ACCEPTED: &str = "whole seconds from 3s to 5m, e.g. 15s";
    let value = parse_bounded_duration(
        text,
        Duration::from_secs(3),
        Duration::from_secs(300),
        ACCEPTED,
    )?;
    if value.subsec_nanos() != 0 {
        return Err(format!("is not a whole number of seconds; use {ACCEPTED}"));
    }
    Ok(value)
}

/// Go's encoding/json matched keys case-insensitively; `_` is ignored too so
/// that `label_selector` works.
pub(super) fn normalize(key: &str) -> String {
    key.chars()
        .filter(|&c| c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The closest known name, if the given one looks like a typo of it.
pub(super) fn suggestion<'a>(given: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let given = normalize(given);
    known
        .map(|k| (edit_distance(&given, &normalize(k)), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitute =
                previous.get(j).copied().unwrap_or(usize::MAX) + usize::from(ca != *cb);
            let delete = previous
                .get(j + 1)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            let insert = current
                .get(j)
                .copied()
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            current.push(substitute.min(delete).min(insert));
        }
        previous = current;
    }
    previous.last().copied().unwrap_or(usize::MAX)
}

pub(super) fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// A scalar as text (numbers and booleans are accepted where text is
/// expected); null means unset, as in Go. Objects become JSON text when the
/// setting takes one. Err names the unsupported JSON type.
pub(super) fn json_to_text(
    value: &serde_json::Value,
    object_ok: bool,
) -> Result<Option<String>, &'static str> {
    match value {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::String(s) => Ok(Some(s.clone())),
        serde_json::Value::Bool(b) => Ok(Some(b.to_string())),
        serde_json::Value::Number(n) => Ok(Some(n.to_string())),
        serde_json::Value::Object(_) | serde_json::Value::Array(_) if object_ok => {
            Ok(Some(value.to_string()))
        }
        other => Err(json_type(other)),
    }
}

/// The top-level object's entries in document order.
pub(super) struct Entries(pub(super) Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Entries;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

pub(super) fn parse_pool_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    check_dns_subdomain(name).map_err(|problem| {
        format!(
            "is not a valid Kubernetes object name (a DNS subdomain of at most 253 characters, \
             e.g. covidnetes-pool): it {problem}"
        )
    })?;
    Ok(name.to_owned())
}

pub(super) fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = humantime::parse_duration(text.trim()).map_err(|e| {
        format!("is not a duration ({e}); write a number with a unit, e.g. 90s, 15m, 1h or 1h30m")
    })?;
    if interval < MIN_INTERVAL {
        return Err(
            "is shorter than the minimum of 1s (the Hetzner request budget is shared); use 1s to 24h, e.g. 15m"
                .to_owned(),
        );
    }
    if interval > MAX_INTERVAL {
        return Err("is longer than the maximum of 24h; use 1s to 24h, e.g. 15m".to_owned());
    }
    Ok(interval)
}

pub(super) fn parse_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err("is not a share between 0 and 1; use e.g. 0.5 (hold removals of half the pool or more), 0 (hold every removal) or 1 (guard off)".to_owned()),
    }
}

pub(super) fn parse_blocked_addresses(text: &str) -> Result<BlockedAddresses, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "keep" => Ok(BlockedAddresses::Keep),
        "drop" => Ok(BlockedAddresses::Drop),
        _ => Err("is not a blocked-address policy; use keep or drop".to_owned()),
    }
}

pub(super) fn parse_request_budget(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(budget) if (10..=100_000).contains(&budget) => Ok(budget),
        _ => Err("is not a whole number of requests per hour from 10 to 100000; use e.g. 1200 (a third of Hetzner's default 3600/h project limit)".to_owned()),
    }
}

pub(super) fn parse_listen_address(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    // Go's ":8080" (all interfaces) is what users of the Go version know.
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse().map_err(|_| {
        "is not an IP address with a port; use e.g. 0.0.0.0:8080, [::]:8080 or :8080 (host names are not accepted)"
            .to_owned()
    })
}

/// A JSON object of strings (numbers and booleans become their text). Keys
/// must be Kubernetes qualified names; with `labels`, values must be label values.
pub(super) fn parse_string_map(
    text: &str,
    labels: bool,
) -> Result<BTreeMap<String, String>, String> {
    const EXAMPLE: &str = "{\"example.com/team\": \"platform\"}";
    let document: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("is not a JSON object such as {EXAMPLE}: {e}"))?;
    let serde_json::Value::Object(object) = document else {
        return Err(format!(
            "is a JSON {}, not a JSON object such as {EXAMPLE}",
            json_type(&document)
        ));
    };
    let mut map = BTreeMap::new();
    let mut issues = Vec::new();
    for (key, value) in object {
        if let Err(problem) = check_label_key(&key) {
            issues.push(format!("key {} {problem}", quote(&key)));
        }
        let value = match json_to_text(&value, false) {
            Ok(Some(value)) => value,
            Ok(None) | Err(_) => {
                issues.push(format!(
                    "the value of {} is a JSON {}; use a string",
                    quote(&key),
                    json_type(&value)
                ));
                continue;
            }
        };
        if labels {
            if let Err(problem) = check_label_value(&value) {
                issues.push(format!(
                    "value {} of {} {problem}",
                    quote(&value),
                    quote(&key)
                ));
            }
        }
        map.insert(key, value);
    }
    if issues.is_empty() {
        Ok(map)
    } else {
        Err(format!("has invalid entries: {}", issues.join("; ")))
    }
}

pub(super) fn parse_service_selector(text: &str) -> Result<Option<LabelSelector>, String> {
    let text = text.trim();
    if text.starts_with('{') {
        let labels = parse_string_map(text, true)?;
        if labels.is_empty() {
            return Ok(None);
        }
        let requirements = labels
            .into_iter()
            .map(|(key, value)| Requirement::Equals { key, value })
            .collect();
        return LabelSelector::new(requirements)
            .map(Some)
            .map_err(|e| format!("is not a valid selector: {e}"));
    }
    text.parse::<LabelSelector>()
        .map(Some)
        .map_err(|e| format!("is neither a JSON object of labels nor a valid label selector: {e}"))
}
