//! Which language a project folder is written in, and its name (what its
//! component is called): a `Cargo.toml` is Rust (the package's name), a
//! `pyproject.toml` with `app.py` is Python (`[project] name`), a
//! `package.json` with `app.js` is JavaScript (its `name`).

use std::path::{Path, PathBuf};

use super::{AuthorError, Language};
use crate::limits::MAX_PROJECT_MANIFEST_BYTES;

/// A project to build.
#[derive(Debug, Clone)]
pub struct Project {
    /// Its folder, absolute.
    pub dir: PathBuf,
    /// Its language.
    pub language: Language,
    /// Its name: the component is `build/<name>.wasm`.
    pub name: String,
}

impl Project {
    /// Where its component goes.
    pub fn component(&self) -> PathBuf {
        self.dir.join("build").join(format!("{}.wasm", self.name))
    }
}

/// The project in `dir`.
pub fn detect(dir: &Path) -> Result<Project, AuthorError> {
    let dir = std::fs::canonicalize(dir).map_err(|e| AuthorError::Io {
        what: format!("find the project folder {}", dir.display()),
        error: e,
    })?;
    let has = |file: &str| dir.join(file).is_file();
    let mut found = Vec::new();
    if has("Cargo.toml") {
        found.push(Language::Rust);
    }
    if has("pyproject.toml") && has("app.py") {
        found.push(Language::Python);
    }
    if has("package.json") && has("app.js") {
        found.push(Language::JavaScript);
    }
    let language = match found.as_slice() {
        [] => return Err(AuthorError::NotAProject(dir)),
        [one] => *one,
        many => {
            return Err(AuthorError::Ambiguous {
                dir,
                found: many.iter().map(|l| l.as_str()).collect(),
            });
        }
    };
    let name = match language {
        Language::Rust => {
            let file = dir.join("Cargo.toml");
            let table: toml::Table = read(&file)?.parse().map_err(|e| AuthorError::Manifest {
                file: file.clone(),
                why: format!("does not parse: {e}"),
            })?;
            table
                .get("package")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                .map(str::to_string)
                .ok_or_else(|| AuthorError::Manifest {
                    file,
                    why: "has no [package] name: a controller is a package".into(),
                })?
        }
        Language::Python => {
            let file = dir.join("pyproject.toml");
            let table: toml::Table = read(&file)?.parse().map_err(|e| AuthorError::Manifest {
                file: file.clone(),
                why: format!("does not parse: {e}"),
            })?;
            table
                .get("project")
                .and_then(|p| p.get("name"))
                .and_then(|n| n.as_str())
                .map(str::to_string)
                .ok_or_else(|| AuthorError::Manifest {
                    file,
                    why: "has no [project] name: the component is named after it".into(),
                })?
        }
        Language::JavaScript => {
            let file = dir.join("package.json");
            let json: serde_json::Value =
                serde_json::from_str(&read(&file)?).map_err(|e| AuthorError::Manifest {
                    file: file.clone(),
                    why: format!("is not JSON: {e}"),
                })?;
            json.get("name")
                .and_then(|n| n.as_str())
                .map(str::to_string)
                .ok_or_else(|| AuthorError::Manifest {
                    file,
                    why: "has no \"name\": the component is named after it".into(),
                })?
        }
    };
    // It names a file in build/: nothing that could leave that folder.
    if name.is_empty()
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(AuthorError::Manifest {
            file: dir,
            why: format!(
                "the project's name {name:?} cannot name its component: use letters, digits, \
                 '-', '_' and '.'"
            ),
        });
    }
    Ok(Project {
        dir,
        language,
        name,
    })
}

fn read(file: &Path) -> Result<String, AuthorError> {
    let meta = std::fs::metadata(file).map_err(|e| AuthorError::Io {
        what: format!("read {}", file.display()),
        error: e,
    })?;
    if meta.len() > MAX_PROJECT_MANIFEST_BYTES as u64 {
        return Err(AuthorError::Manifest {
            file: file.to_path_buf(),
            why: format!(
                "is {} bytes, more than a manifest needs ({MAX_PROJECT_MANIFEST_BYTES})",
                meta.len()
            ),
        });
    }
    std::fs::read_to_string(file).map_err(|e| AuthorError::Io {
        what: format!("read {}", file.display()),
        error: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(tag: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("leasehold-project-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn each_language_is_told_by_its_files() {
        let rust = folder("rust", &[("Cargo.toml", "[package]\nname = \"a\"\n")]);
        let python = folder(
            "python",
            &[
                ("pyproject.toml", "[project]\nname = \"b\"\n"),
                ("app.py", ""),
            ],
        );
        let js = folder(
            "js",
            &[("package.json", "{\"name\": \"c\"}"), ("app.js", "")],
        );
        for (dir, language, name) in [
            (&rust, Language::Rust, "a"),
            (&python, Language::Python, "b"),
            (&js, Language::JavaScript, "c"),
        ] {
            let project = detect(dir).unwrap();
            assert_eq!((project.language, project.name.as_str()), (language, name));
            assert!(project.component().ends_with(format!("build/{name}.wasm")));
        }
        for dir in [rust, python, js] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn a_folder_that_is_no_project_or_two_is_refused() {
        let none = folder("none", &[("pyproject.toml", "[project]\nname = \"b\"\n")]);
        assert!(matches!(detect(&none), Err(AuthorError::NotAProject(_))));
        let two = folder(
            "two",
            &[
                ("Cargo.toml", "[package]\nname = \"a\"\n"),
                ("package.json", "{\"name\": \"c\"}"),
                ("app.js", ""),
            ],
        );
        assert!(matches!(detect(&two), Err(AuthorError::Ambiguous { .. })));
        let escaping = folder(
            "escape",
            &[("package.json", "{\"name\": \"../x\"}"), ("app.js", "")],
        );
        assert!(matches!(
            detect(&escaping),
            Err(AuthorError::Manifest { .. })
        ));
        for dir in [none, two, escaping] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
