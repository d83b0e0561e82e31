//! Each language's build of a project into `build/<name>.wasm`, with the
//! toolchain pinned as the repository pins it:
//!
//! - Rust: cargo for `wasm32-wasip2` (the target added with rustup when
//!   missing), release profile, the SDK from `vendor/`;
//! - Python: componentize-py from a virtual environment in the user's
//!   cache, installed by pip from the embedded requirements;
//! - JavaScript: componentize-js from the embedded package.json and
//!   lockfile, installed by `npm ci` into the user's cache.
//!
//! Python and JavaScript build against `vendor/wit`, for the world its
//! `controller.wit` declares (the one the vendored SDK was written for).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::cache::{self, ToolLock};
use super::project::Project;
use super::tool::Run;
use super::{AuthorError, Language, embedded, vendor};
use crate::timeouts::{
    TOOL_BUILD_DEADLINE, TOOL_INSTALL_DEADLINE, TOOL_LOCK_WAIT, TOOL_POLL, TOOL_PROBE_DEADLINE,
};

/// The Rust target components are built for.
pub const RUST_TARGET: &str = "wasm32-wasip2";
/// The oldest Python the SDK and componentize-py run on.
pub const PYTHON_MIN: (u32, u32) = (3, 11);
/// The oldest Node.js the SDK and the pinned tools run on.
pub const NODE_MIN: u32 = 20;

/// The Python the Python tools are installed with (the name `cargo xtask`
/// reads too; default `python3`).
pub const PYTHON_ENV: &str = "LEASEHOLD_PYTHON";
/// The Node.js that runs the JavaScript tools (default `node`).
pub const NODE_ENV: &str = "LEASEHOLD_NODE";
/// The npm that installs them (default `npm`).
pub const NPM_ENV: &str = "LEASEHOLD_NPM";

/// Build `project`; returns its component.
pub fn build(project: &Project) -> Result<PathBuf, AuthorError> {
    let out = project.component();
    let folder = out.parent().expect("build/ has a parent");
    std::fs::create_dir_all(folder).map_err(|e| AuthorError::Io {
        what: format!("create {}", folder.display()),
        error: e,
    })?;
    match project.language {
        Language::Rust => rust(project, &out)?,
        Language::Python => python(project, &out)?,
        Language::JavaScript => js(project, &out)?,
    }
    check_component(&out)?;
    Ok(out)
}

/// Fail unless `path` holds a WebAssembly component (not a core module).
pub fn check_component(path: &Path) -> Result<(), AuthorError> {
    let bytes = std::fs::read(path).map_err(|e| AuthorError::Io {
        what: format!("read the built {}", path.display()),
        error: e,
    })?;
    // A component's preamble: \0asm, version 0x0d, layer 1.
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" || bytes[6..8] != [1, 0] {
        return Err(AuthorError::NotBuilt(format!(
            "{} is not a WebAssembly component (a core module?): a controller must be built \
             as a component",
            path.display()
        )));
    }
    Ok(())
}

fn program(env: &str, default: &str) -> OsString {
    std::env::var_os(env)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into())
}

fn probe(what: &str) -> Run<'_> {
    Run {
        what,
        deadline: TOOL_PROBE_DEADLINE,
        live_stderr: false,
        stdout_lines: None,
    }
}

fn install(what: &str) -> Run<'_> {
    Run {
        what,
        deadline: TOOL_INSTALL_DEADLINE,
        live_stderr: false,
        stdout_lines: None,
    }
}

const INSTALL_RUST: &str = "Rust controllers are built with cargo: install Rust with rustup \
                            (the stable toolchain), then build again";

fn rust(project: &Project, out: &Path) -> Result<(), AuthorError> {
    let cargo = program("CARGO", "cargo");
    probe("ask cargo for its version").run(Command::new(&cargo).arg("--version"), INSTALL_RUST)?;
    ensure_rust_target()?;
    let manifest = project.dir.join("Cargo.toml");
    let keep = |line: &str| line.contains("\"compiler-artifact\"") && line.contains(".wasm\"");
    let built = Run {
        what: "build the component with cargo",
        deadline: TOOL_BUILD_DEADLINE,
        // cargo's progress and diagnostics go to the terminal as they come.
        live_stderr: true,
        stdout_lines: Some(&keep),
    }
    .run(
        Command::new(&cargo)
            .current_dir(&project.dir)
            .args(["build", "--release", "--lib", "--target", RUST_TARGET])
            .args([
                "--message-format",
                "json-render-diagnostics",
                "--manifest-path",
            ])
            .arg(&manifest),
        INSTALL_RUST,
    )
    .map_err(|e| match e {
        AuthorError::ToolFailed {
            what,
            command,
            how,
            output,
        } => AuthorError::ToolFailed {
            what,
            command,
            how: format!("{how}; cargo's errors are above"),
            output,
        },
        other => other,
    })?;
    let wasm = artifact(&built.stdout, &manifest).ok_or_else(|| {
        AuthorError::NotBuilt(format!(
            "cargo built no .wasm for {}: a controller's [lib] has crate-type = [\"cdylib\", \
             \"rlib\"]",
            manifest.display()
        ))
    })?;
    std::fs::copy(&wasm, out).map_err(|e| AuthorError::Io {
        what: format!("copy {} to {}", wasm.display(), out.display()),
        error: e,
    })?;
    Ok(())
}

/// The `.wasm` cargo's JSON messages say it built for the package of
/// `manifest`.
fn artifact(messages: &str, manifest: &Path) -> Option<PathBuf> {
    messages.lines().rev().find_map(|line| {
        let message: serde_json::Value = serde_json::from_str(line).ok()?;
        if message["reason"] != "compiler-artifact"
            || message["manifest_path"].as_str().map(Path::new) != Some(manifest)
        {
            return None;
        }
        message["filenames"]
            .as_array()?
            .iter()
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".wasm"))
            .map(PathBuf::from)
    })
}

/// Add the `wasm32-wasip2` target with rustup when it is missing. Without
/// rustup the toolchain may still have it (a distribution's); cargo then
/// says if it does not.
fn ensure_rust_target() -> Result<(), AuthorError> {
    let listed = probe("list rustup's installed targets").run(
        Command::new("rustup").args(["target", "list", "--installed"]),
        "",
    );
    match listed {
        Ok(ran) if ran.stdout.lines().any(|l| l.trim() == RUST_TARGET) => Ok(()),
        Ok(_) => install("add the wasm32-wasip2 target with rustup")
            .run(
                Command::new("rustup").args(["target", "add", RUST_TARGET]),
                INSTALL_RUST,
            )
            .map(|_| ()),
        Err(AuthorError::ToolMissing { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The world `vendor/wit/controller.wit` declares.
fn vendored_world(project: &Project) -> Result<String, AuthorError> {
    let file = project.dir.join(vendor::VENDOR).join("wit/controller.wit");
    let text = std::fs::read_to_string(&file).map_err(|e| AuthorError::Io {
        what: format!("read {}", file.display()),
        error: e,
    })?;
    embedded::package_of(&text)
        .as_deref()
        .and_then(embedded::world_of)
        .ok_or_else(|| AuthorError::Manifest {
            file,
            why: "declares no `package <namespace>:<name>@<version>;`: delete vendor/ and build \
                  again"
                .into(),
        })
}

fn python(project: &Project, out: &Path) -> Result<(), AuthorError> {
    let tools = python_tools()?;
    let world = vendored_world(project)?;
    Run {
        what: "build the component with componentize-py",
        deadline: TOOL_BUILD_DEADLINE,
        live_stderr: false,
        stdout_lines: None,
    }
    .run(
        Command::new(tools.join("bin").join("componentize-py"))
            .current_dir(&project.dir)
            // Its errors are about the controller's code; a backtrace of
            // the tool itself (asked for by RUST_BACKTRACE) only buries them.
            .env("RUST_LIB_BACKTRACE", "0")
            .arg("-d")
            .arg(Path::new(vendor::VENDOR).join("wit"))
            .args([
                "-w",
                &world,
                "componentize",
                "-p",
                ".",
                "-p",
                vendor::VENDOR,
                "app",
                "-o",
            ])
            .arg(out),
        "The Python tool folder is incomplete: remove it and build again",
    )?;
    Ok(())
}

const INSTALL_PYTHON: &str = "Python controllers are built with componentize-py, which needs \
                              Python 3.11 or newer with its venv module: install it (on Debian \
                              and Ubuntu, the python3 and python3-venv packages), or name one \
                              with LEASEHOLD_PYTHON";

/// The Python tool folder of the embedded pins, installed on first use.
pub fn python_tools() -> Result<PathBuf, AuthorError> {
    let stamp = embedded::python_stamp();
    let dir = cache::python_tools(&cache::user_cache()?, &stamp);
    let _lock = ToolLock::take(&dir, TOOL_LOCK_WAIT, TOOL_POLL)?;
    if cache::installed(&dir, &stamp) && dir.join("bin/python").exists() {
        return Ok(dir);
    }
    let python = program(PYTHON_ENV, "python3");
    let version = probe("ask Python for its version").run(
        Command::new(&python).args([
            "-c",
            "import sys; print(sys.version_info[0], sys.version_info[1])",
        ]),
        INSTALL_PYTHON,
    )?;
    let mut parts = version
        .stdout
        .split_whitespace()
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) if (major, minor) >= PYTHON_MIN => {}
        _ => {
            return Err(AuthorError::ToolTooOld {
                found: format!(
                    "{} is Python {}, and componentize-py needs {}.{} or newer",
                    python.to_string_lossy(),
                    version.stdout.trim().replace(' ', "."),
                    PYTHON_MIN.0,
                    PYTHON_MIN.1
                ),
                install: INSTALL_PYTHON.to_string(),
            });
        }
    }
    fresh(&dir)?;
    install("create the Python tool folder (venv)").run(
        Command::new(&python).args(["-m", "venv"]).arg(&dir),
        INSTALL_PYTHON,
    )?;
    let pins = embedded::python_pins();
    install(&format!("install {} from PyPI with pip", pins.join(", "))).run(
        Command::new(dir.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(&pins),
        INSTALL_PYTHON,
    )?;
    write_stamp(&dir, &stamp)?;
    Ok(dir)
}

fn js(project: &Project, out: &Path) -> Result<(), AuthorError> {
    let tools = js_tools()?;
    let world = vendored_world(project)?;
    let cli = tools.join("node_modules/@bytecodealliance/componentize-js/src/cli.js");
    // componentize-js reads the sources through a view of the working
    // directory: the entry and everything it imports (vendor/ included)
    // must lie in the project folder.
    Run {
        what: "build the component with componentize-js",
        deadline: TOOL_BUILD_DEADLINE,
        live_stderr: false,
        stdout_lines: None,
    }
    .run(
        Command::new(program(NODE_ENV, "node"))
            .current_dir(&project.dir)
            .arg(cli)
            .arg("app.js")
            .arg("--wit")
            .arg(Path::new(vendor::VENDOR).join("wit"))
            .args(["--world-name", &world, "-o"])
            .arg(out),
        INSTALL_NODE,
    )?;
    Ok(())
}

const INSTALL_NODE: &str = "JavaScript controllers are built with componentize-js, which needs \
                            Node.js 20 or newer and npm: install them, or name them with \
                            LEASEHOLD_NODE and LEASEHOLD_NPM";

/// The JavaScript tool folder of the embedded lockfile, installed on
/// first use with `npm ci`.
pub fn js_tools() -> Result<PathBuf, AuthorError> {
    let stamp = embedded::js_stamp();
    let dir = cache::js_tools(&cache::user_cache()?, &stamp);
    let _lock = ToolLock::take(&dir, TOOL_LOCK_WAIT, TOOL_POLL)?;
    if cache::installed(&dir, &stamp)
        && dir
            .join("node_modules/@bytecodealliance/componentize-js/src/cli.js")
            .is_file()
    {
        return Ok(dir);
    }
    let node = program(NODE_ENV, "node");
    let version = probe("ask Node.js for its version")
        .run(Command::new(&node).arg("--version"), INSTALL_NODE)?;
    let major = version
        .stdout
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    if major.is_none_or(|m| m < NODE_MIN) {
        return Err(AuthorError::ToolTooOld {
            found: format!(
                "{} is Node.js {}, and the JavaScript tools need {NODE_MIN} or newer",
                node.to_string_lossy(),
                version.stdout.trim()
            ),
            install: INSTALL_NODE.to_string(),
        });
    }
    let npm = program(NPM_ENV, "npm");
    probe("ask npm for its version").run(Command::new(&npm).arg("--version"), INSTALL_NODE)?;
    fresh(&dir)?;
    for (name, text) in [
        ("package.json", embedded::JS_PACKAGE),
        ("package-lock.json", embedded::JS_LOCK),
    ] {
        std::fs::write(dir.join(name), text).map_err(|e| AuthorError::Io {
            what: format!("write {name} into {}", dir.display()),
            error: e,
        })?;
    }
    install("install the pinned JavaScript tools (jco, componentize-js) with npm ci").run(
        Command::new(&npm).current_dir(&dir).args([
            "ci",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ]),
        INSTALL_NODE,
    )?;
    write_stamp(&dir, &stamp)?;
    Ok(dir)
}

/// An empty `dir`: what an interrupted install left goes first.
fn fresh(dir: &Path) -> Result<(), AuthorError> {
    if std::fs::symlink_metadata(dir).is_ok() {
        let removed = if dir.is_dir() && !dir.is_symlink() {
            std::fs::remove_dir_all(dir)
        } else {
            std::fs::remove_file(dir)
        };
        removed.map_err(|e| AuthorError::Io {
            what: format!("remove the incomplete tool folder {}", dir.display()),
            error: e,
        })?;
    }
    std::fs::create_dir_all(dir).map_err(|e| AuthorError::Io {
        what: format!("create the tool folder {}", dir.display()),
        error: e,
    })
}

/// Written last: a folder with its stamp is a complete install.
fn write_stamp(dir: &Path, stamp: &str) -> Result<(), AuthorError> {
    std::fs::write(dir.join(cache::STAMP), stamp).map_err(|e| AuthorError::Io {
        what: format!("write the stamp of {}", dir.display()),
        error: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_artifact_is_the_projects_wasm() {
        let manifest = Path::new("/p/Cargo.toml");
        let messages = [
            r#"{"reason":"compiler-artifact","manifest_path":"/v/Cargo.toml","filenames":["/t/dep.wasm"]}"#,
            r#"{"reason":"compiler-artifact","manifest_path":"/p/Cargo.toml","filenames":["/t/p.rlib","/t/p.wasm"]}"#,
        ]
        .join("\n");
        assert_eq!(
            artifact(&messages, manifest),
            Some(PathBuf::from("/t/p.wasm"))
        );
        assert_eq!(artifact(&messages, Path::new("/q/Cargo.toml")), None);
    }

    #[test]
    fn a_core_module_is_not_a_component() {
        let dir = std::env::temp_dir().join(format!("leasehold-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let core = dir.join("core.wasm");
        std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
        assert!(matches!(
            check_component(&core),
            Err(AuthorError::NotBuilt(_))
        ));
        let component = dir.join("component.wasm");
        std::fs::write(&component, b"\0asm\x0d\0\x01\0").unwrap();
        check_component(&component).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
