//! A controller's settings checked against the JSON Schema its component
//! gives in `describe` (`leasehold:controller@0.4.0`
//! `description.settings-schema`): `leasehold check`, the start and a
//! reload refuse `[controllers.settings]` that do not fit, naming every
//! key that is wrong, missing or unknown.
//!
//! Owns: the subset of JSON Schema (2020-12) the WIT documents (`type`,
//! `properties`, `required`, `additionalProperties`, `items`, `enum`,
//! `const`, the numeric and length bounds, `anyOf`/`oneOf`/`allOf`, local
//! `$ref`), what a schema must be to be used, and the words a problem is
//! told in. Must never: quote a settings value in a problem (settings may
//! hold secrets): problems name the key path and the kind of value found,
//! and the schema's own figures (a bound, the allowed values).

use serde_json::{Map, Value};

/// Largest schema a component may give (the size of settings themselves).
pub const MAX_SCHEMA_BYTES: usize = crate::limits::MAX_SETTINGS_BYTES;

/// Deepest nesting the checker follows (through `$ref`s too): a schema
/// that refers to itself would otherwise never end.
const MAX_DEPTH: usize = 64;

/// A usable schema.
#[derive(Debug, Clone)]
pub struct SettingsSchema {
    root: Value,
}

impl SettingsSchema {
    /// The schema of `text`, or what keeps it from being used.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > MAX_SCHEMA_BYTES {
            return Err(format!(
                "its settings schema is {} bytes; at most {MAX_SCHEMA_BYTES}",
                text.len()
            ));
        }
        let root: Value = serde_json::from_str(text)
            .map_err(|e| format!("its settings schema is not JSON ({e})"))?;
        if !root.is_object() {
            return Err("its settings schema is not a JSON object".to_string());
        }
        let schema = Self { root };
        schema.check_refs(&schema.root, 0)?;
        Ok(schema)
    }

    /// Every `$ref` resolves, every `type` is a known one.
    fn check_refs(&self, node: &Value, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!("its settings schema nests deeper than {MAX_DEPTH}"));
        }
        match node {
            Value::Object(map) => {
                if let Some(reference) = map.get("$ref") {
                    let reference = reference
                        .as_str()
                        .ok_or("its settings schema has a $ref that is not a string")?;
                    self.resolve(reference)?;
                }
                if let Some(kind) = map.get("type") {
                    let kinds: Vec<&Value> = match kind {
                        Value::Array(list) => list.iter().collect(),
                        one => vec![one],
                    };
                    for kind in kinds {
                        match kind.as_str() {
                            Some(
                                "object" | "array" | "string" | "integer" | "number" | "boolean"
                                | "null",
                            ) => {}
                            _ => {
                                return Err(format!(
                                    "its settings schema has an unknown type {kind}"
                                ));
                            }
                        }
                    }
                }
                for (key, value) in map {
                    // `enum`, `const`, `default` and `examples` hold
                    // values, not schemas.
                    if !matches!(key.as_str(), "enum" | "const" | "default" | "examples") {
                        self.check_refs(value, depth + 1)?;
                    }
                }
                Ok(())
            }
            Value::Array(items) => items
                .iter()
                .try_for_each(|item| self.check_refs(item, depth + 1)),
            _ => Ok(()),
        }
    }

    /// The schema a local `$ref` names.
    fn resolve(&self, reference: &str) -> Result<&Value, String> {
        let found = ["#/$defs/", "#/definitions/"]
            .iter()
            .find_map(|prefix| {
                let name = reference.strip_prefix(prefix)?;
                let section = prefix.trim_start_matches("#/").trim_end_matches('/');
                self.root.get(section)?.get(name)
            })
            .or_else(|| (reference == "#").then_some(&self.root));
        found.ok_or_else(|| {
            format!(
                "its settings schema refers to {reference:?}, which it does not define (only \
                 #/$defs/NAME and #/definitions/NAME are followed)"
            )
        })
    }

    /// Every problem of `settings` against the schema, each naming its key
    /// path (`settings.db.port`), never a value.
    pub fn validate(&self, settings: &Value) -> Vec<String> {
        let mut problems = Vec::new();
        self.check(&self.root, settings, "settings", 0, &mut problems);
        problems
    }

    fn check(
        &self,
        schema: &Value,
        value: &Value,
        path: &str,
        depth: usize,
        problems: &mut Vec<String>,
    ) {
        if depth > MAX_DEPTH {
            problems.push(format!("{path}: nested deeper than {MAX_DEPTH}"));
            return;
        }
        let schema = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => {
                problems.push(format!("{path}: no value is allowed here"));
                return;
            }
            Value::Object(map) => map,
            _ => return,
        };
        if let Some(Value::String(reference)) = schema.get("$ref")
            && let Ok(target) = self.resolve(reference)
        {
            self.check(target, value, path, depth + 1, problems);
        }
        if let Some(kind) = schema.get("type")
            && !type_matches(kind, value)
        {
            problems.push(format!(
                "{path}: expected {}, found {}",
                expected(kind),
                found(value)
            ));
            // Nothing else of this schema means anything for this value.
            return;
        }
        if let Some(Value::Array(allowed)) = schema.get("enum")
            && !allowed.iter().any(|a| same(a, value))
        {
            problems.push(format!(
                "{path}: not one of the allowed values ({})",
                allowed
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(constant) = schema.get("const")
            && !same(constant, value)
        {
            problems.push(format!("{path}: must be {constant}"));
        }
        bounds(schema, value, path, problems);
        match value {
            Value::Object(map) => self.check_object(schema, map, path, depth, problems),
            Value::Array(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(
                            item_schema,
                            item,
                            &format!("{path}[{i}]"),
                            depth + 1,
                            problems,
                        );
                    }
                }
            }
            _ => {}
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            for part in all {
                self.check(part, value, path, depth + 1, problems);
            }
        }
        for keyword in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = schema.get(keyword) {
                self.check_branches(keyword, branches, value, path, depth, problems);
            }
        }
    }

    fn check_object(
        &self,
        schema: &Map<String, Value>,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
        problems: &mut Vec<String>,
    ) {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = schema.get("required") {
            for key in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(key) {
                    problems.push(format!("{path}.{key}: missing (required)"));
                }
            }
        }
        for (key, item) in map {
            let at = format!("{path}.{key}");
            match properties.and_then(|p| p.get(key)) {
                Some(property) => self.check(property, item, &at, depth + 1, problems),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        let known: Vec<&str> = properties
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        problems.push(format!(
                            "{at}: unknown key (the settings have {})",
                            if known.is_empty() {
                                "no keys".to_string()
                            } else {
                                known.join(", ")
                            }
                        ));
                    }
                    Some(extra @ Value::Object(_)) => {
                        self.check(extra, item, &at, depth + 1, problems)
                    }
                    _ => {}
                },
            }
        }
    }

    /// `anyOf` (at least one branch fits) and `oneOf` (exactly one does).
    fn check_branches(
        &self,
        keyword: &str,
        branches: &[Value],
        value: &Value,
        path: &str,
        depth: usize,
        problems: &mut Vec<String>,
    ) {
        let outcomes: Vec<Vec<String>> = branches
            .iter()
            .map(|branch| {
                let mut found = Vec::new();
                self.check(branch, value, path, depth + 1, &mut found);
                found
            })
            .collect();
        let fitting = outcomes.iter().filter(|o| o.is_empty()).count();
        if fitting == 0 {
            // The closest branch says best what is wrong.
            let closest = outcomes
                .into_iter()
                .min_by_key(Vec::len)
                .unwrap_or_default();
            if closest.is_empty() {
                problems.push(format!("{path}: fits none of its allowed shapes"));
            }
            problems.extend(closest);
        } else if keyword == "oneOf" && fitting > 1 {
            problems.push(format!(
                "{path}: fits {fitting} of its allowed shapes; exactly one is allowed"
            ));
        }
    }
}

/// Whether `value` is of the schema type(s) `kind` (`integer` is a number
/// without a fraction).
fn type_matches(kind: &Value, value: &Value) -> bool {
    let one = |name: &str| match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    };
    match kind {
        Value::String(name) => one(name),
        Value::Array(names) => names.iter().filter_map(Value::as_str).any(one),
        _ => true,
    }
}

fn expected(kind: &Value) -> String {
    match kind {
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        other => other.as_str().unwrap_or("?").to_string(),
    }
}

/// The kind of a value, never the value.
fn found(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

/// JSON equality, numbers by value (`1` and `1.0` are the same).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A numeric bound: its schema key, whether a value breaks it, and the
/// words that say so.
type NumberRule = (&'static str, fn(f64, f64) -> bool, &'static str);

/// The numeric, length and size bounds of `schema` that `value` breaks.
fn bounds(schema: &Map<String, Value>, value: &Value, path: &str, problems: &mut Vec<String>) {
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    if let Some(n) = value.as_f64() {
        let rules: [NumberRule; 4] = [
            ("minimum", |n, b| n < b, "below the minimum"),
            ("maximum", |n, b| n > b, "above the maximum"),
            ("exclusiveMinimum", |n, b| n <= b, "not above"),
            ("exclusiveMaximum", |n, b| n >= b, "not below"),
        ];
        for (key, breaks, words) in rules {
            if let Some(b) = bound(key)
                && breaks(n, b)
            {
                problems.push(format!("{path}: {words} {b}"));
            }
        }
    }
    let size = match value {
        Value::String(s) => Some((
            s.chars().count() as f64,
            "minLength",
            "maxLength",
            "characters",
        )),
        Value::Array(items) => Some((items.len() as f64, "minItems", "maxItems", "items")),
        _ => None,
    };
    if let Some((size, min, max, unit)) = size {
        if let Some(b) = bound(min)
            && size < b
        {
            problems.push(format!("{path}: fewer than {b} {unit}"));
        }
        if let Some(b) = bound(max)
            && size > b
        {
            problems.push(format!("{path}: more than {b} {unit}"));
        }
    }
}

/// The `http(s)://` URLs among `settings`' string values that `allow`
/// does not cover, by key path (the URL shown without user information
/// or query).
pub fn uncovered_urls(settings: &Value, allow: &crate::outbound::AllowList) -> Vec<String> {
    fn walk(value: &Value, path: &str, allow: &crate::outbound::AllowList, out: &mut Vec<String>) {
        match value {
            Value::String(text) if text.starts_with("http://") || text.starts_with("https://") => {
                if let Ok(uri) = text.parse::<http::Uri>()
                    && allow.check(&uri).is_err()
                {
                    out.push(format!("{path} ({})", crate::outbound::display_url(&uri)));
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    walk(item, &format!("{path}.{key}"), allow, out);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), allow, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(settings, "settings", allow, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> SettingsSchema {
        SettingsSchema::parse(&value.to_string()).unwrap()
    }

    /// A schema of the shape schemars gives a serde type: `$defs`, `$ref`,
    /// `anyOf` with null for an `Option`, `additionalProperties: false`
    /// for `deny_unknown_fields`.
    fn database_schema() -> SettingsSchema {
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Settings",
            "type": "object",
            "properties": {
                "db": {"$ref": "#/$defs/Db"},
                "regions": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "mode": {"enum": ["fast", "safe"]},
                "timeout_ms": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
            },
            "required": ["db", "regions"],
            "additionalProperties": false,
            "$defs": {
                "Db": {
                    "type": "object",
                    "properties": {
                        "host": {"type": "string", "minLength": 1},
                        "port": {"type": "integer", "minimum": 1, "maximum": 65535}
                    },
                    "required": ["host"],
                    "additionalProperties": false
                }
            }
        }))
    }

    #[test]
    fn settings_that_fit_have_no_problem() {
        let ok = json!({"db": {"host": "db1", "port": 5432}, "regions": ["eu"], "mode": "safe",
                        "timeout_ms": null});
        assert_eq!(database_schema().validate(&ok), Vec::<String>::new());
    }

    #[test]
    fn every_wrong_missing_or_unknown_key_is_named_without_its_value() {
        let bad = json!({
            "db": {"hots": "secret-host-name", "port": "5432"},
            "regions": [],
            "mode": "turbo",
            "timeout_ms": 0,
            "extra": "hunter2"
        });
        let problems = database_schema().validate(&bad);
        let expect = [
            "settings.db.host: missing (required)",
            "settings.db.hots: unknown key (the settings have host, port)",
            "settings.db.port: expected integer, found a string",
            "settings.regions: fewer than 1 items",
            "settings.mode: not one of the allowed values (\"fast\", \"safe\")",
            "settings.timeout_ms: below the minimum 1",
            "settings.extra: unknown key (the settings have db, mode, regions, timeout_ms)",
        ];
        for line in expect {
            assert!(
                problems.iter().any(|p| p == line),
                "no {line:?} in {problems:#?}"
            );
        }
        assert_eq!(problems.len(), expect.len(), "{problems:#?}");
        let all = problems.join("\n");
        for secret in ["secret-host-name", "hunter2", "5432", "turbo"] {
            assert!(!all.contains(secret), "a value is quoted: {all}");
        }
    }

    #[test]
    fn a_missing_top_level_key_is_named() {
        let problems = database_schema().validate(&json!({"regions": ["eu"]}));
        assert_eq!(problems, ["settings.db: missing (required)"]);
    }

    #[test]
    fn unusable_schemas_are_refused_saying_why() {
        for (text, fragment) in [
            ("[1]", "not a JSON object"),
            ("{", "not JSON"),
            (r##"{"$ref": "#/$defs/Nope"}"##, "does not define"),
            (r#"{"type": "text"}"#, "unknown type"),
        ] {
            let refused = SettingsSchema::parse(text).unwrap_err();
            assert!(refused.contains(fragment), "{text}: {refused}");
        }
        let huge = format!(r#"{{"description": "{}"}}"#, "x".repeat(MAX_SCHEMA_BYTES));
        assert!(SettingsSchema::parse(&huge).unwrap_err().contains("bytes"));
    }

    #[test]
    fn one_of_needs_exactly_one_branch() {
        let s = schema(json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}));
        assert_eq!(s.validate(&json!(2.5)), Vec::<String>::new());
        assert_eq!(
            s.validate(&json!(2)),
            ["settings: fits 2 of its allowed shapes; exactly one is allowed"]
        );
    }

    #[test]
    fn a_self_referring_schema_ends() {
        let s = schema(json!({"$ref": "#"}));
        let problems = s.validate(&json!({}));
        assert!(
            problems.iter().any(|p| p.contains("deeper")),
            "{problems:?}"
        );
    }

    #[test]
    fn urls_in_settings_outside_http_allow_are_named() {
        let allow = crate::outbound::AllowList::parse(&["https://api.example.com/v1"]).unwrap();
        let settings = json!({
            "api": "https://api.example.com/v1/buckets",
            "hooks": ["https://other.example.com/x?token=secret"],
            "plain": "not a url"
        });
        assert_eq!(
            uncovered_urls(&settings, &allow),
            ["settings.hooks[0] (https://other.example.com/x)"]
        );
    }
}
