//! Reading `Pools`: every entry, every field, every problem at once, each
//! naming the pool's index and name; the nested `Robot` and `Nodes`
//! objects; the fields of one object and the keys it does not know.

use super::*;

/// Parses the JSON text of `Pools`; `Err` holds every problem found.
pub(crate) fn parse_pools(text: &str) -> Result<Vec<PoolConfig>, Vec<String>> {
    const EXAMPLE: &str = "[{\"Name\": \"edge\", \"LabelSelector\": \"role=edge\"}]";
    let document: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
        vec![format!(
            "is not a JSON list of pools such as {EXAMPLE}: {e}"
        )]
    })?;
    let serde_json::Value::Array(entries) = document else {
        return Err(vec![format!(
            "is a JSON {}, not a list of pools such as {EXAMPLE}",
            json_type(&document)
        )]);
    };
    if entries.is_empty() {
        return Err(vec![format!(
            "is an empty list; list at least one pool, e.g. {EXAMPLE}, or leave Pools unset"
        )]);
    }
    let mut problems = Vec::new();
    let mut pools = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for (index, entry) in entries.iter().enumerate() {
        let mut entry_problems = Vec::new();
        let pool = parse_pool(entry, &mut entry_problems);
        let name = pool
            .as_ref()
            .map(|p| p.name.clone())
            .or_else(|| entry_name(entry));
        if let Some(pool) = &pool {
            if let Some(first) = names.insert(pool.name.clone(), index) {
                entry_problems.push(format!(
                    "Name {} is already used by pool {}; each pool needs its own name",
                    quote(&pool.name),
                    first + 1
                ));
            }
        }
        let which = match &name {
            Some(name) => format!("pool {} ({})", index + 1, quote(name)),
            None => format!("pool {}", index + 1),
        };
        problems.extend(entry_problems.into_iter().map(|p| format!("{which}: {p}")));
        pools.extend(pool);
    }
    if problems.is_empty() {
        Ok(pools)
    } else {
        Err(problems)
    }
}

pub(super) fn entry_name(entry: &serde_json::Value) -> Option<String> {
    let object = entry.as_object()?;
    object
        .iter()
        .find(|(key, _)| normalize(key) == normalize("Name"))
        .and_then(|(_, value)| value.as_str())
        .map(str::to_owned)
}

/// One entry; problems are pushed, `None` when any was found.
pub(super) fn parse_pool(
    entry: &serde_json::Value,
    problems: &mut Vec<String>,
) -> Option<PoolConfig> {
    let serde_json::Value::Object(object) = entry else {
        problems.push(format!(
            "is a JSON {}; each pool is an object with at least Name and LabelSelector",
            json_type(entry)
        ));
        return None;
    };
    let fields = Fields::of(object, POOL_KEYS, problems);
    let before = problems.len();
    let name = parse_name(&fields, problems);
    let choice = ServerChoice::parse(&fields, problems);
    let addresses = match fields.get("Addresses") {
        None => vec![AddressKind::PublicIpv4],
        Some(value) => parse_kinds(value, problems),
    };
    let options = AddressOptions::parse(&fields, &addresses, problems);
    let service_selector = fields
        .parsed("ServiceSelector", parse_service_selector, problems)
        .flatten();
    let annotations = fields
        .parsed("Annotations", |s| parse_string_map(s, false), problems)
        .unwrap_or_default();
    let labels = fields
        .parsed("Labels", |s| parse_string_map(s, true), problems)
        .unwrap_or_default();
    let max_removal_ratio = fields
        .parsed("MaxRemovalRatio", parse_ratio, problems)
        .unwrap_or_else(default_removal_ratio);
    let nodes = fields
        .get("Nodes")
        .map(|value| parse_node_rules(value, problems))
        .unwrap_or_default();
    let failover = parse_failover(
        &fields,
        &addresses,
        options.floating_ip_selector.is_some(),
        problems,
    );
    choice.check_use(&addresses, failover.is_some(), problems);
    if problems.len() > before {
        return None;
    }
    Some(PoolConfig {
        name: name?,
        label_selector: choice.label_selector,
        node_selector: choice.node_selector,
        robot: choice.robot,
        addresses,
        ipv6_host_part: options.ipv6_host_part,
        private_network: options.private_network,
        include_alias_ips: options.include_alias_ips,
        floating_ip_selector: options.floating_ip_selector,
        service_selector,
        annotations,
        labels,
        max_removal_ratio,
        nodes,
        failover,
    })
}

/// `Name`, which every pool needs.
pub(super) fn parse_name(fields: &Fields<'_>, problems: &mut Vec<String>) -> Option<String> {
    match fields.text("Name", problems) {
        Some(text) => match parse_pool_name(&text) {
            Ok(name) => Some(name),
            Err(reason) => {
                problems.push(format!("Name {} {reason}", quote(text.trim())));
                None
            }
        },
        None => {
            problems.push("Name is missing; every pool needs a name".to_owned());
            None
        }
    }
}

/// `LabelSelector`, which every pool needs unless it has `Robot`.
pub(super) fn parse_label_selector(
    fields: &Fields<'_>,
    robot: bool,
    problems: &mut Vec<String>,
) -> Option<LabelSelector> {
    match fields.text("LabelSelector", problems) {
        Some(text) => match text.parse::<LabelSelector>() {
            Ok(selector) => Some(selector),
            Err(e) => {
                problems.push(format!(
                    "LabelSelector {} is not a valid label selector: {e}",
                    quote(text.trim())
                ));
                None
            }
        },
        None if robot => None,
        None => {
            problems.push(
                "LabelSelector is missing; it chooses the pool's servers, e.g. role=edge (a \
                 pool of dedicated servers only has Robot instead)"
                    .to_owned(),
            );
            None
        }
    }
}

pub(super) fn parse_selector(text: &str) -> Result<LabelSelector, String> {
    text.parse::<LabelSelector>()
        .map_err(|e| format!("is not a valid label selector: {e}"))
}

/// `Robot`: an object with `NodeSelector`, `Servers` or both.
pub(super) fn parse_robot(
    value: &serde_json::Value,
    problems: &mut Vec<String>,
) -> Option<RobotMembers> {
    const EXAMPLE: &str = "{\"NodeSelector\": \"role=edge\", \"Servers\": [321, \"db-1\"]}";
    let serde_json::Value::Object(object) = value else {
        problems.push(format!(
            "Robot is a JSON {}; give an object such as {EXAMPLE}",
            json_type(value)
        ));
        return None;
    };
    let mut nested = Vec::new();
    let fields = Fields::of(object, ROBOT_KEYS, &mut nested);
    let node_selector = fields.parsed("NodeSelector", parse_selector, &mut nested);
    let mut servers = Vec::new();
    match fields.get("Servers") {
        None => {}
        Some(serde_json::Value::Array(items)) => {
            for item in items {
                match item {
                    serde_json::Value::Number(n) => match n.as_i64() {
                        Some(number) if number > 0 => servers.push(RobotRef::Number(number)),
                        _ => nested.push(format!("Servers: {n} is not a server number")),
                    },
                    serde_json::Value::String(text) if !text.trim().is_empty() => {
                        servers.push(RobotRef::Name(text.trim().to_owned()));
                    }
                    other => nested.push(format!(
                        "Servers holds a JSON {}; each entry is a server number or name",
                        json_type(other)
                    )),
                }
            }
        }
        Some(other) => nested.push(format!(
            "Servers is a JSON {}; give a list such as [321, \"db-1\"]",
            json_type(other)
        )),
    }
    let chooses_none = node_selector.is_none() && servers.is_empty() && nested.is_empty();
    if chooses_none {
        problems.push(format!(
            "Robot chooses no server; give NodeSelector, Servers or both, e.g. {EXAMPLE}"
        ));
    }
    let ok = nested.is_empty() && !chooses_none;
    problems.extend(nested.into_iter().map(|p| format!("Robot.{p}")));
    ok.then_some(RobotMembers {
        node_selector,
        servers,
    })
}

pub(super) fn parse_node_rules(value: &serde_json::Value, problems: &mut Vec<String>) -> NodeRules {
    let serde_json::Value::Object(object) = value else {
        problems.push(format!(
            "Nodes is a JSON {}; give an object such as {{\"RequireNode\": true}}",
            json_type(value)
        ));
        return NodeRules::default();
    };
    let mut nested = Vec::new();
    let fields = Fields::of(object, NODE_KEYS, &mut nested);
    let exclude_unhealthy_after = fields.parsed(
        "ExcludeUnhealthyAfter",
        |s| {
            parse_bounded_duration(
                s,
                Duration::from_secs(10),
                Duration::from_secs(24 * 3600),
                "a duration from 10s to 24h, e.g. 5m",
            )
        },
        &mut nested,
    );
    let require_node = fields
        .parsed("RequireNode", parse_bool, &mut nested)
        .unwrap_or(false);
    problems.extend(nested.into_iter().map(|p| format!("Nodes.{p}")));
    NodeRules {
        exclude_unhealthy_after,
        require_node,
    }
}

/// The fields of one JSON object, keys matched in any case (like the
/// top-level keys); unknown keys are problems with a suggestion.
pub(super) struct Fields<'a> {
    pub(super) values: BTreeMap<&'static str, &'a serde_json::Value>,
}

impl<'a> Fields<'a> {
    pub(super) fn of(
        object: &'a serde_json::Map<String, serde_json::Value>,
        known: &'static [&'static str],
        problems: &mut Vec<String>,
    ) -> Self {
        let mut values = BTreeMap::new();
        for (key, value) in object {
            match known.iter().find(|k| normalize(k) == normalize(key)) {
                Some(known_key) => {
                    values.insert(*known_key, value);
                }
                None => {
                    let hint = suggestion(key, known.iter().copied())
                        .map(|s| format!("did you mean {s}?"))
                        .unwrap_or_else(|| format!("known keys: {}", known.join(", ")));
                    problems.push(format!("unknown key {}; {hint}", quote(key)));
                }
            }
        }
        Self { values }
    }

    /// The value, `None` when absent or null.
    pub(super) fn get(&self, key: &str) -> Option<&'a serde_json::Value> {
        self.values.get(key).copied().filter(|v| !v.is_null())
    }

    /// The value as text (objects as their JSON); `None` when absent.
    pub(super) fn text(&self, key: &str, problems: &mut Vec<String>) -> Option<String> {
        let value = self.get(key)?;
        match json_to_text(value, true) {
            Ok(text) => text.filter(|t| !t.trim().is_empty()),
            Err(kind) => {
                problems.push(format!("{key} is a JSON {kind}; expected a string"));
                None
            }
        }
    }

    pub(super) fn parsed<T>(
        &self,
        key: &str,
        parse: impl Fn(&str) -> Result<T, String>,
        problems: &mut Vec<String>,
    ) -> Option<T> {
        let text = self.text(key, problems)?;
        match parse(&text) {
            Ok(value) => Some(value),
            Err(reason) => {
                problems.push(format!("{key} {} {reason}", quote(text.trim())));
                None
            }
        }
    }
}
