//! The chart's schema for its `config` value (the `properties.config` part
//! of deploy/helm/canada-kaktus/values.schema.json), made from the settings
//! table and the pool fields, so that the chart takes every setting and
//! every pool field the manual documents. A test holds the file equal to
//! [`chart_config_schema`].

use serde_json::{json, Map, Value};

use super::{
    accepts_list, accepts_object, AddressKind, FieldType, PoolField, Setting, POOL_FIELDS,
    SETTINGS, SINGLE_POOL_SETTINGS,
};

/// Settings the chart sets itself, so `config` refuses them: the token and
/// the Robot credentials come from Secrets (`token.*`, `robot.*`), the
/// listen address must match the probes' port, and the Lease's namespace
/// is the release's.
pub const MANAGED_BY_THE_CHART: &[&str] = &[
    "HcloudToken",
    "HcloudTokenFile",
    "RobotUser",
    "RobotPassword",
    "RobotPasswordFile",
    "ListenAddress",
    "LeaseNamespace",
];

/// The schema of the chart's `config` value.
pub fn chart_config_schema() -> Value {
    let properties: Map<String, Value> = SETTINGS
        .iter()
        .filter(|s| !MANAGED_BY_THE_CHART.contains(&s.key))
        .map(|s| (s.key.to_owned(), setting_schema(s)))
        .collect();
    // `Pools` replaces the single-pool settings: never both.
    let single: Vec<Value> = SINGLE_POOL_SETTINGS
        .iter()
        .map(|s| json!({"required": [s.key]}))
        .collect();
    json!({
        "type": "object",
        "additionalProperties": false,
        "not": {"allOf": [{"required": ["Pools"]}, {"anyOf": single}]},
        "description": format!(
            "Controller settings by config.json key (docs/reference/settings.md); {} are set by \
             the chart",
            MANAGED_BY_THE_CHART.join(", ")
        ),
        "properties": properties,
    })
}

fn setting_schema(setting: &Setting) -> Value {
    let description = plain(setting.description);
    if accepts_list(setting) {
        return json!({
            "description": description,
            "type": "array",
            "minItems": 1,
            "items": pool_schema(),
        });
    }
    if accepts_object(setting) {
        let mut schema = field_schema(FieldType::Map);
        schema["description"] = Value::String(description);
        return schema;
    }
    // Read as text, as config.json's numbers and booleans are.
    json!({"description": description, "type": ["string", "number", "boolean"]})
}

/// One entry of `Pools`: `Name`, and `LabelSelector` or `Robot`.
fn pool_schema() -> Value {
    let mut schema = object_schema(POOL_FIELDS);
    schema["required"] = json!(["Name"]);
    schema["anyOf"] = json!([{"required": ["LabelSelector"]}, {"required": ["Robot"]}]);
    // A Robot object names servers or a Node selector, at least one.
    schema["properties"]["Robot"]["minProperties"] = json!(1);
    schema
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

fn field_schema(value: FieldType) -> Value {
    match value {
        FieldType::Text => json!({"type": "string"}),
        FieldType::TextOrNumber => json!({"type": ["string", "number"]}),
        // true/false, their text, or 1/0.
        FieldType::TextOrBool => json!({"type": ["string", "number", "boolean"]}),
        // An object of labels (or annotations; numbers and booleans become
        // their text), or its JSON or selector text.
        FieldType::Map => json!({
            "type": ["object", "string"],
            "additionalProperties": {"type": ["string", "number", "boolean"]},
        }),
        FieldType::Kinds => json!({
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "enum": AddressKind::WORDS},
        }),
        FieldType::Servers => json!({
            "type": "array",
            "items": {"type": ["string", "integer"]},
        }),
        FieldType::Object(fields) => object_schema(fields),
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
            json!([{"required": ["LabelSelector"]}, {"required": ["Robot"]}])
        );
        assert_eq!(pool["properties"]["Robot"]["additionalProperties"], false);
        assert_eq!(pool["properties"]["Robot"]["minProperties"], 1);
        assert_eq!(pool["properties"]["Addresses"]["minItems"], 1);
        assert!(pool["properties"]["Robot"]["properties"]["Servers"].is_object());
    }
}
