//! `leasehold check` names the guest toolchains' typical mistakes, each
//! with what is wrong and what the host expects instead:
//!
//! - a plain WASI command (a program with a `main`, what `cargo build
//!   --target wasm32-wasip2` of a binary or componentize-py's default
//!   world makes) instead of a controller;
//! - a component built against another world (componentize-py or
//!   cargo-component given the wrong world name): it exports another
//!   world's interfaces;
//! - a component whose reconciler export lacks a function.
//!
//! The components are written here in the component text format: they
//! only need the shape of each mistake.

use leasehold_tests::TempDir;
use leasehold_tests::process::{free_port, run_to_end};

/// A WASI command: it exports `wasi:cli/run` and nothing else.
const WASI_COMMAND: &str = r#"(component
  (core module $m (func (export "run") (result i32) (i32.const 0)))
  (core instance $i (instantiate $m))
  (func $run (result (result)) (canon lift (core func $i "run")))
  (instance $cli (export "run" (func $run)))
  (export "wasi:cli/run@0.2.6" (instance $cli)))"#;

/// A component of the `wasi:http/proxy` world: it exports an HTTP handler.
const OTHER_WORLD: &str = r#"(component
  (core module $m (func (export "handle")))
  (core instance $i (instantiate $m))
  (func $handle (canon lift (core func $i "handle")))
  (instance $h (export "handle" (func $handle)))
  (export "wasi:http/incoming-handler@0.2.6" (instance $h)))"#;

/// A 0.2.0 reconciler export with `describe` but no `reconcile`.
const MISSING_RECONCILE: &str = r#"(component
  (core module $m (func (export "describe")))
  (core instance $i (instantiate $m))
  (func $describe (canon lift (core func $i "describe")))
  (instance $r (export "describe" (func $describe)))
  (export "leasehold:controller/reconciler@0.2.0" (instance $r)))"#;

/// Write each `(name, text)` component into `dir` and return a config on
/// the embedded backend running them all, one controller each.
fn config(dir: &TempDir, components: &[(&str, &str)]) -> std::path::PathBuf {
    let mut text = format!(
        "cluster = \"toolchains\"\n[http]\nlisten = \"127.0.0.1:{}\"\n",
        free_port()
    );
    for (name, wat) in components {
        let path = dir.path().join(format!("{name}.wasm"));
        std::fs::write(&path, wat::parse_str(wat).expect("valid component text"))
            .expect("write the component");
        text.push_str(&format!(
            "\n[[controllers]]\nname = \"{name}\"\ncomponent = \"{}\"\n",
            path.display()
        ));
    }
    let path = dir.path().join("leasehold.toml");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// `leasehold check` of a config running only `wat` as controller `name`:
/// it fails, and its one error line is returned.
fn refusal(name: &str, wat: &str) -> String {
    let dir = TempDir::new();
    let path = config(&dir, &[(name, wat)]);
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(!stdout.contains("check passed"), "{stdout}");
    assert!(stderr.contains(&format!("controller {name}")), "{stderr}");
    assert!(stderr.contains(&format!("{name}.wasm")), "{stderr}");
    // Shown with --nocapture: the message as an author reads it.
    eprintln!("{stderr}");
    stderr
}

/// What every refusal of a component that is not a controller ends with:
/// what the host expects, for each toolchain.
fn says_what_the_host_expects(refusal: &str) {
    for expected in [
        "a controller exports leasehold:controller/reconciler@0.4.0",
        "functions describe and reconcile",
        "-w leasehold:controller/controller@0.4.0",
        "leasehold-guest SDK's export macro",
    ] {
        assert!(refusal.contains(expected), "{expected:?} in {refusal}");
    }
}

#[test]
fn check_names_a_wasi_command_and_what_a_controller_exports() {
    let stderr = refusal("command", WASI_COMMAND);
    assert!(
        stderr.contains("it is a WASI command (the world wasi:cli/command"),
        "{stderr}"
    );
    assert!(stderr.contains("wasi:cli/run@0.2.6"), "{stderr}");
    says_what_the_host_expects(&stderr);
}

#[test]
fn check_names_a_component_built_against_another_world() {
    let stderr = refusal("proxy", OTHER_WORLD);
    assert!(
        stderr.contains(
            "it was built against another world, one that exports \
             wasi:http/incoming-handler@0.2.6"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("wrong world name"), "{stderr}");
    assert!(!stderr.contains("WASI command"), "{stderr}");
    says_what_the_host_expects(&stderr);
}

#[test]
fn check_names_the_function_a_reconciler_export_lacks() {
    let stderr = refusal("hollow", MISSING_RECONCILE);
    assert!(
        stderr.contains("its leasehold:controller/reconciler@0.2.0 export lacks reconcile:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the host calls describe and reconcile"),
        "{stderr}"
    );
}

#[test]
fn check_lists_every_refused_component_at_once() {
    let dir = TempDir::new();
    let path = config(
        &dir,
        &[
            ("command", WASI_COMMAND),
            ("proxy", OTHER_WORLD),
            ("hollow", MISSING_RECONCILE),
        ],
    );
    let (code, stdout, stderr) = run_to_end(&["check", "--config", path.to_str().unwrap()], &[]);
    assert_ne!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for line in [
        "controller command",
        "WASI command",
        "controller proxy",
        "another world",
        "controller hollow",
        "lacks reconcile",
    ] {
        assert!(stderr.contains(line), "{line:?} in {stderr}");
    }
}
