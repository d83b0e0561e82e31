//! The world file of `leasehold sim`: what it may say, and every check of
//! it. A problem is a [`WorldError`] naming the key it is about
//! (`services[1].url`, `invariants[0].expr`), never a value of the
//! controller's settings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::faults::{FaultKind, Weights};
use super::invariants::{Invariant, When};
use super::service::FENCED_RECEIVER;
use crate::config::{Environment, controller_component, controller_settings};
use crate::limits::MAX_CONFIG_BYTES;
use crate::outbound::AllowList;
use crate::runtime::Settings;

/// A world file that cannot be simulated, naming the key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct WorldError {
    /// The key, as a path from the top (`actions[2].at`); `(file)` for the
    /// file as a whole.
    pub key: String,
    /// What is wrong and what to do.
    pub problem: String,
}

impl WorldError {
    /// A problem with `key`.
    pub fn at(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            problem: problem.into(),
        }
    }
}

/// An object the world starts with (`[[objects]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct SeedObject {
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Its value (the file's table, as JSON).
    pub value: Value,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// A simulated service (`[[services]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Its name: `services.<name>` in invariants.
    pub name: String,
    /// Its base URL, covered by `http_allow`.
    pub url: String,
}

/// What a user does during a run (`[[actions]]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    /// The step it happens at (before that step's reconcile).
    pub at: u64,
    /// What it does.
    pub op: ActionOp,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
}

/// A user's write.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionOp {
    /// Create or replace the value (metadata and status kept).
    Put(Value),
    /// Request deletion (finalizers hold it).
    Delete,
}

/// A parsed and checked world file.
#[derive(Debug)]
pub struct World {
    /// The file.
    pub path: PathBuf,
    /// The controller's component, resolved.
    pub component: PathBuf,
    /// Where the controller may send requests.
    pub http_allow: AllowList,
    /// The controller's settings.
    pub settings: Settings,
    /// The objects it starts with.
    pub objects: Vec<SeedObject>,
    /// Its services.
    pub services: Vec<ServiceSpec>,
    /// The users' writes, by step.
    pub actions: Vec<Action>,
    /// The properties of the file.
    pub invariants: Vec<Invariant>,
    /// How often each fault kind strikes.
    pub weights: Weights,
}

const TOP: [&str; 6] = [
    "controller",
    "objects",
    "services",
    "actions",
    "invariants",
    "faults",
];

impl World {
    /// Read and check the world file at `path`; components named with
    /// `${LEASEHOLD_GUEST_DIR}` are found through `env`.
    pub fn load(path: &Path, env: &Environment) -> Result<World, WorldError> {
        let whole = |problem: String| WorldError::at("(file)", problem);
        let size = std::fs::metadata(path)
            .map_err(|e| whole(format!("cannot read {}: {e}", path.display())))?
            .len();
        if size > MAX_CONFIG_BYTES {
            return Err(whole(format!(
                "{} is {size} bytes; a world file is at most {MAX_CONFIG_BYTES}",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| whole(format!("cannot read {}: {e}", path.display())))?;
        // Absolute, so `${LEASEHOLD_GUEST_DIR}`'s default (beside the
        // file's folder) means the same wherever the command runs from.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base = absolute.parent().unwrap_or(Path::new("/"));
        Self::parse(&text, path, base, env)
    }

    /// Check the world in `text`, read from `path`, whose relative paths
    /// are relative to `base`.
    pub fn parse(
        text: &str,
        path: &Path,
        base: &Path,
        env: &Environment,
    ) -> Result<World, WorldError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            WorldError::at("(file)", format!("not TOML: {}", e.to_string().trim()))
        })?;
        unknown_keys("", &table, &TOP)?;
        let controller = match table.get("controller") {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(WorldError::at("controller", "must be a table")),
            None => {
                return Err(WorldError::at(
                    "controller",
                    "is missing: a world names its controller's component",
                ));
            }
        };
        unknown_keys(
            "controller",
            controller,
            &["component", "http_allow", "settings"],
        )?;
        let written = string(controller, "controller", "component")?
            .ok_or_else(|| WorldError::at("controller.component", "is missing"))?;
        let component = controller_component(&written, base, env)
            .map_err(|problem| WorldError::at("controller.component", problem))?;
        let http_allow = http_allow(controller)?;
        let settings = match controller.get("settings") {
            None => Settings::default(),
            Some(value) => controller_settings(value)
                .map_err(|problems| WorldError::at("controller.settings", problems.join("; ")))?,
        };
        let objects = objects(&table)?;
        let services = services(&table, &http_allow)?;
        let actions = actions(&table)?;
        let mut kinds: BTreeSet<String> = objects.iter().map(|o| o.kind.clone()).collect();
        kinds.extend(actions.iter().map(|a| a.kind.clone()));
        let kinds: Vec<String> = kinds.into_iter().collect();
        let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
        let invariants = invariants(&table, &kinds, &names)?;
        let weights = weights(&table)?;
        Ok(World {
            path: path.to_path_buf(),
            component,
            http_allow,
            settings,
            objects,
            services,
            actions,
            invariants,
            weights,
        })
    }

    /// Every kind the file names (objects and actions), in order.
    pub fn kinds(&self) -> BTreeSet<String> {
        let mut kinds: BTreeSet<String> = self.objects.iter().map(|o| o.kind.clone()).collect();
        kinds.extend(self.actions.iter().map(|a| a.kind.clone()));
        kinds
    }

    /// Check the actions against a run of `steps` steps: each must happen
    /// within them.
    pub fn check_steps(&self, steps: u64) -> Result<(), WorldError> {
        for (i, action) in self.actions.iter().enumerate() {
            if action.at > steps {
                return Err(WorldError::at(
                    format!("actions[{i}].at"),
                    format!(
                        "step {} is beyond the run's {steps} steps; raise --steps or move the action",
                        action.at
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn unknown_keys(at: &str, table: &toml::Table, known: &[&str]) -> Result<(), WorldError> {
    match table.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => {
            let path = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            Err(WorldError::at(
                path,
                format!("unknown key; the keys here are {}", known.join(", ")),
            ))
        }
        None => Ok(()),
    }
}

fn string(table: &toml::Table, at: &str, key: &str) -> Result<Option<String>, WorldError> {
    match table.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(WorldError::at(format!("{at}.{key}"), "must be a string")),
    }
}

fn required(table: &toml::Table, at: &str, key: &str) -> Result<String, WorldError> {
    string(table, at, key)?.ok_or_else(|| WorldError::at(format!("{at}.{key}"), "is missing"))
}

/// A kind or a name: a DNS label.
fn label(table: &toml::Table, at: &str, key: &str) -> Result<String, WorldError> {
    let value = required(table, at, key)?;
    crate::names::check_label("name", &value)
        .map_err(|e| WorldError::at(format!("{at}.{key}"), e.to_string()))?;
    Ok(value)
}

fn tables<'a>(table: &'a toml::Table, key: &str) -> Result<Vec<&'a toml::Table>, WorldError> {
    match table.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                toml::Value::Table(t) => Ok(t),
                _ => Err(WorldError::at(format!("{key}[{i}]"), "must be a table")),
            })
            .collect(),
        Some(_) => Err(WorldError::at(
            key,
            format!("must be an array of tables ([[{key}]])"),
        )),
    }
}

fn http_allow(controller: &toml::Table) -> Result<AllowList, WorldError> {
    let entries = match controller.get("http_allow") {
        None => Vec::new(),
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                toml::Value::String(s) => Ok(s.clone()),
                _ => Err(WorldError::at(
                    format!("controller.http_allow[{i}]"),
                    "must be a string",
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => {
            return Err(WorldError::at(
                "controller.http_allow",
                "must be an array of URLs",
            ));
        }
    };
    for (i, entry) in entries.iter().enumerate() {
        AllowList::parse(std::slice::from_ref(entry)).map_err(|problem| {
            WorldError::at(
                format!("controller.http_allow[{i}]"),
                problem.trim_start_matches("[0]: ").to_string(),
            )
        })?;
    }
    AllowList::parse(&entries).map_err(|problem| WorldError::at("controller.http_allow", problem))
}

fn objects(table: &toml::Table) -> Result<Vec<SeedObject>, WorldError> {
    let mut seen = BTreeSet::new();
    let mut objects = Vec::new();
    for (i, object) in tables(table, "objects")?.into_iter().enumerate() {
        let at = format!("objects[{i}]");
        unknown_keys(&at, object, &["kind", "name", "value", "labels"])?;
        let kind = label(object, &at, "kind")?;
        let name = label(object, &at, "name")?;
        let value = match object.get("value") {
            Some(value @ toml::Value::Table(_)) => json(value, &format!("{at}.value"))?,
            Some(_) => return Err(WorldError::at(format!("{at}.value"), "must be a table")),
            None => return Err(WorldError::at(format!("{at}.value"), "is missing")),
        };
        let labels = labels(object, &at)?;
        if !seen.insert((kind.clone(), name.clone())) {
            return Err(WorldError::at(
                format!("{at}.name"),
                format!("{kind}/{name} is already an object of this world"),
            ));
        }
        objects.push(SeedObject {
            kind,
            name,
            value,
            labels,
        });
    }
    Ok(objects)
}

fn labels(object: &toml::Table, at: &str) -> Result<BTreeMap<String, String>, WorldError> {
    let Some(value) = object.get("labels") else {
        return Ok(BTreeMap::new());
    };
    let toml::Value::Table(labels) = value else {
        return Err(WorldError::at(format!("{at}.labels"), "must be a table"));
    };
    let mut out = BTreeMap::new();
    for (key, value) in labels {
        let here = format!("{at}.labels.{key}");
        crate::store::check_label_key(key).map_err(|problem| WorldError::at(&here, problem))?;
        let toml::Value::String(value) = value else {
            return Err(WorldError::at(here, "must be a string"));
        };
        let valid = value.len() <= crate::limits::MAX_LABEL_VALUE_BYTES
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid {
            return Err(WorldError::at(
                here,
                format!(
                    "a label value is at most {} letters, digits, `-`, `_` or `.`",
                    crate::limits::MAX_LABEL_VALUE_BYTES
                ),
            ));
        }
        out.insert(key.clone(), value.clone());
    }
    Ok(out)
}

fn services(table: &toml::Table, allow: &AllowList) -> Result<Vec<ServiceSpec>, WorldError> {
    let mut services: Vec<ServiceSpec> = Vec::new();
    for (i, service) in tables(table, "services")?.into_iter().enumerate() {
        let at = format!("services[{i}]");
        unknown_keys(&at, service, &["name", "url", "model"])?;
        let name = label(service, &at, "name")?;
        if services.iter().any(|s| s.name == name) {
            return Err(WorldError::at(
                format!("{at}.name"),
                format!("service {name} is already in this world"),
            ));
        }
        let url = required(service, &at, "url")?;
        AllowList::parse(std::slice::from_ref(&url)).map_err(|problem| {
            WorldError::at(
                format!("{at}.url"),
                format!(
                    "{}; a service URL is http:// or https:// with a host, an optional port \
                     and path, and no query",
                    problem.trim_start_matches("[0]: ")
                ),
            )
        })?;
        let uri: http::Uri = url
            .parse()
            .map_err(|e| WorldError::at(format!("{at}.url"), format!("not a URL: {e}")))?;
        if let Err(denied) = allow.check(&uri) {
            return Err(WorldError::at(
                format!("{at}.url"),
                format!(
                    "{url} is outside the controller's http_allow {allow} ({}): the controller \
                     could never call it",
                    denied.reason
                ),
            ));
        }
        let model = required(service, &at, "model")?;
        if model != FENCED_RECEIVER {
            return Err(WorldError::at(
                format!("{at}.model"),
                format!("unknown model {model:?}; the models are \"{FENCED_RECEIVER}\""),
            ));
        }
        services.push(ServiceSpec { name, url });
    }
    Ok(services)
}

fn actions(table: &toml::Table) -> Result<Vec<Action>, WorldError> {
    let mut actions = Vec::new();
    for (i, action) in tables(table, "actions")?.into_iter().enumerate() {
        let at = format!("actions[{i}]");
        unknown_keys(&at, action, &["at", "op", "kind", "name", "value"])?;
        let step = match action.get("at") {
            Some(toml::Value::Integer(n)) if *n >= 1 => *n as u64,
            Some(_) => {
                return Err(WorldError::at(
                    format!("{at}.at"),
                    "must be a step number, 1 or more",
                ));
            }
            None => return Err(WorldError::at(format!("{at}.at"), "is missing")),
        };
        let kind = label(action, &at, "kind")?;
        let name = label(action, &at, "name")?;
        let op = match required(action, &at, "op")?.as_str() {
            "put" => match action.get("value") {
                Some(value @ toml::Value::Table(_)) => {
                    ActionOp::Put(json(value, &format!("{at}.value"))?)
                }
                Some(_) => return Err(WorldError::at(format!("{at}.value"), "must be a table")),
                None => {
                    return Err(WorldError::at(
                        format!("{at}.value"),
                        "is missing: a put writes a value",
                    ));
                }
            },
            "delete" => {
                if action.contains_key("value") {
                    return Err(WorldError::at(
                        format!("{at}.value"),
                        "a delete takes no value",
                    ));
                }
                ActionOp::Delete
            }
            other => {
                return Err(WorldError::at(
                    format!("{at}.op"),
                    format!("unknown op {other:?}; the ops are \"put\" and \"delete\""),
                ));
            }
        };
        actions.push(Action {
            at: step,
            op,
            kind,
            name,
        });
    }
    Ok(actions)
}

fn invariants(
    table: &toml::Table,
    kinds: &[String],
    services: &[String],
) -> Result<Vec<Invariant>, WorldError> {
    let mut invariants: Vec<Invariant> = Vec::new();
    for (i, invariant) in tables(table, "invariants")?.into_iter().enumerate() {
        let at = format!("invariants[{i}]");
        unknown_keys(&at, invariant, &["name", "expr", "when"])?;
        let name = required(invariant, &at, "name")?;
        if name.trim().is_empty() {
            return Err(WorldError::at(format!("{at}.name"), "must not be empty"));
        }
        if invariants.iter().any(|inv| inv.name == name) {
            return Err(WorldError::at(
                format!("{at}.name"),
                format!("invariant {name:?} is already in this world"),
            ));
        }
        let expr = required(invariant, &at, "expr")?;
        let when = match string(invariant, &at, "when")?.as_deref() {
            None | Some("end") => When::End,
            Some("always") => When::Always,
            Some(other) => {
                return Err(WorldError::at(
                    format!("{at}.when"),
                    format!("unknown {other:?}; it is \"end\" (the default) or \"always\""),
                ));
            }
        };
        let compiled = Invariant::compile(&name, &expr, when, kinds, services)
            .map_err(|problem| WorldError::at(format!("{at}.expr"), problem))?;
        invariants.push(compiled);
    }
    Ok(invariants)
}

fn weights(table: &toml::Table) -> Result<Weights, WorldError> {
    let mut weights = Weights::default();
    let Some(faults) = table.get("faults") else {
        return Ok(weights);
    };
    let toml::Value::Table(faults) = faults else {
        return Err(WorldError::at("faults", "must be a table of weights"));
    };
    for (key, value) in faults {
        let at = format!("faults.{key}");
        let Some(kind) = FaultKind::parse(key) else {
            let known: Vec<&str> = FaultKind::ALL.iter().map(|k| k.key()).collect();
            return Err(WorldError::at(
                at,
                format!("unknown fault; the faults are {}", known.join(", ")),
            ));
        };
        let weight = match value {
            toml::Value::Integer(n) => *n as f64,
            toml::Value::Float(f) => *f,
            _ => return Err(WorldError::at(at, "must be a number")),
        };
        weights
            .set(kind, weight)
            .map_err(|problem| WorldError::at(at, problem))?;
    }
    Ok(weights)
}

/// A TOML value as JSON: dates and times as RFC 3339 strings, floats JSON
/// cannot carry refused.
fn json(value: &toml::Value, at: &str) -> Result<Value, WorldError> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(n) => Value::from(*n),
        toml::Value::Float(f) => Value::from(
            serde_json::Number::from_f64(*f)
                .ok_or_else(|| WorldError::at(at, "nan and inf are not JSON numbers"))?,
        ),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| json(v, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| Ok((k.clone(), json(v, &format!("{at}.{k}"))?)))
                .collect::<Result<_, WorldError>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A world around a component file that exists (any file: the world
    /// does not compile it).
    fn parse(rest: &str) -> Result<World, WorldError> {
        let dir = std::env::temp_dir().join(format!("leasehold-world-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("c.wasm"), b"\0asm").unwrap();
        // The rest first: its top-level keys must come before any table.
        let text = format!(
            "{rest}\n[controller]\ncomponent = \"c.wasm\"\nhttp_allow = [\"http://cloud.sim\"]\n"
        );
        let world = World::parse(&text, &dir.join("w.toml"), &dir, &Environment::default());
        let _ = std::fs::remove_dir_all(&dir);
        world
    }

    fn key_of(rest: &str) -> String {
        parse(rest).unwrap_err().key
    }

    #[test]
    fn a_good_world_is_read_whole() {
        let world = parse(
            r#"
[controller.settings]
region = "eu"

[[objects]]
kind = "buckets"
name = "photos"
labels = { team = "a" }
value = { endpoint = "http://cloud.sim", spec = { size_gb = 10 } }

[[services]]
name = "cloud"
url = "http://cloud.sim"
model = "fenced-receiver"

[[actions]]
at = 5
op = "put"
kind = "buckets"
name = "photos"
value = { spec = { size_gb = 20 } }

[[actions]]
at = 9
op = "delete"
kind = "buckets"
name = "photos"

[[invariants]]
name = "each spec applied once"
expr = "services.cloud.applied.all(a, a.epoch >= 1)"
when = "always"

[faults]
lease_lost = 2
slow = 0.5
"#,
        )
        .unwrap();
        assert_eq!(world.objects[0].value["spec"]["size_gb"], 10);
        assert_eq!(world.objects[0].labels["team"], "a");
        assert_eq!(world.services[0].url, "http://cloud.sim");
        assert_eq!(world.actions[1].op, ActionOp::Delete);
        assert_eq!(world.invariants[0].when, When::Always);
        assert_eq!(world.weights.get(FaultKind::LeaseLost), 2.0);
        assert_eq!(world.weights.get(FaultKind::Conflict), 1.0);
        assert!(!world.settings.is_empty());
        assert!(world.check_steps(9).is_ok());
        assert_eq!(world.check_steps(8).unwrap_err().key, "actions[1].at");
    }

    /// Every problem names its key: an unknown key anywhere, CEL that does
    /// not compile, a service outside `http_allow`, a bad model, op or
    /// weight.
    #[test]
    fn each_problem_names_its_key() {
        assert_eq!(key_of("colour = 1\n"), "colour");
        assert_eq!(key_of("[faults]\nmeteor = 1\n"), "faults.meteor");
        assert_eq!(key_of("[faults]\nslow = -1\n"), "faults.slow");
        assert_eq!(
            key_of("[[objects]]\nkind = \"b\"\nname = \"x\"\nvalue = {}\nsize = 1\n"),
            "objects[0].size"
        );
        assert_eq!(
            key_of("[[objects]]\nkind = \"B!\"\nname = \"x\"\nvalue = {}\n"),
            "objects[0].kind"
        );
        assert_eq!(
            key_of("[[invariants]]\nname = \"x\"\nexpr = \"services.(\"\n"),
            "invariants[0].expr"
        );
        assert_eq!(
            key_of("[[invariants]]\nname = \"x\"\nexpr = \"true\"\nwhen = \"sometimes\"\n"),
            "invariants[0].when"
        );
        assert_eq!(
            key_of(
                "[[services]]\nname = \"cloud\"\nurl = \"http://elsewhere.sim\"\nmodel = \"fenced-receiver\"\n"
            ),
            "services[0].url"
        );
        assert_eq!(
            key_of(
                "[[services]]\nname = \"cloud\"\nurl = \"http://cloud.sim\"\nmodel = \"echo\"\n"
            ),
            "services[0].model"
        );
        assert_eq!(
            key_of("[[actions]]\nat = 1\nop = \"poke\"\nkind = \"b\"\nname = \"x\"\n"),
            "actions[0].op"
        );
        assert_eq!(
            key_of("[[actions]]\nat = 0\nop = \"delete\"\nkind = \"b\"\nname = \"x\"\n"),
            "actions[0].at"
        );
        assert_eq!(
            parse("")
                .map(|_| ())
                .and_then(|()| {
                    World::parse(
                        "[controller]\ncomponent = \"missing.wasm\"\n",
                        Path::new("w.toml"),
                        Path::new("/nonexistent"),
                        &Environment::default(),
                    )
                    .map(drop)
                })
                .unwrap_err()
                .key,
            "controller.component"
        );
        assert_eq!(
            key_of("[controller.settings]\nbad = nan\n"),
            "controller.settings"
        );
    }
}
