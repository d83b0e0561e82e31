//! `leasehold:controller/settings` (0.2.0 and later): the controller's
//! `[controllers.settings]` table, as JSON text.
//!
//! Owns [`Settings`], the checked JSON text the config hands the runtime,
//! and the guest's read of it. Must never: show the settings in a log line,
//! an error or `{:?}` (they may hold an operator's secrets), or let the
//! guest change them.

use std::fmt;
use std::sync::Arc;

/// A controller's settings: a JSON object as compact text, shared by every
/// instance of the controller. `{}` by default.
///
/// `Debug` shows only the size: settings may hold secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Settings(Arc<str>);

impl Settings {
    /// Settings from JSON text that must be a JSON object. Returns what is
    /// wrong otherwise, without quoting the text.
    pub fn from_json(text: &str) -> Result<Self, String> {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(map)) => {
                Ok(Self(serde_json::Value::Object(map).to_string().into()))
            }
            Ok(_) => Err("settings must be a JSON object".to_string()),
            Err(e) => Err(format!(
                "settings are not JSON (line {}, column {})",
                e.line(),
                e.column()
            )),
        }
    }

    /// Settings from a JSON object.
    pub fn from_map(map: serde_json::Map<String, serde_json::Value>) -> Self {
        Self(serde_json::Value::Object(map).to_string().into())
    }

    /// The JSON text the guest reads.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// The size of the JSON text in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the settings are the empty object `{}`.
    pub fn is_empty(&self) -> bool {
        &*self.0 == "{}"
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self(Arc::from("{}"))
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Settings(<{} bytes of JSON>)", self.0.len())
    }
}

/// The settings slice of a guest's host state.
pub struct SettingsHost {
    settings: Settings,
}

impl SettingsHost {
    /// The settings one instance reads for its whole life.
    pub fn new(settings: Settings) -> Self {
        Self { settings }
    }

    /// `settings.get`: the JSON text, a copy the guest owns.
    pub fn json(&self) -> String {
        self.settings.as_json().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::Settings;

    #[test]
    fn only_a_json_object_is_settings() {
        let settings = Settings::from_json(r#"{ "b": 1, "a": [true, "x"] }"#).unwrap();
        let back: serde_json::Value = serde_json::from_str(settings.as_json()).unwrap();
        assert_eq!(back, serde_json::json!({ "a": [true, "x"], "b": 1 }));
        assert!(!settings.as_json().contains(' '), "compact text");
        assert!(Settings::from_json("[1]").is_err());
        assert!(Settings::from_json("nope").is_err());
        assert!(Settings::default().is_empty());
    }

    #[test]
    fn debug_shows_the_size_not_the_settings() {
        let settings = Settings::from_json(r#"{"token":"hunter2"}"#).unwrap();
        let shown = format!("{settings:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("19 bytes"), "{shown}");
    }
}
