//! Hetzner's OpenAPI document for the Cloud API (OpenAPI 3.1, as served on
//! 2026-07-08, kept in `../shared/reference/hetzner-cloud-openapi.json`
//! beside the project, never copied into it) as a strict checker of the
//! documents the fake Hetzner serves: objects with `properties` are taken
//! as closed (the document does not say `additionalProperties: false`, so
//! a plain validator would accept a field Hetzner removed, such as
//! `datacenter`), and a problem names where it is.
//!
//! The subset of JSON Schema the document uses: `type` (one or a list, with
//! `null`), `properties`, `required`, `additionalProperties`, `items`,
//! `enum`, `allOf`, `oneOf`, `anyOf`, `$ref`, `minimum` and `maximum`.

use serde_json::Value;

/// The document, read once.
pub struct Spec {
    document: Value,
}

impl Spec {
    /// Reads `../shared/reference/hetzner-cloud-openapi.json`.
    pub fn load() -> Spec {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/reference/hetzner-cloud-openapi.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: the suite checks the fake Hetzner against Hetzner's OpenAPI document, \
                 which CI lays beside the project in ../shared",
                path.display()
            )
        });
        Spec {
            document: serde_json::from_str(&text).expect("the OpenAPI document is JSON"),
        }
    }

    /// The JSON schema of the answer to `method path` with `status` (`"200"`,
    /// `"4xx"`, …).
    pub fn response(&self, method: &str, path: &str, status: &str) -> &Value {
        let schema = &self.document["paths"][path][method]["responses"][status]["content"]
            ["application/json"]["schema"];
        assert!(
            schema.is_object(),
            "the OpenAPI document has no JSON answer for {method} {path} {status}"
        );
        schema
    }

    /// Every way `value` breaks `schema`, each with its JSON path.
    pub fn problems(&self, schema: &Value, value: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        self.check(schema, value, "$", &mut problems);
        problems
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let pointer = reference.trim_start_matches('#');
                let target = self
                    .document
                    .pointer(pointer)
                    .unwrap_or_else(|| panic!("unresolved $ref {reference}"));
                self.resolve(target)
            }
            None => schema,
        }
    }

    fn check(&self, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
        let schema = self.resolve(schema);
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            // Each part open; closed over the union of their properties.
            for part in all {
                self.check_open(part, value, at, problems);
            }
            let mut names: Vec<&str> = Vec::new();
            for part in all.iter().map(|p| self.resolve(p)) {
                if let Some(properties) = part.get("properties").and_then(Value::as_object) {
                    names.extend(properties.keys().map(String::as_str));
                }
            }
            if let (Some(object), false) = (value.as_object(), names.is_empty()) {
                for key in object.keys() {
                    if !names.contains(&key.as_str()) {
                        problems.push(format!("{at}.{key}: not in the schema"));
                    }
                }
            }
            return;
        }
        for keyword in ["oneOf", "anyOf"] {
            if let Some(choices) = schema.get(keyword).and_then(Value::as_array) {
                let fits = choices
                    .iter()
                    .any(|choice| self.problems(choice, value).is_empty());
                if !fits {
                    problems.push(format!("{at}: fits none of {keyword}"));
                }
                return;
            }
        }
        self.check_typed(schema, value, at, true, problems);
    }

    fn check_open(&self, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
        let schema = self.resolve(schema);
        if schema.get("allOf").is_some()
            || schema.get("oneOf").is_some()
            || schema.get("anyOf").is_some()
        {
            self.check(schema, value, at, problems);
        } else {
            self.check_typed(schema, value, at, false, problems);
        }
    }

    fn check_typed(
        &self,
        schema: &Value,
        value: &Value,
        at: &str,
        closed: bool,
        problems: &mut Vec<String>,
    ) {
        if !type_fits(schema.get("type"), value) {
            problems.push(format!("{at}: {value} is not of type {}", schema["type"]));
            return;
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            if !allowed.contains(value) {
                problems.push(format!("{at}: {value} is not one of {allowed:?}"));
            }
        }
        if let Some(number) = value.as_f64() {
            let below = schema
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| number < m);
            let above = schema
                .get("maximum")
                .and_then(Value::as_f64)
                .is_some_and(|m| number > m);
            if below || above {
                problems.push(format!("{at}: {value} is out of range"));
            }
        }
        if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
            for (i, item) in array.iter().enumerate() {
                self.check(items, item, &format!("{at}[{i}]"), problems);
            }
        }
        if let Some(object) = value.as_object() {
            self.check_object(schema, object, at, closed, problems);
        }
    }

    fn check_object(
        &self,
        schema: &Value,
        object: &serde_json::Map<String, Value>,
        at: &str,
        closed: bool,
        problems: &mut Vec<String>,
    ) {
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !object.contains_key(name) {
                problems.push(format!("{at}.{name}: required but missing"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        for (key, field) in object {
            let path = format!("{at}.{key}");
            match (properties.and_then(|p| p.get(key)), additional) {
                (Some(property), _) => self.check(property, field, &path, problems),
                (None, Some(Value::Bool(true))) => {}
                (None, Some(Value::Bool(false))) => {
                    problems.push(format!("{path}: not in the schema"))
                }
                (None, Some(other)) => self.check(other, field, &path, problems),
                // Closed where the schema lists its properties.
                (None, None) if closed && properties.is_some() => {
                    problems.push(format!("{path}: not in the schema"))
                }
                (None, None) => {}
            }
        }
    }
}

/// Whether `value` is of the schema's `type` (absent: any).
fn type_fits(kind: Option<&Value>, value: &Value) -> bool {
    let fits = |kind: &str| match kind {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    };
    match kind {
        None => true,
        Some(Value::String(kind)) => fits(kind),
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).any(fits),
        Some(_) => true,
    }
}
