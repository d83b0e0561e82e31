//! `[controllers.settings]`: any TOML table, handed to the controller's
//! guest as a JSON object (`settings.get` of `leasehold:controller@0.2.0`).
//!
//! Owns the one mapping from TOML to JSON and its checks: a table, no float
//! JSON cannot carry, at most [`MAX_SETTINGS_BYTES`] of JSON text. Must
//! never quote a value in a message: settings may hold secrets. Keys are
//! named by their dotted path.

use crate::limits::MAX_SETTINGS_BYTES;
use crate::runtime::Settings;

/// Turn a `settings` value into [`Settings`], or say what is wrong with
/// it (every problem, each naming its key path).
pub(super) fn settings(value: &toml::Value) -> Result<Settings, Vec<String>> {
    let toml::Value::Table(table) = value else {
        return Err(vec![format!(
            "settings must be a table (`[controllers.settings]` or `settings = {{ ... }}`), \
             not {}",
            type_name(value)
        )]);
    };
    let mut problems = Vec::new();
    let mut map = serde_json::Map::new();
    for (key, value) in table {
        let path = format!("settings.{}", show_key(key));
        map.insert(key.clone(), json(value, &path, &mut problems));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let settings = Settings::from_map(map);
    if settings.len() > MAX_SETTINGS_BYTES {
        return Err(vec![format!(
            "settings are {} bytes as JSON; at most {MAX_SETTINGS_BYTES} bytes are allowed \
             (put data in objects, not in the config)",
            settings.len()
        )]);
    }
    Ok(settings)
}

/// A key as it would be written in a dotted path: bare when it can be.
fn show_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// `value` as JSON: strings, booleans and arrays as they are, tables as
/// objects, numbers as numbers, date-times as their RFC 3339 text. A float
/// JSON cannot carry (`nan`, `inf`) is a problem at `path`.
fn json(value: &toml::Value, path: &str, problems: &mut Vec<String>) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        toml::Value::String(text) => J::String(text.clone()),
        toml::Value::Integer(n) => J::from(*n),
        toml::Value::Float(x) => match serde_json::Number::from_f64(*x) {
            Some(number) => J::Number(number),
            None => {
                problems.push(format!(
                    "{path}: nan and infinite floats cannot be handed to the guest as JSON"
                ));
                J::Null
            }
        },
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(at) => J::String(at.to_string()),
        toml::Value::Array(items) => J::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| json(item, &format!("{path}[{i}]"), problems))
                .collect(),
        ),
        toml::Value::Table(table) => J::Object(
            table
                .iter()
                .map(|(key, item)| {
                    let path = format!("{path}.{}", show_key(key));
                    (key.clone(), json(item, &path, problems))
                })
                .collect(),
        ),
    }
}
