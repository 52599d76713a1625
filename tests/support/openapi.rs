//! Hetzner's OpenAPI document for the Cloud API (OpenAPI 3.1, as served on
//! 2026-07-08, kept in `../shared/reference/hetzner-cloud-openapi.json`
//! beside the project, never copied into it) as a strict checker of the
//! documents the fake Hetzner serves: objects with `properties` are taken
//! as closed (the document does not say `additionalProperties: false`, so
//! a plain validator would accept a field Hetzner removed, such as
//! `datacenter`), and a problem names where it is.
//!
//! The subset of JSON Schema the checked answers use: `type` (one or a
//! list, with `null`), `properties`, `required`, `additionalProperties`,
//! `items`, `enum`, `minimum`, `maximum`, `minLength`, `maxLength` and
//! `format` (`date-time`, `int32`). Any other keyword (`$ref`, `allOf`,
//! `oneOf`, …) stops the test until the checker is taught it.

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

    /// The document, read once for the whole test process (several tests
    /// of a tier hold documents against it).
    pub fn shared() -> &'static Spec {
        static SPEC: std::sync::OnceLock<Spec> = std::sync::OnceLock::new();
        SPEC.get_or_init(Spec::load)
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

    fn check(&self, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
        known_keywords(schema, at, "checker");
        self.check_typed(schema, value, at, problems);
    }

    fn check_typed(&self, schema: &Value, value: &Value, at: &str, problems: &mut Vec<String>) {
        if !type_fits(schema.get("type"), value) {
            problems.push(format!("{at}: {value} is not of type {}", schema["type"]));
            return;
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            if !allowed.contains(value) {
                problems.push(format!("{at}: {value} is not one of {allowed:?}"));
            }
        }
        if let (Some(text), Some(format)) = (value.as_str(), schema.get("format")) {
            if format == "date-time" && !is_date_time(text) {
                problems.push(format!("{at}: {value} is no RFC 3339 date-time"));
            }
        }
        if let (Some(number), Some(format)) = (value.as_i64(), schema.get("format")) {
            if format == "int32" && i32::try_from(number).is_err() {
                problems.push(format!("{at}: {value} is no int32"));
            }
        }
        if let Some(text) = value.as_str() {
            let length = text.chars().count() as u64;
            let short = schema
                .get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| length < m);
            let long = schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| length > m);
            if short || long {
                problems.push(format!("{at}: {value} has a length out of range"));
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
            self.check_object(schema, object, at, problems);
        }
    }

    fn check_object(
        &self,
        schema: &Value,
        object: &serde_json::Map<String, Value>,
        at: &str,
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
                (None, None) if properties.is_some() => {
                    problems.push(format!("{path}: not in the schema"))
                }
                (None, None) => {}
            }
        }
    }
}

/// Makes documents the schema allows, at random: every type a field may
/// have (`null` where allowed), optional fields present or absent, every
/// enum value, numbers within their bounds. `strings` may give a field's
/// value by its JSON path (`$.servers[].public_net.ipv4.ip`), so that
/// addresses are addresses often enough; `None` falls back to the schema.
pub struct Generator<'a, R> {
    pub rng: &'a mut R,
    pub strings: &'a dyn Fn(&str, &mut R) -> Option<Value>,
    /// Most items an array gets.
    pub most_items: usize,
}

impl<R: rand::Rng> Generator<'_, R> {
    pub fn value(&mut self, schema: &Value, at: &str) -> Value {
        known_keywords(schema, at, "generator");
        let kinds: Vec<&str> = match schema.get("type") {
            Some(Value::String(kind)) => vec![kind.as_str()],
            Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
            _ => vec!["null"],
        };
        // An enum is the whole choice (`null` only when it lists `null`,
        // whatever `type` says).
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            return allowed[self.rng.random_range(0..allowed.len())].clone();
        }
        let nullable = kinds.contains(&"null");
        let kinds: Vec<&str> = kinds.into_iter().filter(|k| *k != "null").collect();
        if kinds.is_empty() || (nullable && self.rng.random_bool(0.25)) {
            return Value::Null;
        }
        let kind = kinds[self.rng.random_range(0..kinds.len())];
        match kind {
            "object" => self.object(schema, at),
            "array" => {
                let count = self.rng.random_range(0..=self.most_items);
                let items = &schema["items"];
                let at = format!("{at}[]");
                Value::Array((0..count).map(|_| self.value(items, &at)).collect())
            }
            "string" => match (self.strings)(at, self.rng) {
                Some(value) => value,
                None => self.string(schema),
            },
            "integer" => self.integer(schema).into(),
            "number" => {
                let low = schema
                    .get("minimum")
                    .and_then(Value::as_f64)
                    .unwrap_or(-1e6);
                let high = schema.get("maximum").and_then(Value::as_f64).unwrap_or(1e6);
                serde_json::json!(self.rng.random_range(low..=high))
            }
            "boolean" => self.rng.random_bool(0.5).into(),
            other => panic!("the OpenAPI generator does not know type {other:?} (at {at})"),
        }
    }

    fn object(&mut self, schema: &Value, at: &str) -> Value {
        let required: Vec<&str> = (schema.get("required").and_then(Value::as_array))
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut object = serde_json::Map::new();
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                if required.contains(&name.as_str()) || self.rng.random_bool(0.7) {
                    let value = self.value(property, &format!("{at}.{name}"));
                    object.insert(name.clone(), value);
                }
            }
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            for _ in 0..self.rng.random_range(0..3) {
                let key = self.text(1, 12);
                let value = self.value(extra, &format!("{at}{{*}}"));
                object.insert(key, value);
            }
        }
        Value::Object(object)
    }

    fn integer(&mut self, schema: &Value) -> i64 {
        let int32 = schema.get("format").is_some_and(|f| f == "int32");
        let (floor, ceiling) = if int32 {
            (i64::from(i32::MIN), i64::from(i32::MAX))
        } else {
            (i64::MIN, i64::MAX)
        };
        let low = schema
            .get("minimum")
            .and_then(Value::as_i64)
            .unwrap_or(floor);
        let high = schema
            .get("maximum")
            .and_then(Value::as_i64)
            .unwrap_or(ceiling);
        // Mostly small, as IDs and page numbers are; now and then any.
        let small = low.max(-3)..=high.min(100);
        if !small.is_empty() && self.rng.random_bool(0.8) {
            self.rng.random_range(small)
        } else {
            self.rng.random_range(low..=high)
        }
    }

    fn string(&mut self, schema: &Value) -> Value {
        let format = schema.get("format").and_then(Value::as_str);
        if format == Some("date-time") {
            let (day, hour, minute) = (
                self.rng.random_range(1..=28),
                self.rng.random_range(0..24),
                self.rng.random_range(0..60),
            );
            return format!("2026-07-{day:02}T{hour:02}:{minute:02}:00Z").into();
        }
        if format == Some("decimal") {
            return format!(
                "{}.{:04}",
                self.rng.random_range(0..100),
                self.rng.random_range(0..10_000)
            )
            .into();
        }
        if let Some(example) = schema.get("example").filter(|e| e.is_string()) {
            if self.rng.random_bool(0.3) {
                return example.clone();
            }
        }
        let low = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let high = schema
            .get("maxLength")
            .and_then(Value::as_u64)
            .unwrap_or(24) as usize;
        if schema.get("pattern").is_some() {
            // The patterns in use are lower-case words joined by dashes.
            let word = self.text(low.max(1), high.min(12));
            return word
                .to_lowercase()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "a")
                .into();
        }
        self.text(low, high).into()
    }

    /// `low..=high` characters: letters, digits, and now and then a
    /// character that needs escaping or is not ASCII.
    fn text(&mut self, low: usize, high: usize) -> String {
        const ODD: &[char] = &['"', '\\', '/', '\n', 'é', '✓', '\u{0}', ' ', ':', '.'];
        let length = self.rng.random_range(low..=high.max(low));
        (0..length)
            .map(|_| {
                if self.rng.random_bool(0.1) {
                    ODD[self.rng.random_range(0..ODD.len())]
                } else {
                    char::from(self.rng.random_range(b'a'..=b'z'))
                }
            })
            .collect()
    }
}

/// Stops the test on a schema keyword the checker and the generator do
/// not handle (`who` says which met it), so none is skipped silently.
fn known_keywords(schema: &Value, at: &str, who: &str) {
    for keyword in schema.as_object().into_iter().flat_map(|o| o.keys()) {
        assert!(
            CHECKED.contains(&keyword.as_str())
                || ANNOTATIONS.contains(&keyword.as_str())
                || keyword.starts_with("x-"),
            "the OpenAPI {who} does not know {keyword:?} (at {at}): teach it first"
        );
    }
}

/// The keywords the checker enforces.
const CHECKED: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "format",
];

/// Keywords that say nothing a document must meet (`pattern` only names
/// a location's or zone's letters, which the fake takes from its own list).
const ANNOTATIONS: &[&str] = &[
    "description",
    "example",
    "examples",
    "title",
    "deprecated",
    "default",
    "readOnly",
    "writeOnly",
    "pattern",
];

/// `YYYY-MM-DDTHH:MM:SS`, optional fraction, then `Z` or `±HH:MM`.
fn is_date_time(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes
            .get(range)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    let head = bytes.len() >= 20
        && digits(0..4)
        && bytes[4] == b'-'
        && digits(5..7)
        && bytes[7] == b'-'
        && digits(8..10)
        && matches!(bytes[10], b'T' | b't')
        && digits(11..13)
        && bytes[13] == b':'
        && digits(14..16)
        && bytes[16] == b':'
        && digits(17..19);
    if !head {
        return false;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let end = fraction
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(fraction.len());
        if end == 0 {
            return false;
        }
        rest = &fraction[end..];
    }
    rest == "Z"
        || (rest.len() == 6
            && matches!(rest.as_bytes()[0], b'+' | b'-')
            && rest.as_bytes()[3] == b':'
            && rest[1..3].bytes().all(|b| b.is_ascii_digit())
            && rest[4..6].bytes().all(|b| b.is_ascii_digit()))
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
