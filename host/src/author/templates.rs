//! The project `leasehold new` writes (`host/templates/`, compiled in):
//! a controller that greets, its unit tests against the language's fake
//! host, a host config with a commented `http_allow`, a world file for
//! `leasehold sim`, a README and a `.gitignore`. Placeholders are
//! `{{name}}` (the controller's name), `{{crate}}` (its Rust library
//! name), `{{version}}` (this leasehold's), `{{edition}}` and
//! `{{rust_version}}` (the repository's).

use super::{AuthorError, Language};

/// One file of a template: where it goes in the project (which may hold
/// `{{name}}`), and its text.
struct Template {
    path: &'static str,
    text: &'static str,
}

macro_rules! templates {
    ($( $path:literal => $file:literal ),* $(,)?) => {
        &[ $( Template { path: $path, text: include_str!(concat!("../../templates/", $file)) } ),* ]
    };
}

const COMMON: &[Template] = templates![
    "leasehold.toml" => "common/leasehold.toml",
    "{{name}}.sim.toml" => "common/sim.toml",
];

const RUST: &[Template] = templates![
    "Cargo.toml" => "rust/Cargo.toml",
    "src/lib.rs" => "rust/src/lib.rs",
    "tests/greeter.rs" => "rust/tests/greeter.rs",
    "README.md" => "rust/README.md",
];

const PYTHON: &[Template] = templates![
    "pyproject.toml" => "python/pyproject.toml",
    "app.py" => "python/app.py",
    "controller.py" => "python/controller.py",
    "tests/test_controller.py" => "python/tests/test_controller.py",
    "README.md" => "python/README.md",
];

const JS: &[Template] = templates![
    "package.json" => "js/package.json",
    "app.js" => "js/app.js",
    "controller.js" => "js/controller.js",
    "test/controller.test.js" => "js/test/controller.test.js",
    "README.md" => "js/README.md",
];

const GITIGNORE: &str = include_str!("../../templates/common/gitignore");

/// The values of the placeholders.
pub struct Values {
    /// The controller's name.
    pub name: String,
    /// The Rust edition the repository's crates use.
    pub edition: String,
    /// The oldest Rust the repository builds with.
    pub rust_version: String,
}

/// The files of a new `language` project, relative to its folder, with
/// their placeholders filled in.
pub fn render(language: Language, values: &Values) -> Result<Vec<(String, String)>, AuthorError> {
    let own = match language {
        Language::Rust => RUST,
        Language::Python => PYTHON,
        Language::JavaScript => JS,
    };
    let fill = |text: &str| {
        text.replace("{{name}}", &values.name)
            .replace("{{crate}}", &values.name.replace('-', "_"))
            .replace("{{version}}", env!("CARGO_PKG_VERSION"))
            .replace("{{edition}}", &values.edition)
            .replace("{{rust_version}}", &values.rust_version)
    };
    let mut files: Vec<(String, String)> = own
        .iter()
        .chain(COMMON)
        .map(|t| (fill(t.path), fill(t.text)))
        .collect();
    let extra = match language {
        Language::Rust => "/target/\n",
        Language::Python => "__pycache__/\n.pytest_cache/\n",
        Language::JavaScript => "node_modules/\n",
    };
    files.push((".gitignore".to_string(), format!("{GITIGNORE}{extra}")));
    if let Some((path, text)) = files.iter().find(|(_, text)| text.contains("{{")) {
        return Err(AuthorError::Embedded(format!(
            "the template {path} has a placeholder left: {}",
            text.lines().find(|l| l.contains("{{")).unwrap_or_default()
        )));
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        Values {
            name: "my-greeter".into(),
            edition: "2024".into(),
            rust_version: "1.95".into(),
        }
    }

    #[test]
    fn every_language_gets_a_controller_its_tests_a_config_and_a_world() {
        for (language, controller, test) in [
            (Language::Rust, "src/lib.rs", "tests/greeter.rs"),
            (
                Language::Python,
                "controller.py",
                "tests/test_controller.py",
            ),
            (
                Language::JavaScript,
                "controller.js",
                "test/controller.test.js",
            ),
        ] {
            let files = render(language, &values()).unwrap();
            let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
            for wanted in [
                controller,
                test,
                "leasehold.toml",
                "my-greeter.sim.toml",
                "README.md",
                ".gitignore",
            ] {
                assert!(
                    paths.contains(&wanted),
                    "{language:?}: {wanted} in {paths:?}"
                );
            }
            let config = &files.iter().find(|(p, _)| p == "leasehold.toml").unwrap().1;
            assert!(config.contains("component = \"build/my-greeter.wasm\""));
            assert!(config.contains("# http_allow = ["), "{config}");
        }
        let rust = render(Language::Rust, &values()).unwrap();
        let test = &rust
            .iter()
            .find(|(p, _)| p == "tests/greeter.rs")
            .unwrap()
            .1;
        assert!(test.contains("use my_greeter::"), "{test}");
    }
}
