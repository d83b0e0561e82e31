//! The controller's settings: the `[controllers.settings]` table of its
//! entry in the host's config, handed to the guest as a JSON object.
//!
//! Owns: [`settings`] (typed, through serde) and [`settings_json`] (the
//! text). Must never: put a settings value in an error message (settings
//! may hold secrets, and a failed reconcile's message reaches the host's
//! log), or cache the settings (a test changes the fake's under the guest;
//! on `wasm32` they are fixed for the instance anyway: a reload that
//! changes them restarts the controller).

use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::sys;

/// The controller's settings decoded as `T`.
///
/// The host hands them over as a JSON object (`{}` when the config has
/// none), so a `T` whose fields all have defaults (`#[serde(default)]`)
/// decodes from an entry without settings. A value of the wrong shape is
/// [`Error::Settings`], whose message names the problem but never quotes
/// a value.
///
/// # Example
///
/// ```
/// use leasehold_guest::FakeHost;
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
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
/// # Ok::<(), leasehold_guest::Error>(())
/// ```
pub fn settings<T: DeserializeOwned>() -> Result<T, Error> {
    let text = sys::settings();
    serde_json::from_str(&text).map_err(|e| Error::Settings {
        message: without_values(&e.to_string()),
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
    use super::without_values;

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
