//! The chart's schema for its `config` value (the `properties.config` part
//! of deploy/helm/canada-kaktus/values.schema.json), made from the settings
//! table and the pool fields, so that the chart takes every setting and
//! every pool field the manual documents. A test holds the file equal to
//! [`chart_config_schema`].

use serde_json::{json, Map, Value};

use super::{
    accepts_list, accepts_object,
    values::{FALSE_WORDS, TRUE_WORDS},
    AddressKind, FieldType, PoolField, Setting, ENV_ONLY, POOL_FIELDS, SETTINGS,
    SINGLE_POOL_SETTINGS,
};

/// Settings the chart sets itself, so `config` refuses them: the token and
/// the Robot credentials come from Secrets (`token.*`, `robot.*`), the
/// listen address must match the probes' port, and the Lease's namespace
/// is the release's.
pub(super) const MANAGED_BY_THE_CHART: &[&str] = &[
    "HcloudToken",
    "HcloudTokenFile",
    "RobotUser",
    "RobotUserFile",
    "RobotPassword",
    "RobotPasswordFile",
    "ListenAddress",
    "LeaseNamespace",
];

/// Settings read as a duration, which needs its unit: a bare number such
/// as `60` is refused (a test holds this list to what the binary does).
pub(super) const DURATION_SETTINGS: &[&str] = &[
    "HcloudTimeout",
    "Interval",
    "LeaseDuration",
    "NodeDebounce",
    "NodeMinGap",
];

/// A DNS subdomain (values.rs `check_dns_subdomain`), blanks around it
/// trimmed as the binary does.
const DNS_SUBDOMAIN: &str =
    "^\\s*[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\\s*$";

/// The schema of the chart's `config` value.
pub fn chart_config_schema() -> Value {
    let properties: Map<String, Value> = SETTINGS
        .iter()
        .filter(|s| !MANAGED_BY_THE_CHART.contains(&s.key) && !ENV_ONLY.contains(&s.key))
        .map(|s| (s.key.to_owned(), setting_schema(s)))
        .collect();
    // `Pools` replaces the single-pool settings: never both (a null or
    // blank value is left out, so it does not count).
    let single: Vec<Value> = SINGLE_POOL_SETTINGS.iter().map(|s| given(s.key)).collect();
    json!({
        "type": "object",
        "additionalProperties": false,
        "not": {"allOf": [given("Pools"), {"anyOf": single}]},
        "allOf": [without_node_watch()],
        "description": format!(
            "Controller settings by config.json key (docs/reference/settings.md); {} are set by \
             the chart, {} by hcloud.* and robot.endpoint (environment only)",
            MANAGED_BY_THE_CHART.join(", "),
            ENV_ONLY.join(", ")
        ),
        "properties": properties,
    })
}

fn setting_schema(setting: &Setting) -> Value {
    let description = plain(setting.description);
    if accepts_list(setting) {
        return json!({
            "description": description,
            // A list (its JSON text is for the environment variable).
            "type": ["array", "null"],
            "minItems": 1,
            "items": pool_schema(),
        });
    }
    if accepts_object(setting) {
        let mut schema = field_schema(FieldType::Map);
        schema["description"] = Value::String(description);
        return schema;
    }
    if DURATION_SETTINGS.contains(&setting.key) {
        let mut schema = field_schema(FieldType::Duration);
        schema["description"] = Value::String(description);
        return schema;
    }
    // Read as text, as config.json's numbers and booleans are.
    json!({"description": description, "type": ["string", "number", "boolean", "null"]})
}

/// One entry of `Pools`: `Name`, and `LabelSelector` or `Robot`, and the
/// rules between fields the binary checks (values.rs, servers.rs): a value
/// that is null or blank text counts as left out, as it does there.
fn pool_schema() -> Value {
    let mut schema = object_schema(POOL_FIELDS);
    schema["required"] = json!(["Name"]);
    // A Kubernetes object name (a DNS subdomain), as text: Helm would
    // write a large number as 1e+06 into the RBAC's resourceNames.
    schema["properties"]["Name"]["type"] = json!("string");
    schema["properties"]["Name"]["pattern"] = json!(DNS_SUBDOMAIN);
    schema["properties"]["Name"]["maxLength"] = json!(253);
    schema["anyOf"] = json!([given("LabelSelector"), given("Robot")]);
    // A Robot object chooses a server: a Node selector, or servers.
    schema["properties"]["Robot"]["if"] = json!({"type": "object"});
    schema["properties"]["Robot"]["then"] = json!({"anyOf": [
        given("NodeSelector"),
        {"required": ["Servers"], "properties": {"Servers": {"type": "array", "minItems": 1}}},
    ]});
    let robot_only: Vec<&str> = AddressKind::WORDS
        .iter()
        .copied()
        .filter(|w| w.parse::<AddressKind>().is_ok_and(AddressKind::robot_only))
        .collect();
    schema["allOf"] = json!([
        {
            // Failover: a floating-ip pool naming its Floating IPs, no Robot.
            "if": is("FloatingIpFailover", true),
            "then": {
                "allOf": [given("FloatingIpSelector"), lists("floating-ip")],
                "not": given("Robot"),
            },
            "else": {"not": {"anyOf": [
                given("FailoverAfter"),
                given("FailoverMovesPerMinute"),
                given("HolderLabel"),
            ]}},
        },
        // NodeSelector narrows the Cloud servers LabelSelector chose.
        {"if": given("NodeSelector"), "then": given("LabelSelector")},
        {
            // A Robot server's kinds of address need Robot servers.
            "if": {"anyOf": robot_only.iter().map(|w| lists(w)).collect::<Vec<_>>()},
            "then": given("Robot"),
        },
    ]);
    schema
}

/// `key` is there, not null and not blank text.
fn given(key: &str) -> Value {
    json!({
        "required": [key],
        "properties": {key: {"not": {"anyOf": [
            {"type": "null"},
            {"type": "string", "pattern": "^\\s*$"},
        ]}}},
    })
}

/// `Addresses` lists the address kind `word` (in any case).
fn lists(word: &str) -> Value {
    json!({
        "required": ["Addresses"],
        "properties": {"Addresses": {"type": "array", "contains": {
            "type": "string",
            "pattern": words_pattern(&[word]),
        }}},
    })
}

/// `key` holds what the binary reads as `boolean` (values.rs
/// `parse_bool`): the JSON boolean, 1 or 0, or one of its words.
fn is(key: &str, boolean: bool) -> Value {
    let words = if boolean { TRUE_WORDS } else { FALSE_WORDS };
    json!({
        "required": [key],
        "properties": {key: {"anyOf": [
            {"const": boolean},
            {"const": u8::from(boolean)},
            {"type": "string", "pattern": words_pattern(words)},
        ]}},
    })
}

/// With `WatchNodes` false, no pool may need the Node watch: failover,
/// NodeSelector (its own or Robot's) and node rules other than the
/// defaults (loader.rs).
fn without_node_watch() -> Value {
    let object = |inner: Value| {
        let mut inner = inner;
        inner["type"] = json!("object");
        inner
    };
    json!({
        "if": is("WatchNodes", false),
        "then": {"properties": {"Pools": {"items": {"not": {"anyOf": [
            is("FloatingIpFailover", true),
            given("NodeSelector"),
            {"required": ["Robot"], "properties": {"Robot": object(given("NodeSelector"))}},
            {"required": ["Nodes"], "properties": {"Nodes": object(json!({"anyOf": [
                given("ExcludeUnhealthyAfter"),
                is("RequireNode", true),
            ]}))}},
        ]}}}}},
    })
}

/// One of `words`, in any case, with blanks around it: the binary trims
/// and lowercases. Spelled with character classes, as every regex dialect
/// of JSON Schema validators reads them.
fn words_pattern(words: &[&str]) -> String {
    let spelled: Vec<String> = words
        .iter()
        .map(|word| {
            word.chars()
                .map(|c| match c {
                    c if c.is_ascii_alphabetic() => {
                        format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
                    }
                    // `-` needs no escape outside a class (and `\-` is
                    // refused by ECMA-262's `u` mode).
                    c if c.is_ascii_alphanumeric() || c == '-' => c.to_string(),
                    c => format!("\\{c}"),
                })
                .collect()
        })
        .collect();
    format!("^\\s*({})\\s*$", spelled.join("|"))
}

fn object_schema(fields: &[PoolField]) -> Value {
    let properties: Map<String, Value> = fields
        .iter()
        .map(|f| {
            let mut schema = field_schema(f.value);
            schema["description"] = Value::String(plain(f.meaning));
            (f.key.to_owned(), schema)
        })
        .collect();
    json!({"type": "object", "additionalProperties": false, "properties": properties})
}

/// A field's value; null is always taken (the binary reads it as left
/// out), and text also as a number or a boolean (read as its text).
fn field_schema(value: FieldType) -> Value {
    match value {
        FieldType::Text | FieldType::TextOrNumber | FieldType::TextOrBool => {
            json!({"type": ["string", "number", "boolean", "null"]})
        }
        // A duration needs its unit; only 0 may go without.
        FieldType::Duration => json!({"anyOf": [{"type": ["string", "null"]}, {"const": 0}]}),
        // An object of labels (or annotations; numbers and booleans become
        // their text), or its JSON or selector text.
        FieldType::Map => json!({
            "type": ["object", "string", "null"],
            "additionalProperties": {"type": ["string", "number", "boolean"]},
        }),
        FieldType::Kinds => json!({
            "type": ["array", "null"],
            "minItems": 1,
            "items": {"type": "string", "pattern": words_pattern(AddressKind::WORDS)},
            "description": format!("any of {}", AddressKind::WORDS.join(", ")),
        }),
        FieldType::Servers => json!({
            "type": ["array", "null"],
            "items": {"type": ["string", "integer"]},
        }),
        FieldType::Object(fields) => {
            let mut schema = object_schema(fields);
            schema["type"] = json!(["object", "null"]);
            schema
        }
    }
}

/// A description without Markdown: no backticks, a link's text only.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let link = rest[open..].find("](").and_then(|mid| {
            rest[open + mid..]
                .find(')')
                .map(|end| (mid, open + mid + end))
        });
        match link {
            Some((mid, end)) => {
                out.push_str(&rest[..open]);
                out.push_str(&rest[open + 1..open + mid]);
                rest = &rest[end + 1..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out.replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The binary refuses `60` (no unit) for exactly the settings the
    /// schema types as durations.
    #[test]
    fn exactly_the_duration_settings_refuse_a_bare_number() {
        let nowhere = std::path::Path::new("/nonexistent/config.json");
        for setting in SETTINGS {
            let mut env = std::collections::HashMap::from([(
                "CANADA_KAKTUS_HCLOUD_TOKEN".to_owned(),
                "t0ken".to_owned(),
            )]);
            env.insert(setting.env.to_owned(), "60".to_owned());
            let error = super::super::load_with_default_file(None, &env, nowhere)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            let refused = error.contains(setting.env) && error.contains("unit");
            assert_eq!(
                refused,
                DURATION_SETTINGS.contains(&setting.key),
                "{}: {error}",
                setting.key
            );
        }
    }

    #[test]
    fn plain_text_keeps_a_links_words() {
        assert_eq!(
            plain("see [Node rules](../explanation/node-rules.md), `true` or [x"),
            "see Node rules, true or [x"
        );
    }

    #[test]
    fn a_pool_needs_a_name_and_a_selector_or_robot() {
        let pool = pool_schema();
        assert_eq!(pool["required"], json!(["Name"]));
        assert_eq!(
            pool["anyOf"],
            json!([given("LabelSelector"), given("Robot")])
        );
        assert_eq!(pool["properties"]["Robot"]["additionalProperties"], false);
        assert!(pool["properties"]["Robot"]["then"]["anyOf"].is_array());
        assert_eq!(pool["properties"]["Addresses"]["minItems"], 1);
        assert!(pool["properties"]["Robot"]["properties"]["Servers"].is_object());
    }
}
