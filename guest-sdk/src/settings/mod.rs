//! The controller's settings: the `[controllers.settings]` table of its
//! entry in the host's config, handed to the guest as a JSON object.
//!
//! Owns: [`settings`] (typed, through serde, its errors naming the key
//! they happened under: `keyed.rs`) and [`settings_json`] (the text). Must
//! never: put a settings value in an error message (settings may hold
//! secrets, and a failed reconcile's message reaches the host's log), or
//! cache the settings (a test changes the fake's under the guest; on
//! `wasm32` they are fixed for the instance anyway: a reload that changes
//! them restarts the controller).

mod keyed;

use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::sys;

/// The controller's settings decoded as `T`.
///
/// The host hands them over as a JSON object (`{}` when the config has
/// none), so a `T` whose fields all have defaults (`#[serde(default)]`)
/// decodes from an entry without settings. A value of the wrong shape is
/// [`Error::Settings`]: its `key` names the key it failed on, as a path
/// from the top of the settings (`region`, `db.port`, `exempt[2]`), and its
/// message says what was wrong by type ("a string, expected u32"), never
/// quoting a value.
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
/// use serde::Deserialize;
///
/// #[derive(Debug, Deserialize)]
/// struct Quota {
///     #[serde(default = "ten")]
///     max_tasks: u32,
/// }
/// fn ten() -> u32 {
///     10
/// }
///
/// let host = FakeHost::new();
/// assert_eq!(leasehold_guest::settings::<Quota>()?.max_tasks, 10);
/// host.set_settings(&serde_json::json!({ "max_tasks": 3 }));
/// assert_eq!(leasehold_guest::settings::<Quota>()?.max_tasks, 3);
///
/// // A value of the wrong type: the error names the key, not the value.
/// host.set_settings(&serde_json::json!({ "max_tasks": "s3cret" }));
/// let error = leasehold_guest::settings::<Quota>().unwrap_err();
/// assert!(matches!(&error, leasehold_guest::Error::Settings { key: Some(k), .. } if k == "max_tasks"));
/// assert!(!error.to_string().contains("s3cret"));
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
pub fn settings<T: DeserializeOwned>() -> Result<T, Error> {
    let text = sys::settings();
    // The host sends a JSON object; parse it first, then decode it while
    // keeping track of the key being decoded.
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Settings {
        key: None,
        message: without_values(&e.to_string()),
    })?;
    keyed::decode(&value).map_err(|e| Error::Settings {
        key: e.key(),
        message: e.message,
    })
}

/// The controller's settings as the host sends them: the text of a JSON
/// object, `{}` when the config has none.
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
///
/// let host = FakeHost::new();
/// assert_eq!(leasehold_guest::settings_json(), "{}");
/// host.set_settings(&serde_json::json!({ "region": "eu" }));
/// assert_eq!(leasehold_guest::settings_json(), r#"{"region":"eu"}"#);
/// ```
pub fn settings_json() -> String {
    sys::settings()
}

/// serde's message with the string value it quotes cut out: `invalid
/// type: string "s3cret", expected u32` becomes `invalid type: string,
/// expected u32`. What follows `, expected` names types and fields, and
/// stays.
fn without_values(message: &str) -> String {
    let (head, tail) = message.split_at(message.find(", expected").unwrap_or(message.len()));
    match (head.find('"'), head.rfind('"')) {
        (Some(first), Some(last)) if last > first => {
            format!("{}{}{tail}", head[..first].trim_end(), &head[last + 1..])
        }
        _ => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::keyed::{KeyedError, decode};
    use super::without_values;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        region: String,
        #[serde(default)]
        db: Db,
        #[serde(default)]
        exempt: Vec<String>,
        #[serde(default)]
        mode: Mode,
        #[serde(default)]
        limits: BTreeMap<String, u32>,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    struct Db {
        #[serde(default)]
        port: u16,
        #[serde(default)]
        password: Option<String>,
        #[serde(default)]
        replicas: Vec<Replica>,
    }

    #[derive(Debug, PartialEq, Deserialize)]
    struct Replica {
        host: String,
        weight: f64,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        #[default]
        Fast,
        Careful {
            retries: u8,
        },
        Pinned(String),
    }

    fn failure(value: Value) -> KeyedError {
        match decode::<Settings>(&value) {
            Ok(decoded) => panic!("{value} decoded as {decoded:?}"),
            Err(e) => e,
        }
    }

    /// The key and the message of a failure, and proof that the message
    /// quotes none of the values given.
    fn named(value: Value, secrets: &[&str]) -> (Option<String>, String) {
        let error = failure(value);
        for secret in secrets {
            assert!(
                !error.message.contains(secret) && !error.to_string().contains(secret),
                "{error}"
            );
        }
        (error.key(), error.message)
    }

    #[test]
    fn what_serde_json_decodes_decodes_the_same() {
        let value = json!({
            "region": "eu",
            "db": { "port": 5432, "password": null, "replicas": [{ "host": "a", "weight": 0.5 }] },
            "exempt": ["ops", "sre"],
            "mode": { "careful": { "retries": 3 } },
            "limits": { "tasks": 10 },
        });
        let decoded = decode::<Settings>(&value).unwrap();
        assert_eq!(decoded.db.replicas[0].weight, 0.5);
        assert_eq!(decoded.mode, Mode::Careful { retries: 3 });
        assert_eq!(decoded.limits["tasks"], 10);
        #[derive(Debug, PartialEq, Deserialize)]
        struct Everything {
            n: i64,
            u: u128,
            f: f32,
            c: char,
            t: (u8, String),
            unit: (),
            newtype: Wrapped,
            pinned: Mode,
            fast: Mode,
            maybe: Option<Box<u8>>,
            #[serde(flatten)]
            rest: BTreeMap<String, Value>,
        }
        #[derive(Debug, PartialEq, Deserialize)]
        struct Wrapped(u8);
        let value = json!({
            "n": -3, "u": 7, "f": 1.5, "c": "x", "t": [1, "a"], "unit": null,
            "newtype": 4, "pinned": { "pinned": "b" }, "fast": "fast", "maybe": 2,
            "extra": { "kept": true },
        });
        let ours = decode::<Everything>(&value).unwrap();
        let theirs: Everything = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours.rest["extra"], json!({ "kept": true }));
    }

    #[test]
    fn a_missing_key_is_named() {
        assert_eq!(
            named(json!({}), &[]),
            (Some("region".into()), "missing".into())
        );
        assert_eq!(
            named(
                json!({ "region": "eu", "db": { "replicas": [{ "host": "a", "weight": 1 }, { "host": "b" }] } }),
                &[]
            ),
            (Some("db.replicas[1].weight".into()), "missing".into())
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_key_and_not_quoted() {
        assert_eq!(
            named(
                json!({ "region": "eu", "db": { "port": "s3cret" } }),
                &["s3cret"]
            ),
            (
                Some("db.port".into()),
                "invalid type: a string, expected u16".into()
            )
        );
        assert_eq!(
            named(
                json!({ "region": "eu", "db": { "port": 99999 } }),
                &["99999"]
            ),
            (
                Some("db.port".into()),
                "invalid value: a number, expected u16".into()
            )
        );
        assert_eq!(
            named(json!({ "region": 1234567 }), &["1234567"])
                .0
                .as_deref(),
            Some("region")
        );
        assert_eq!(
            named(
                json!({ "region": "eu", "exempt": ["ops", 41, "x"] }),
                &["41"]
            )
            .0
            .as_deref(),
            Some("exempt[1]")
        );
        assert_eq!(
            named(
                json!({ "region": "eu", "db": { "password": 123456 } }),
                &["123456"]
            )
            .0
            .as_deref(),
            Some("db.password")
        );
        assert_eq!(
            named(
                json!({ "region": "eu", "limits": { "tasks": "many" } }),
                &["many"]
            )
            .0
            .as_deref(),
            Some("limits.tasks")
        );
        assert_eq!(
            named(
                json!({ "region": "eu", "mode": { "careful": { "retries": "hunter2" } } }),
                &["hunter2"]
            )
            .0
            .as_deref(),
            Some("mode.careful.retries")
        );
    }

    #[test]
    fn an_unknown_key_is_named_and_an_unknown_variant_is_not_quoted() {
        let (key, message) = named(json!({ "region": "eu", "colour": "blue" }), &["blue"]);
        assert_eq!(key.as_deref(), Some("colour"));
        assert!(
            message.starts_with("unknown key, expected one of `region`"),
            "{message}"
        );
        let (key, message) = named(
            json!({ "region": "eu", "mode": "s3cret-mode" }),
            &["s3cret"],
        );
        assert_eq!(key.as_deref(), Some("mode"));
        assert!(
            message.starts_with("unknown variant, expected one of"),
            "{message}"
        );
    }

    #[test]
    fn the_settings_as_a_whole_have_no_key() {
        let error = decode::<Settings>(&json!("s3cret")).unwrap_err();
        assert_eq!(error.key(), None);
        assert_eq!(
            error.message,
            "invalid type: a string, expected struct Settings"
        );
    }

    #[test]
    fn quoted_values_are_cut_and_the_rest_kept() {
        assert_eq!(
            without_values(r#"invalid type: string "s3cret", expected u32 at line 1 column 9"#),
            "invalid type: string, expected u32 at line 1 column 9"
        );
        assert_eq!(
            without_values("missing field `region` at line 1 column 2"),
            "missing field `region` at line 1 column 2"
        );
    }
}
