//! The SDK's modules form layers without import cycles (see "Layers" in the
//! crate's top doc): every `crate::<module>` path in a module's code names a
//! module of a strictly lower layer (or the module itself). `sys`, the seam
//! to the host, is at the bottom and imports nothing of the crate.
//!
//! The check reads the sources rather than trusting a convention: a new
//! module must be placed in [`LAYERS`], and a path through a crate-root
//! re-export (`crate::Quota`) is refused because it hides which module it
//! depends on.

use std::fs;
use std::path::{Path, PathBuf};

/// The layers, bottom first. Same number, same layer: such modules may not
/// import each other. `lib.rs` (the crate root, which only declares and
/// re-exports) sits above them all and is not checked.
const LAYERS: &[(&str, u32)] = &[
    ("limits", 0),
    ("sys", 1),
    ("http", 2),
    ("error", 3),
    ("clock", 3),
    ("fence", 3),
    ("log", 3),
    ("object", 4),
    ("settings", 4),
    ("condition", 4),
    ("transaction", 5),
    ("retry", 5),
    ("controller", 6),
    ("finalizer", 7),
    ("export", 8),
    ("fake", 9),
];

fn layer(module: &str) -> Option<u32> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|&(_, layer)| layer)
}

/// Every `.rs` file under `dir`, sorted so failures read the same each run.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir:?}: {e}"));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The top-level module a source file belongs to: `sys/native.rs` and
/// `sys/mod.rs` are `sys`, `object.rs` is `object`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The modules `code` (one file's text) names through `crate::`, each with
/// its line number; `Err` for a path the layering cannot judge.
fn imports(code: &str) -> Vec<(usize, Result<String, String>)> {
    let mut found = Vec::new();
    for (index, line) in code.lines().enumerate() {
        // Comments (and doc comments, whose links are not imports) end
        // the code on a line.
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            // `$crate::` only occurs in the root's macros.
            let after = &rest[at + "crate::".len()..];
            let ident: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let next = after[ident.len()..].chars().next();
            let verdict = if next == Some('!') {
                // The exported macros (`crate::info!`) expand to `crate::log`.
                Ok("log".to_string())
            } else if ident.is_empty() {
                Err(format!(
                    "`{}`: name one module per path so the layer is visible",
                    code.trim()
                ))
            } else if layer(&ident).is_some() {
                Ok(ident.clone())
            } else {
                Err(format!(
                    "`crate::{ident}` goes through the crate root; name the module that defines it"
                ))
            };
            found.push((index + 1, verdict));
            rest = &after[ident.len()..];
        }
        if code.contains("super::super") {
            found.push((
                index + 1,
                Err("`super::super` reaches past the module; use `crate::<module>`".into()),
            ));
        }
    }
    found
}

/// Every import that breaks the layering, as a readable line.
fn violations(src: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for file in sources(src) {
        let module = module_of(src, &file);
        if module == "lib" {
            continue;
        }
        let shown = file.strip_prefix(src).expect("under src").display();
        let Some(own) = layer(&module) else {
            problems.push(format!(
                "{shown}: module `{module}` has no layer; add it to LAYERS and the top doc"
            ));
            continue;
        };
        let code = fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {shown}: {e}"));
        for (line, import) in imports(&code) {
            match import {
                Err(why) => problems.push(format!("{shown}:{line}: {why}")),
                Ok(target) if target == module => {}
                Ok(target) => {
                    let theirs = layer(&target).expect("checked in imports");
                    if theirs >= own {
                        problems.push(format!(
                            "{shown}:{line}: `{module}` (layer {own}) imports `{target}` \
                             (layer {theirs}); only lower layers may be imported"
                        ));
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn modules_import_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = violations(&src);
    assert!(
        problems.is_empty(),
        "the SDK's layering is broken:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_sees_imports_through_every_path_form() {
    let code = "use crate::object::Api;\n\
                use crate::{sys, error};\n\
                let x = crate::Quota::ObjectsPerKind; // crate::fake in a comment\n\
                crate::info!(\"hi\");\n\
                use super::super::thing;\n";
    let found: Vec<(usize, Result<String, String>)> = imports(code);
    assert_eq!(found[0], (1, Ok("object".into())));
    assert!(matches!(&found[1], (2, Err(_))), "{found:?}");
    assert!(
        matches!(&found[2], (3, Err(why)) if why.contains("crate::Quota")),
        "{found:?}"
    );
    assert_eq!(found[3], (4, Ok("log".into())));
    assert!(matches!(&found[4], (5, Err(_))), "{found:?}");
    assert_eq!(found.len(), 5, "the comment names no import: {found:?}");
}
