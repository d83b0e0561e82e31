//! Build helper for Leasehold.
//!
//! `cargo xtask guests` builds every guest component (example controllers
//! and test fixtures) for `wasm32-wasip2`; `cargo xtask test` runs every
//! check and test; `cargo xtask run` starts the service with the example
//! configuration on the embedded backend; `cargo xtask bench` runs the
//! benchmarks. See `cargo xtask help`.

mod lanes;

use std::env;
use std::ffi::OsStr;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime};

/// Crates built as guest components.
const GUESTS: &[&str] = &[
    "scheduler",
    "rollout",
    "provisioner",
    "misbehaving",
    "admission",
    "start-trap",
    "caller",
    "v010",
    "v020",
    "v030",
    "future-world",
    // `leasehold sim`'s fixtures: a planted bug, a controller that never
    // converges.
    "provisioner-bug",
    "churn",
];
/// Controllers written in Python: (component name, folder holding the app
/// module, app module). Built with componentize-py against
/// `wit/controller.wit` into the guest folder as `<component name>.wasm`.
const PYTHON_GUESTS: &[(&str, &str, &str)] = &[
    ("scheduler-py", "controllers/scheduler-py", "app"),
    ("provisioner-py", "controllers/provisioner-py", "app"),
    // The hard-abort fixture: a guest that spins or blocks on command.
    (
        "misbehaving-py",
        "tests/fixtures/python/misbehaving-py",
        "app",
    ),
    // `leasehold sim`'s planted bug, in Python.
    (
        "provisioner-bug-py",
        "tests/fixtures/python/provisioner-bug-py",
        "app",
    ),
];
/// The Python SDK, on every Python guest's path.
const PYTHON_SDK: &str = "guest-sdk/python";
/// The world every Python guest targets.
const PYTHON_WORLD: &str = "leasehold:controller/controller@0.4.0";
/// The Python tools, pinned (one `name==version` a line): installed from
/// PyPI with pip into [`python_tools_dir`] on first use, and again whenever
/// the list changes. The `leasehold` binary carries the same file
/// (`host/build.rs`) for `leasehold build`: one list for both.
const PYTHON_TOOL_PINS: &str = "guest-sdk/python/tools/requirements.txt";
/// The oldest Python the SDK (and so its native tests) supports.
const PYTHON_MIN: (u32, u32) = (3, 11);
/// Folders whose pytest suites `cargo xtask test` runs: the SDK's and
/// each Python controller's.
const PYTHON_TEST_DIRS: &[&str] = &[
    "guest-sdk/python",
    "controllers/scheduler-py",
    "controllers/provisioner-py",
];
/// Controllers written in JavaScript: (component name, folder, entry
/// module). Built with componentize-js against `wit/controller.wit` into
/// the guest folder as `<component name>.wasm`.
const JS_GUESTS: &[(&str, &str, &str)] = &[
    ("scheduler-js", "controllers/scheduler-js", "app.js"),
    ("provisioner-js", "controllers/provisioner-js", "app.js"),
    // The hard-abort fixture: a guest that spins or blocks on command.
    (
        "misbehaving-js",
        "tests/fixtures/js/misbehaving-js",
        "app.js",
    ),
    // `leasehold sim`'s planted bug, in JavaScript.
    (
        "provisioner-bug-js",
        "tests/fixtures/js/provisioner-bug-js",
        "app.js",
    ),
];
/// The JavaScript SDK: its sources are part of every JavaScript guest.
const JS_SDK: &str = "guest-sdk/js";
/// The JavaScript tools, pinned: `package.json` and `package-lock.json`
/// (jco, componentize-js and TypeScript, every dependency at an exact
/// version),
/// installed from the npm registry with `npm ci` into [`js_tools_dir`] on
/// first use, and again whenever the lockfile changes.
const JS_TOOL_PINS: &str = "guest-sdk/js/tools";
/// The world every JavaScript guest targets.
const JS_WORLD: &str = "leasehold:controller/controller@0.4.0";
/// The oldest Node.js the SDK, its tests and the pinned tools support.
const NODE_MIN: u32 = 20;
/// Folders whose `node --test` suites `cargo xtask test` runs: the SDK's
/// and each JavaScript controller's.
const JS_TEST_DIRS: &[&str] = &[
    "guest-sdk/js",
    "controllers/scheduler-js",
    "controllers/provisioner-js",
];
/// The fault suite's unfenced test fixture (tests/fixtures/unfenced-host):
/// built alone, never in a `--workspace` build with the other packages.
const UNFENCED_FIXTURE: &str = "leasehold-unfenced";
/// The target guests are built for.
const TARGET: &str = "wasm32-wasip2";
/// The cargo profile guests are built with (see the workspace Cargo.toml).
const PROFILE: &str = "guest";
const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

const HELP: &str = "\
cargo xtask <command>

Commands:
  guests          build the guest components (controllers and test fixtures)
                  for wasm32-wasip2 into target/wasm32-wasip2/guest/; the
                  Python controllers with componentize-py, installed with
                  pytest (pinned) into target/tools/python on first use;
                  the JavaScript controllers with componentize-js, installed
                  with jco (pinned by a lockfile) into target/tools/js
  test            check formatting and lints, build the guests, run every test
                  (the Python SDK's and controllers' pytest suites and the
                  JavaScript ones, with node --test, included)
  python          the Python side alone: run the Python SDK's and
                  controllers' pytest suites, then build the Python guests
  js              the JavaScript side alone: check the SDK's generated types
                  against the WIT, run the JavaScript SDK's and controllers'
                  node --test suites, then build the JavaScript guests
  js-types        regenerate guest-sdk/js/types (the WIT's types with jco,
                  the SDK's declarations from its JSDoc with tsc)
  run [ARGS...]   build the guests and run `leasehold run --config
                  examples/leasehold.toml` on the embedded backend (state
                  kept in examples/leasehold-data across runs);
                  extra ARGS are passed to `leasehold`
  bench [PART...] build the guests and the release binaries, then run the
                  benchmarks (all, or the named parts; `--quick` for a
                  smoke run) and print a table; a run of every part at
                  full scale (no arguments) writes BENCHMARKS.md
  help            this text

Environment:
  LEASEHOLD_DATABASE_URL  PostgreSQL for the tests (default
                          postgres://postgres@127.0.0.1:5432/postgres)
  LEASEHOLD_NODE          the Node.js (20 or newer) that runs the JavaScript
                          tools and tests (default node)
  LEASEHOLD_NPM           the npm that installs the JavaScript tool folder
                          target/tools/js (default npm)
  LEASEHOLD_PYTHON        the Python (3.11 or newer) that hosts the Python
                          tool folder target/tools/python (default python3)
";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("guests") => build_guests().map(|_| ()),
        Some("test") => test(),
        Some("python") => python_tests().and_then(|()| build_python_guests().map(|_| ())),
        Some("js") => js_tests().and_then(|()| build_js_guests().map(|_| ())),
        Some("js-types") => js_types(true),
        Some("run") => run(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("help") | Some("--help") | Some("-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Where the guest components land.
fn guest_dir() -> PathBuf {
    target_dir().join(TARGET).join(PROFILE)
}

fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

fn status(what: &str, cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: {what}");
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: cannot start {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

fn ensure_target() -> Result<(), String> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match installed {
        Ok(out)
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == TARGET) =>
        {
            Ok(())
        }
        Ok(_) => status(
            &format!("adding the {TARGET} target with rustup"),
            Command::new("rustup").args(["target", "add", TARGET]),
        )
        .map_err(|e| {
            format!(
                "{e}\nThe guests need the {TARGET} Rust target. Install it with \
                 `rustup target add {TARGET}` and try again."
            )
        }),
        Err(_) => {
            // No rustup: the toolchain may still have the target (e.g. a
            // distribution package); let cargo report if it does not.
            eprintln!("xtask: rustup not found; assuming the {TARGET} target is installed");
            Ok(())
        }
    }
}

fn build_guests() -> Result<Vec<PathBuf>, String> {
    ensure_target()?;
    // The Python and JavaScript guests build beside the Rust ones: their
    // tool installs wait on the network and their builds are mostly one
    // process each, so the three together take about as long as the
    // longest rather than the sum.
    let (rust, python, js) = std::thread::scope(|scope| {
        let python = scope.spawn(build_python_guests);
        let js = scope.spawn(build_js_guests);
        let rust = build_rust_guests();
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<Vec<PathBuf>, String>>| {
            h.join()
                .unwrap_or_else(|_| Err("a guest build panicked".to_string()))
        };
        (rust, joined(python), joined(js))
    });
    let mut built = rust?;
    built.extend(python?);
    built.extend(js?);
    Ok(built)
}

fn build_rust_guests() -> Result<Vec<PathBuf>, String> {
    let mut cmd = cargo();
    cmd.args(["build", "--profile", PROFILE, "--target", TARGET]);
    for guest in GUESTS {
        cmd.args(["--package", guest]);
    }
    status("building guest components", &mut cmd).map_err(|e| {
        format!("{e}\nThe guest crates must compile for {TARGET}; see the errors above.")
    })?;
    let mut built = Vec::new();
    for guest in GUESTS {
        // Cargo names the artifact after the library: dashes become underscores.
        let path = guest_dir().join(format!("{}.wasm", guest.replace('-', "_")));
        check_component(&path)?;
        built.push(path);
    }
    Ok(built)
}

/// Fail unless `path` holds a WebAssembly component; print its size.
fn check_component(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path)
        .map_err(|e| format!("expected component {} was not built: {e}", path.display()))?;
    // A component's header: \0asm, version 0x0d, layer 1.
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" || bytes[6..8] != [1, 0] {
        return Err(format!(
            "{} is not a WebAssembly component (a core module?)",
            path.display()
        ));
    }
    eprintln!("xtask:   {} ({} KiB)", path.display(), bytes.len() / 1024);
    Ok(())
}

/// The local folder of the pinned Python tools (a virtual environment).
fn python_tools_dir() -> PathBuf {
    target_dir().join("tools").join("python")
}

/// The virtual environment's `bin/<tool>`.
fn python_tool(tool: &str) -> PathBuf {
    python_tools_dir().join("bin").join(tool)
}

/// The requirements [`PYTHON_TOOL_PINS`] lists: its lines without comments
/// and blank lines (the stamp of the tool folder joins them with newlines,
/// as `leasehold build` does for its own).
fn python_pins() -> Result<Vec<String>, String> {
    let path = root().join(PYTHON_TOOL_PINS);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the Python tool pins {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// Make sure the Python tool folder exists with exactly the pinned tools:
/// created with `venv` and filled by pip from PyPI on first use, and again
/// when the pins change (a stamp file records what was installed).
fn ensure_python_tools() -> Result<(), String> {
    let dir = python_tools_dir();
    let stamp = dir.join("leasehold-pins.txt");
    let pinned = python_pins()?;
    let pins = pinned.join("\n");
    let installed = std::fs::read_to_string(&stamp).ok();
    if installed.as_deref() == Some(pins.as_str()) && python_tool("python").is_file() {
        return Ok(());
    }
    let python = env::var_os("LEASEHOLD_PYTHON").unwrap_or_else(|| "python3".into());
    let version = Command::new(&python)
        .args([
            "-c",
            "import sys; print(sys.version_info[0], sys.version_info[1])",
        ])
        .output()
        .map_err(|e| {
            format!(
                "the Python guests need Python {}.{} or newer, and {:?} cannot be started: {e}. \
                 Install Python (or point LEASEHOLD_PYTHON at it) and try again.",
                PYTHON_MIN.0,
                PYTHON_MIN.1,
                python.to_string_lossy()
            )
        })?;
    let text = String::from_utf8_lossy(&version.stdout);
    let mut parts = text.split_whitespace().map(|p| p.parse::<u32>().ok());
    let found = (parts.next().flatten(), parts.next().flatten());
    match found {
        (Some(major), Some(minor)) if (major, minor) >= PYTHON_MIN => {}
        _ => {
            return Err(format!(
                "the Python guests need Python {}.{} or newer; {:?} is {}",
                PYTHON_MIN.0,
                PYTHON_MIN.1,
                python.to_string_lossy(),
                text.trim()
            ));
        }
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| format!("cannot remove the stale {}: {e}", dir.display()))?;
    }
    status(
        &format!("creating the Python tool folder {}", dir.display()),
        Command::new(&python).arg("-m").arg("venv").arg(&dir),
    )?;
    status(
        &format!("installing {} from PyPI", pinned.join(", ")),
        Command::new(python_tool("python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(&pinned),
    )
    .map_err(|e| format!("{e}\nThe Python guests need these packages from PyPI."))?;
    std::fs::write(&stamp, &pins).map_err(|e| format!("cannot write {}: {e}", stamp.display()))
}

/// The newest modification time of the files under `dir` whose names end
/// with one of `extensions` (caches skipped).
fn newest(dir: &Path, extensions: &[&str]) -> Result<SystemTime, String> {
    let mut latest = SystemTime::UNIX_EPOCH;
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let found = if kind.is_dir() {
            if name.starts_with('.') || name == "__pycache__" {
                continue;
            }
            newest(&path, extensions)?
        } else if extensions.iter().any(|ext| name.ends_with(ext)) {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        } else {
            continue;
        };
        latest = latest.max(found);
    }
    Ok(latest)
}

/// Build each Python controller into a component with componentize-py,
/// unless the component is newer than its sources, the SDK, the WIT files
/// and the tool pins.
fn build_python_guests() -> Result<Vec<PathBuf>, String> {
    ensure_python_tools()?;
    let root = root();
    let shared = newest(&root.join(PYTHON_SDK), &[".py"])?
        .max(newest(&root.join("wit"), &[".wit"])?)
        .max(
            std::fs::metadata(python_tools_dir().join("leasehold-pins.txt"))
                .and_then(|m| m.modified())
                .map_err(|e| format!("cannot read the tool pins' stamp: {e}"))?,
        );
    std::fs::create_dir_all(guest_dir())
        .map_err(|e| format!("cannot create {}: {e}", guest_dir().display()))?;
    let mut built = Vec::new();
    for (name, folder, module) in PYTHON_GUESTS {
        let out = guest_dir().join(format!("{name}.wasm"));
        let sources = shared.max(newest(&root.join(folder), &[".py"])?);
        let fresh = std::fs::metadata(&out)
            .and_then(|m| m.modified())
            .is_ok_and(|built_at| built_at > sources);
        if fresh {
            eprintln!("xtask: {name} is up to date");
        } else {
            let started = Instant::now();
            status(
                &format!("building the Python guest {name} with componentize-py"),
                Command::new(python_tool("componentize-py"))
                    .current_dir(&root)
                    .arg("-d")
                    .arg(root.join("wit"))
                    .args(["-w", PYTHON_WORLD, "componentize", "-p"])
                    .arg(root.join(folder))
                    .arg("-p")
                    .arg(root.join(PYTHON_SDK))
                    .arg(module)
                    .arg("-o")
                    .arg(&out),
            )
            .map_err(|e| format!("{e}\n{folder} must componentize against {PYTHON_WORLD}."))?;
            eprintln!(
                "xtask:   built {name} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        check_component(&out)?;
        built.push(out);
    }
    Ok(built)
}

/// Run the Python SDK's and the Python controllers' pytest suites natively
/// (against the SDK's fake host), with the pinned pytest.
fn python_tests() -> Result<(), String> {
    ensure_python_tools()?;
    for folder in PYTHON_TEST_DIRS {
        status(
            &format!("running the Python tests of {folder}"),
            Command::new(python_tool("python"))
                .current_dir(root().join(folder))
                .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
                // No __pycache__ folders in the work tree.
                .env("PYTHONDONTWRITEBYTECODE", "1"),
        )?;
    }
    Ok(())
}

/// The local folder of the pinned JavaScript tools (`npm ci` of the
/// lockfile in [`JS_TOOL_PINS`]).
fn js_tools_dir() -> PathBuf {
    target_dir().join("tools").join("js")
}

/// The Node.js to run: `LEASEHOLD_NODE`, or `node` on the path.
fn node() -> Command {
    Command::new(env::var_os("LEASEHOLD_NODE").unwrap_or_else(|| "node".into()))
}

/// `node_modules/<path>` in the tool folder.
fn js_tool(path: &str) -> PathBuf {
    js_tools_dir().join("node_modules").join(path)
}

/// Make sure the JavaScript tool folder holds exactly the pinned tools:
/// installed by `npm ci` from the committed lockfile on first use, and
/// again when the lockfile changes (a stamp file records what was
/// installed). Offline once installed.
fn ensure_js_tools() -> Result<(), String> {
    let dir = js_tools_dir();
    let pins_dir = root().join(JS_TOOL_PINS);
    let read = |name: &str| {
        std::fs::read_to_string(pins_dir.join(name))
            .map_err(|e| format!("cannot read {}: {e}", pins_dir.join(name).display()))
    };
    let (manifest, lock) = (read("package.json")?, read("package-lock.json")?);
    let pins = format!("{manifest}\n{lock}");
    let stamp = dir.join("leasehold-pins.txt");
    let installed = std::fs::read_to_string(&stamp).ok();
    if installed.as_deref() == Some(pins.as_str())
        && js_tool("@bytecodealliance/componentize-js/src/cli.js").is_file()
    {
        return Ok(());
    }
    let version = node().arg("--version").output().map_err(|e| {
        format!(
            "the JavaScript guests need Node.js {NODE_MIN} or newer, and it cannot be \
                 started: {e}. Install Node.js (or point LEASEHOLD_NODE at it) and try again."
        )
    })?;
    let text = String::from_utf8_lossy(&version.stdout);
    let major = text
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    if major.is_none_or(|m| m < NODE_MIN) {
        return Err(format!(
            "the JavaScript guests need Node.js {NODE_MIN} or newer; found {}",
            text.trim()
        ));
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| format!("cannot remove the stale {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for name in ["package.json", "package-lock.json"] {
        std::fs::copy(pins_dir.join(name), dir.join(name))
            .map_err(|e| format!("cannot copy {name} into {}: {e}", dir.display()))?;
    }
    let started = Instant::now();
    status(
        &format!(
            "installing the pinned JavaScript tools (jco, componentize-js) from the npm registry \
             into {}",
            dir.display()
        ),
        Command::new(env::var_os("LEASEHOLD_NPM").unwrap_or_else(|| "npm".into()))
            .current_dir(&dir)
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"]),
    )
    .map_err(|e| format!("{e}\nThe JavaScript guests need these packages from npm."))?;
    eprintln!(
        "xtask:   installed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    std::fs::write(&stamp, &pins).map_err(|e| format!("cannot write {}: {e}", stamp.display()))
}

/// Build each JavaScript controller into a component with
/// componentize-js, unless the component is newer than its sources, the
/// SDK, the WIT files and the tool pins.
fn build_js_guests() -> Result<Vec<PathBuf>, String> {
    ensure_js_tools()?;
    let root = root();
    let shared = newest(&root.join(JS_SDK).join("src"), &[".js"])?
        .max(newest(&root.join("wit"), &[".wit"])?)
        .max(
            std::fs::metadata(js_tools_dir().join("leasehold-pins.txt"))
                .and_then(|m| m.modified())
                .map_err(|e| format!("cannot read the tool pins' stamp: {e}"))?,
        );
    std::fs::create_dir_all(guest_dir())
        .map_err(|e| format!("cannot create {}: {e}", guest_dir().display()))?;
    let mut built = Vec::new();
    for (name, folder, entry) in JS_GUESTS {
        let out = guest_dir().join(format!("{name}.wasm"));
        let sources = shared.max(newest(&root.join(folder), &[".js"])?);
        let fresh = std::fs::metadata(&out)
            .and_then(|m| m.modified())
            .is_ok_and(|built_at| built_at > sources);
        if fresh {
            eprintln!("xtask: {name} is up to date");
        } else {
            let started = Instant::now();
            // The WIT folder is named relative to the workspace root: the
            // tool reads it through a WASI view of the working directory.
            status(
                &format!("building the JavaScript guest {name} with componentize-js"),
                node()
                    .current_dir(&root)
                    .arg(js_tool("@bytecodealliance/componentize-js/src/cli.js"))
                    .arg(Path::new(folder).join(entry))
                    .args(["--wit", "wit", "--world-name", JS_WORLD, "-o"])
                    .arg(&out),
            )
            .map_err(|e| format!("{e}\n{folder} must componentize against {JS_WORLD}."))?;
            eprintln!(
                "xtask:   built {name} in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        check_component(&out)?;
        built.push(out);
    }
    Ok(built)
}

/// The files under `dir` (relative paths) and their contents.
fn tree(dir: &Path) -> Result<std::collections::BTreeMap<PathBuf, Vec<u8>>, String> {
    fn walk(
        base: &Path,
        dir: &Path,
        into: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>,
    ) -> Result<(), String> {
        let entries =
            std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
                .path();
            if path.is_dir() {
                walk(base, &path, into)?;
            } else {
                let bytes = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                let relative = path.strip_prefix(base).unwrap_or(&path).to_path_buf();
                into.insert(relative, bytes);
            }
        }
        Ok(())
    }
    let mut files = std::collections::BTreeMap::new();
    if dir.exists() {
        walk(dir, dir, &mut files)?;
    }
    Ok(files)
}

/// Generate the JavaScript SDK's types: the WIT world's with `jco types`
/// (`guest-sdk/js/types/wit`), then the SDK's declarations from its JSDoc
/// with `tsc`, which also checks the SDK's WIT adapter against the WIT's
/// types. With `write` the committed `guest-sdk/js/types` is replaced;
/// without it they are generated aside and must equal the committed ones.
fn js_types(write: bool) -> Result<(), String> {
    ensure_js_tools()?;
    let root = root();
    let committed = root.join(JS_SDK).join("types");
    let out = if write {
        committed.clone()
    } else {
        target_dir().join("tools").join("js-types")
    };
    if out.exists() {
        std::fs::remove_dir_all(&out)
            .map_err(|e| format!("cannot remove {}: {e}", out.display()))?;
    }
    status(
        "generating the WIT world's TypeScript types with jco",
        node()
            .current_dir(&root)
            .env("LEASEHOLD_JS_TOOLS", js_tools_dir())
            .arg("--import")
            .arg(
                url_of(&root.join(JS_TOOL_PINS).join("preopen.mjs"))
                    .ok_or("the preopen script's path is not UTF-8")?,
            )
            .arg(js_tool("@bytecodealliance/jco/dist/jco.js"))
            .args(["types", "wit", "--world-name", JS_WORLD, "--quiet", "-o"])
            .arg(out.join("wit")),
    )?;
    status(
        "checking the JavaScript SDK's types (tsc) and declaring them",
        node()
            .current_dir(root.join(JS_SDK))
            .arg(js_tool("typescript/bin/tsc"))
            .args(["-p", "tsconfig.json", "--outDir"])
            .arg(&out),
    )?;
    if write {
        return Ok(());
    }
    // tsc read the committed WIT types (tsconfig.json's paths): compare
    // everything generated with what is committed.
    if tree(&out)? != tree(&committed)? {
        return Err(format!(
            "{} is not what the WIT and the SDK's sources generate: run `cargo xtask js-types` \
             and commit the result",
            committed.display()
        ));
    }
    Ok(())
}

/// A `file://` URL of an absolute path (for `node --import`).
fn url_of(path: &Path) -> Option<String> {
    path.to_str().map(|p| format!("file://{p}"))
}

/// Check the JavaScript SDK's generated types, then run the SDK's and the
/// JavaScript controllers' `node --test` suites natively (against the
/// SDK's fake host).
fn js_tests() -> Result<(), String> {
    let started = Instant::now();
    js_types(false)?;
    for folder in JS_TEST_DIRS {
        status(
            &format!("running the JavaScript tests of {folder}"),
            node().current_dir(root().join(folder)).arg("--test"),
        )?;
    }
    eprintln!(
        "xtask:   JavaScript checks and tests in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Fail early, and clearly, when PostgreSQL is not reachable.
fn check_postgres() -> Result<(), String> {
    let url = env::var("LEASEHOLD_DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.into());
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(&url);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let hostport = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    };
    let reachable = hostport
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(3)).is_ok());
    if reachable {
        Ok(())
    } else {
        Err(format!(
            "PostgreSQL is not reachable at {hostport}. The tests need a PostgreSQL server \
             (set LEASEHOLD_DATABASE_URL, default {DEFAULT_DATABASE_URL})."
        ))
    }
}

fn test() -> Result<(), String> {
    status(
        "checking formatting",
        cargo().args(["fmt", "--all", "--", "--check"]),
    )?;
    status(
        "running clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    build_guests()?;
    python_tests()?;
    js_tests()?;
    check_postgres()?;
    // The multi-process tests start the `leasehold` binary itself; `cargo
    // test` builds a package's binaries only for its own integration tests.
    status(
        "building the leasehold binary",
        cargo().args(["build", "--package", "leasehold-host", "--bin", "leasehold"]),
    )?;
    // The fault suite's deliberately broken build (fence check compiled
    // out), which proves its invariant checker can fail: the test-fixture
    // package `leasehold-unfenced`, built on its own. Selected together
    // with other packages, its dependency would switch the feature on in
    // leasehold-host for all of them (feature unification), so the test run
    // below excludes it.
    status(
        "building the leasehold-unfenced test fixture (fault suite only)",
        cargo().args(["build", "--package", UNFENCED_FIXTURE]),
    )?;
    // A host of the next schema version, for the schema-versions test.
    status(
        "building the leasehold-newer-schema test fixture",
        cargo().args(["build", "--package", "leasehold-newer-schema"]),
    )?;
    // Every test binary is built first, then run in parallel lanes
    // (`lanes.rs`: most of the suite waits on timeouts rather than the
    // CPU); doc tests last, through cargo.
    let mut env = Command::new("env");
    env.env("LEASEHOLD_GUEST_DIR", guest_dir());
    announce_fault_seeds(&mut env)?;
    let env: Vec<(String, std::ffi::OsString)> = env
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_string_lossy().into_owned(), v?.to_os_string())))
        .collect();
    println!("xtask: building the tests");
    let built = cargo()
        .args([
            "test",
            "--workspace",
            "--exclude",
            UNFENCED_FIXTURE,
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !built.status.success() {
        return Err(format!("building the tests failed ({})", built.status));
    }
    let binaries = lanes::parse_build_messages(&String::from_utf8_lossy(&built.stdout))?;
    lanes::run(lanes::order(binaries), lanes::lanes()?, &env, &[])?;
    let mut doc = cargo();
    doc.args([
        "test",
        "--workspace",
        "--exclude",
        UNFENCED_FIXTURE,
        "--doc",
    ]);
    doc.envs(env.iter().map(|(k, v)| (k, v)));
    status("running the doc tests", &mut doc)
}

fn run(extra: &[String]) -> Result<(), String> {
    build_guests()?;
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--package",
        "leasehold-host",
        "--bin",
        "leasehold",
        "--",
    ]);
    if extra.is_empty() {
        cmd.args(["run", "--config", "examples/leasehold.toml"]);
    } else {
        cmd.args(extra.iter().map(OsStr::new));
    }
    cmd.env("LEASEHOLD_GUEST_DIR", guest_dir());
    status("running leasehold", &mut cmd)
}

/// Benchmarks are optimized builds: the guests, the release `leasehold`
/// binary (started by the multi-process parts) and the benchmark runner.
fn bench(parts: &[String]) -> Result<(), String> {
    build_guests()?;
    status(
        "building the release leasehold binary",
        cargo().args([
            "build",
            "--release",
            "--package",
            "leasehold-host",
            "--bin",
            "leasehold",
        ]),
    )?;
    let mut cmd = cargo();
    cmd.args(["run", "--release", "--package", "leasehold-bench", "--"]);
    cmd.args(parts.iter().map(OsStr::new));
    // BENCHMARKS.md must come from one full run: only a run of every part
    // at full scale (no part named, no flag) writes it.
    if parts.is_empty() {
        cmd.arg("--write");
    }
    cmd.env("LEASEHOLD_GUEST_DIR", guest_dir());
    status("running the benchmarks", &mut cmd)
}

/// How many fresh random fault schedules a test run plays beside the fixed
/// seeds (the fault suite's `seeds::DEFAULT_SCHEDULES` minus its fixed
/// list).
const FRESH_FAULT_SEEDS: usize = 3;

/// Draw the fresh seeds of the fault suite's random schedules here and
/// print them before any test runs: cargo hides the output of tests that
/// pass, and CI output must still list every seed it ran so any of them
/// can be replayed. A seed the caller already named, or a replay of one
/// seed, is left as it is.
fn announce_fault_seeds(cmd: &mut Command) -> Result<(), String> {
    const REPLAY: &str =
        "cargo test -p leasehold-tests --test faults random_fault_schedules -- --nocapture";
    if let Some(seed) = env::var_os("LEASEHOLD_FAULT_SEED") {
        println!(
            "xtask: random fault schedules: replaying LEASEHOLD_FAULT_SEED={}",
            seed.to_string_lossy()
        );
        return Ok(());
    }
    if env::var_os("LEASEHOLD_FAULT_FRESH_SEEDS").is_none() {
        let mut bytes = [0u8; 6 * FRESH_FAULT_SEEDS];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .map_err(|e| format!("cannot draw fresh fault seeds from /dev/urandom: {e}"))?;
        let seeds: Vec<String> = bytes
            .chunks(6)
            .map(|chunk| {
                chunk
                    .iter()
                    .fold(0u64, |seed, byte| seed << 8 | u64::from(*byte))
                    .to_string()
            })
            .collect();
        cmd.env("LEASEHOLD_FAULT_FRESH_SEEDS", seeds.join(","));
        println!(
            "xtask: random fault schedules: fixed seeds {}, then fresh seeds {}",
            fixed_fault_seeds(),
            seeds.join(", ")
        );
    } else if let Some(named) = env::var_os("LEASEHOLD_FAULT_FRESH_SEEDS") {
        println!(
            "xtask: random fault schedules: fixed seeds {}, then fresh seeds {}",
            fixed_fault_seeds(),
            named.to_string_lossy()
        );
    }
    println!("xtask: replay one with LEASEHOLD_FAULT_SEED=<seed> {REPLAY}");
    Ok(())
}

/// The fault suite's fixed seeds as its source lists them (`pub const
/// FIXED: [u64; N] = [...]` in `tests/src/faults/seeds.rs`), for the
/// announcement only; the suite itself uses the constant.
fn fixed_fault_seeds() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/src/faults/seeds.rs");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("pub const FIXED:"))?;
            let list = line.rsplit_once('=')?.1.trim();
            Some(
                list.trim_end_matches(';')
                    .trim_matches(['[', ']'])
                    .to_string(),
            )
        })
        .unwrap_or_else(|| format!("(see {})", path.display()))
}
