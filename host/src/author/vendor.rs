//! A project's `vendor/` folder: the SDK and the WIT it builds against,
//! written from what this binary carries. `leasehold new` writes it;
//! `leasehold build` writes it when it is missing (a project checked out
//! without it, or copied without the links the repository's examples keep
//! there) and otherwise builds with what is there, saying so when it is
//! another leasehold's. Its stamp (`vendor/.leasehold-sdk`) records a
//! digest of what was written.
//!
//! The Rust SDK is a path dependency (`vendor/leasehold-guest`, with the
//! path crates it needs beside it): its manifest is rewritten to stand
//! alone (the workspace's inherited keys and dependency versions written
//! out, dev-dependencies, examples and tests left out), and a new project
//! gets a `Cargo.lock` holding exactly the versions this repository's
//! lockfile pins for the SDK's dependencies.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::embedded::{self, EmbeddedCrate};
use super::{AuthorError, Language};

/// The folder, relative to the project.
pub const VENDOR: &str = "vendor";
/// The stamp inside it.
pub const STAMP: &str = ".leasehold-sdk";
/// The package name of the Rust SDK.
pub const RUST_SDK: &str = "leasehold-guest";

/// A file to write: its path relative to `vendor/`, and its contents.
pub type File = (PathBuf, Cow<'static, [u8]>);

/// The files of `vendor/` for `language` (relative to it), its stamp
/// excluded.
pub fn files(language: Language) -> Result<Vec<File>, AuthorError> {
    let mut files: Vec<File> = Vec::new();
    for file in embedded::WIT {
        files.push((Path::new("wit").join(file.path), Cow::Borrowed(file.bytes)));
    }
    match language {
        Language::Python => {
            for file in embedded::PYTHON_SDK {
                files.push((
                    Path::new("leasehold").join(file.path),
                    Cow::Borrowed(file.bytes),
                ));
            }
        }
        Language::JavaScript => {
            for file in embedded::JS_SDK {
                files.push((
                    Path::new("leasehold").join(file.path),
                    Cow::Borrowed(file.bytes),
                ));
            }
        }
        Language::Rust => {
            let workspace = workspace()?;
            for krate in embedded::RUST_CRATES {
                for file in krate.files {
                    let bytes = if file.path == "Cargo.toml" {
                        let text = std::str::from_utf8(file.bytes).map_err(|_| {
                            AuthorError::Embedded(format!(
                                "{}'s Cargo.toml is not UTF-8",
                                krate.name
                            ))
                        })?;
                        Cow::Owned(standalone_manifest(krate, text, &workspace)?.into_bytes())
                    } else {
                        Cow::Borrowed(file.bytes)
                    };
                    files.push((Path::new(krate.name).join(file.path), bytes));
                }
            }
        }
    }
    files.push((
        PathBuf::from("README.md"),
        Cow::Owned(readme(language).into_bytes()),
    ));
    Ok(files)
}

fn readme(language: Language) -> String {
    let sdk = match language {
        Language::Rust => "leasehold-guest/ (the Rust SDK, a path dependency)",
        Language::Python => "leasehold/ (the Python SDK, on pytest's path and the component's)",
        Language::JavaScript => "leasehold/ (the JavaScript SDK, imported by relative path)",
    };
    format!(
        "# vendor/\n\n\
         Written by leasehold {version}: the SDK and the WIT this controller is\n\
         built and tested against.\n\n\
         - {sdk}\n\
         - wit/ (the contract between the host and its controllers)\n\n\
         Do not edit these files. To build with another leasehold's SDK, delete\n\
         this folder and run that leasehold's `leasehold build`, which writes it\n\
         again. A component built against an older WIT keeps running on newer\n\
         hosts.\n",
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// A digest of `files`: what the stamp records.
pub fn digest(files: &[File]) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for (path, bytes) in files {
        let path = path.to_string_lossy();
        context.update(&(path.len() as u64).to_le_bytes());
        context.update(path.as_bytes());
        context.update(&(bytes.len() as u64).to_le_bytes());
        context.update(bytes);
    }
    context.finish().as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a project's `vendor/` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Vendored {
    /// Nothing usable: absent, or its SDK or WIT do not resolve (links
    /// copied from elsewhere).
    Missing,
    /// This binary's SDK.
    Current,
    /// Another leasehold's SDK (its stamp's first line).
    Other(String),
    /// An SDK and WIT with no stamp: put there by hand or linked (the
    /// repository's examples link to the repository's own).
    Unstamped,
}

/// The entry of `vendor/` that must resolve for `language`'s SDK.
fn sdk_entry(language: Language) -> &'static str {
    match language {
        Language::Rust => RUST_SDK,
        Language::Python | Language::JavaScript => "leasehold",
    }
}

/// What `dir/vendor` holds for `language`.
pub fn state(dir: &Path, language: Language) -> Result<Vendored, AuthorError> {
    let vendor = dir.join(VENDOR);
    // `exists` follows links: a dangling one counts as missing.
    if !vendor.join(sdk_entry(language)).exists() || !vendor.join("wit/controller.wit").exists() {
        return Ok(Vendored::Missing);
    }
    let Ok(stamp) = std::fs::read_to_string(vendor.join(STAMP)) else {
        return Ok(Vendored::Unstamped);
    };
    let ours = digest(&files(language)?);
    let mut lines = stamp.lines();
    let who = lines.next().unwrap_or_default().to_string();
    if lines.any(|l| l.strip_prefix("sdk ") == Some(ours.as_str())) {
        Ok(Vendored::Current)
    } else {
        Ok(Vendored::Other(who))
    }
}

/// (Re)write `dir/vendor` for `language`: built aside, then moved into
/// place, so an interrupted write never leaves half an SDK behind.
pub fn write(dir: &Path, language: Language) -> Result<(), AuthorError> {
    let files = files(language)?;
    let stamp = format!(
        "leasehold {}\nsdk {}\n",
        env!("CARGO_PKG_VERSION"),
        digest(&files)
    );
    let vendor = dir.join(VENDOR);
    let aside = dir.join(format!(".{VENDOR}.{}.tmp", std::process::id()));
    let io = |what: String| move |error| AuthorError::Io { what, error };
    if aside.exists() {
        std::fs::remove_dir_all(&aside).map_err(io(format!("remove {}", aside.display())))?;
    }
    for (path, bytes) in &files {
        let target = aside.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(format!("create {}", parent.display())))?;
        }
        std::fs::write(&target, bytes).map_err(io(format!("write {}", target.display())))?;
    }
    std::fs::write(aside.join(STAMP), stamp)
        .map_err(io(format!("write the stamp in {}", aside.display())))?;
    // What was there (links that no longer resolve, or another SDK) goes.
    match std::fs::symlink_metadata(&vendor) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&vendor)
            .map_err(io(format!("remove the old {}", vendor.display())))?,
        Ok(_) => std::fs::remove_file(&vendor)
            .map_err(io(format!("remove the old {}", vendor.display())))?,
        Err(_) => {}
    }
    std::fs::rename(&aside, &vendor).map_err(io(format!("move {} into place", vendor.display())))
}

/// The workspace manifest this binary was built with.
fn workspace() -> Result<toml::Table, AuthorError> {
    embedded::WORKSPACE_MANIFEST.parse().map_err(|e| {
        AuthorError::Embedded(format!("the workspace's Cargo.toml does not parse: {e}"))
    })
}

/// Keys of `[package]` a vendored crate keeps: what builds it and says
/// what it is. (`build` is dropped unless its script was embedded.)
const PACKAGE_KEYS: &[&str] = &[
    "name",
    "version",
    "edition",
    "rust-version",
    "description",
    "license",
    "publish",
    "readme",
    "build",
    "links",
];

/// `text`, the manifest of embedded crate `krate`, made to stand alone in
/// `vendor/<name>/`: inherited package keys and dependency specs written
/// out from the workspace's, path dependencies pointed at their vendored
/// siblings, and everything but the library (dev-dependencies, examples,
/// tests, benches, lints) left out.
pub fn standalone_manifest(
    krate: &EmbeddedCrate,
    text: &str,
    workspace: &toml::Table,
) -> Result<String, AuthorError> {
    let wrong = |why: String| AuthorError::Embedded(format!("{}'s Cargo.toml: {why}", krate.name));
    let manifest: toml::Table = text.parse().map_err(|e| wrong(format!("{e}")))?;
    let shared_package = workspace
        .get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.as_table())
        .cloned()
        .unwrap_or_default();
    let shared_deps = workspace
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|p| p.as_table())
        .cloned()
        .unwrap_or_default();
    let mut out = toml::Table::new();

    let package = manifest
        .get("package")
        .and_then(|p| p.as_table())
        .ok_or_else(|| wrong("no [package]".into()))?;
    let mut kept = toml::Table::new();
    for key in PACKAGE_KEYS {
        let Some(value) = package.get(*key) else {
            continue;
        };
        if *key == "build" && !krate.files.iter().any(|f| f.path == "build.rs") {
            continue;
        }
        let value = if is_inherited(value) {
            shared_package.get(*key).cloned().ok_or_else(|| {
                wrong(format!(
                    "package.{key} is inherited but the workspace has none"
                ))
            })?
        } else {
            value.clone()
        };
        kept.insert((*key).to_string(), value);
    }
    out.insert("package".into(), toml::Value::Table(kept));
    for key in ["lib", "features"] {
        if let Some(value) = manifest.get(key) {
            out.insert(key.into(), value.clone());
        }
    }
    let deps = |table: &toml::Table| -> Result<toml::Table, AuthorError> {
        let mut written = toml::Table::new();
        for (name, spec) in table {
            written.insert(
                name.clone(),
                standalone_dep(krate, name, spec, &shared_deps)?,
            );
        }
        Ok(written)
    };
    for key in ["dependencies", "build-dependencies"] {
        if let Some(table) = manifest.get(key).and_then(|d| d.as_table()) {
            out.insert(key.into(), toml::Value::Table(deps(table)?));
        }
    }
    if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
        let mut written = toml::Table::new();
        for (cfg, target) in targets {
            let mut tables = toml::Table::new();
            for key in ["dependencies", "build-dependencies"] {
                if let Some(table) = target.get(key).and_then(|d| d.as_table()) {
                    tables.insert(key.into(), toml::Value::Table(deps(table)?));
                }
            }
            if !tables.is_empty() {
                written.insert(cfg.clone(), toml::Value::Table(tables));
            }
        }
        out.insert("target".into(), toml::Value::Table(written));
    }
    // Section by section, in the order people write them (a table is
    // written in key order).
    let mut body = String::new();
    for key in [
        "package",
        "lib",
        "features",
        "dependencies",
        "build-dependencies",
        "target",
    ] {
        if let Some(value) = out.remove(key) {
            let mut section = toml::Table::new();
            section.insert(key.to_string(), value);
            body.push('\n');
            body.push_str(
                &toml::to_string(&section).map_err(|e| wrong(format!("cannot write it: {e}")))?,
            );
        }
    }
    Ok(format!(
        "# Written by leasehold {} from the SDK's own manifest: the library alone,\n\
         # its dependencies as the leasehold repository's workspace pins them.\n{body}",
        env!("CARGO_PKG_VERSION")
    ))
}

fn is_inherited(value: &toml::Value) -> bool {
    value.get("workspace").and_then(|w| w.as_bool()) == Some(true)
}

/// One dependency of a vendored crate, written out.
fn standalone_dep(
    krate: &EmbeddedCrate,
    name: &str,
    spec: &toml::Value,
    shared: &toml::Table,
) -> Result<toml::Value, AuthorError> {
    let wrong =
        |why: String| AuthorError::Embedded(format!("{}'s dependency {name}: {why}", krate.name));
    // `{ workspace = true, features = [...], optional = true }`: the
    // workspace's spec, with the member's additions.
    let (mut table, base_dir) = if is_inherited(spec) {
        let base = shared
            .get(name)
            .ok_or_else(|| wrong("inherited but the workspace does not list it".into()))?;
        let mut table = match base {
            toml::Value::String(version) => {
                let mut t = toml::Table::new();
                t.insert("version".into(), toml::Value::String(version.clone()));
                t
            }
            toml::Value::Table(t) => t.clone(),
            _ => {
                return Err(wrong(
                    "the workspace's spec is neither a version nor a table".into(),
                ));
            }
        };
        let own = spec.as_table().cloned().unwrap_or_default();
        if let Some(extra) = own.get("features").and_then(|f| f.as_array()) {
            let mut features: BTreeSet<String> = table
                .get("features")
                .and_then(|f| f.as_array())
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect();
            features.extend(extra.iter().filter_map(|f| f.as_str().map(str::to_string)));
            table.insert(
                "features".into(),
                toml::Value::Array(features.into_iter().map(toml::Value::String).collect()),
            );
        }
        if let Some(optional) = own.get("optional") {
            table.insert("optional".into(), optional.clone());
        }
        (table, PathBuf::new())
    } else {
        match spec {
            toml::Value::String(version) => {
                let mut t = toml::Table::new();
                t.insert("version".into(), toml::Value::String(version.clone()));
                (t, PathBuf::from(krate.dir))
            }
            toml::Value::Table(t) => (t.clone(), PathBuf::from(krate.dir)),
            _ => return Err(wrong("neither a version nor a table".into())),
        }
    };
    if let Some(path) = table.get("path").and_then(|p| p.as_str()) {
        // A path crate of the workspace: its vendored sibling.
        let repo_dir = normalize(&base_dir.join(path));
        let sibling = embedded::RUST_CRATES
            .iter()
            .find(|c| c.dir == repo_dir)
            .ok_or_else(|| wrong(format!("the path crate {repo_dir} is not embedded")))?;
        table.insert(
            "path".into(),
            toml::Value::String(format!("../{}", sibling.name)),
        );
    }
    Ok(toml::Value::Table(table))
}

/// `a/../b` as `b`.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

/// A `Cargo.lock` for a new Rust project: this repository's lockfile
/// entries for the SDK and everything it depends on, so the project's
/// build resolves to the versions the repository builds and tests with.
/// Cargo adds the project's own entry on its first build.
pub fn rust_lockfile() -> Result<String, AuthorError> {
    let wrong = |why: String| AuthorError::Embedded(format!("the workspace's Cargo.lock: {why}"));
    let lock: toml::Table = embedded::WORKSPACE_LOCK
        .parse()
        .map_err(|e| wrong(format!("{e}")))?;
    let packages = lock
        .get("package")
        .and_then(|p| p.as_array())
        .ok_or_else(|| wrong("no [[package]]".into()))?;
    // name -> indexes of its entries (a name may be locked at two versions).
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, package) in packages.iter().enumerate() {
        if let Some(name) = package.get("name").and_then(|n| n.as_str()) {
            by_name.entry(name).or_default().push(i);
        }
    }
    let version_of = |i: usize| packages[i].get("version").and_then(|v| v.as_str());
    let mut keep = BTreeSet::new();
    let mut todo: Vec<usize> = by_name.get(RUST_SDK).cloned().unwrap_or_default();
    if todo.is_empty() {
        return Err(wrong(format!("{RUST_SDK} is not in it")));
    }
    while let Some(i) = todo.pop() {
        if !keep.insert(i) {
            continue;
        }
        let deps = packages[i]
            .get("dependencies")
            .and_then(|d| d.as_array())
            .cloned()
            .unwrap_or_default();
        for dep in deps {
            let Some(dep) = dep.as_str() else { continue };
            // "name", "name version" or "name version (source)".
            let mut parts = dep.split_whitespace();
            let name = parts.next().unwrap_or_default();
            let version = parts.next();
            let found = by_name
                .get(name)
                .into_iter()
                .flatten()
                .copied()
                .find(|&j| version.is_none_or(|v| version_of(j) == Some(v)));
            match found {
                Some(j) => todo.push(j),
                None => return Err(wrong(format!("{dep} is not in it"))),
            }
        }
    }
    let mut out = toml::Table::new();
    if let Some(version) = lock.get("version") {
        out.insert("version".into(), version.clone());
    }
    out.insert(
        "package".into(),
        toml::Value::Array(keep.into_iter().map(|i| packages[i].clone()).collect()),
    );
    let body = toml::to_string(&out).map_err(|e| wrong(format!("cannot write it: {e}")))?;
    Ok(format!(
        "# Written by `leasehold new` from the leasehold repository's lockfile:\n\
         # the versions its SDK is built and tested with. Cargo maintains it from here.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdk() -> &'static EmbeddedCrate {
        embedded::RUST_CRATES
            .iter()
            .find(|c| c.name == RUST_SDK)
            .expect("the SDK is embedded")
    }

    #[test]
    fn a_vendored_manifest_stands_alone() {
        let krate = sdk();
        let text = std::str::from_utf8(
            krate
                .files
                .iter()
                .find(|f| f.path == "Cargo.toml")
                .unwrap()
                .bytes,
        )
        .unwrap();
        let written = standalone_manifest(krate, text, &workspace().unwrap()).unwrap();
        assert!(!written.contains("workspace ="), "{written}");
        assert!(!written.contains(".workspace"), "{written}");
        assert!(!written.contains("[[example]]"), "{written}");
        let parsed: toml::Table = written.parse().unwrap();
        assert_eq!(parsed["package"]["name"].as_str(), Some(RUST_SDK));
        assert!(parsed["package"]["edition"].as_str().is_some(), "{written}");
        // serde as the workspace pins it, features and all.
        let serde = &parsed["dependencies"]["serde"];
        assert!(serde["version"].as_str().is_some(), "{written}");
        // Every path dependency names a vendored sibling.
        for (_, table) in parsed["target"].as_table().into_iter().flatten() {
            for (_, dep) in table["dependencies"].as_table().into_iter().flatten() {
                if let Some(path) = dep.get("path").and_then(|p| p.as_str()) {
                    let sibling = path.strip_prefix("../").expect("a sibling");
                    assert!(
                        embedded::RUST_CRATES.iter().any(|c| c.name == sibling),
                        "{path} in {written}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_lockfile_holds_the_sdk_and_what_it_needs() {
        let lock: toml::Table = rust_lockfile().unwrap().parse().unwrap();
        let names: BTreeSet<&str> = lock["package"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for needed in [RUST_SDK, "serde", "serde_json", "wit-bindgen"] {
            assert!(names.contains(needed), "{needed} missing from {names:?}");
        }
        assert!(!names.contains("leasehold-host"), "{names:?}");
        assert!(!names.contains("wasmtime"), "{names:?}");
    }

    #[test]
    fn a_stamp_tells_this_sdk_from_another() {
        let dir = std::env::temp_dir().join(format!("leasehold-vendor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(state(&dir, Language::Python).unwrap(), Vendored::Missing);
        write(&dir, Language::Python).unwrap();
        assert_eq!(state(&dir, Language::Python).unwrap(), Vendored::Current);
        assert!(dir.join("vendor/leasehold/__init__.py").is_file());
        assert!(dir.join("vendor/wit/controller.wit").is_file());
        std::fs::write(dir.join("vendor").join(STAMP), "leasehold 0.0.1\nsdk 00\n").unwrap();
        assert_eq!(
            state(&dir, Language::Python).unwrap(),
            Vendored::Other("leasehold 0.0.1".into())
        );
        std::fs::remove_file(dir.join("vendor").join(STAMP)).unwrap();
        assert_eq!(state(&dir, Language::Python).unwrap(), Vendored::Unstamped);
        // Links that resolve nowhere (copied from another folder) are missing.
        std::fs::remove_dir_all(dir.join("vendor")).unwrap();
        std::fs::create_dir_all(dir.join("vendor")).unwrap();
        std::os::unix::fs::symlink("../../nowhere", dir.join("vendor/leasehold")).unwrap();
        std::os::unix::fs::symlink("../../nowhere", dir.join("vendor/wit")).unwrap();
        assert_eq!(state(&dir, Language::Python).unwrap(), Vendored::Missing);
        write(&dir, Language::Python).unwrap();
        assert_eq!(state(&dir, Language::Python).unwrap(), Vendored::Current);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
