//! `cargo xtask loc`: lines of Rust per crate, tests apart, and the longest files.
//!
//! A file is test code when it is named `tests.rs` or `*_tests.rs`, or lies under a
//! `tests/` folder (sibling test modules and cross-crate tests); everything else under a
//! crate's `src/` (and the facade's `src/`) is library code. `--check` fails when a file
//! is longer than [`MAX_FILE_LINES`].

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::cmd::{Workspace, announce};
use crate::usage_error;

/// No source file above this many lines (the project's rule).
pub(crate) const MAX_FILE_LINES: usize = 1_500;

/// Lines of one crate.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Count {
    /// Lines of library code.
    pub(crate) lines: usize,
    /// Lines of test code.
    pub(crate) test_lines: usize,
}

/// Whether `path` (relative to a crate's root) holds tests.
pub(crate) fn is_test(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The crates and the folders counted for each: the facade `rl` (`src/`) and every
/// `crates/NAME/src`.
fn crates(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = vec![("rl".to_owned(), root.join("src"))];
    let mut names: Vec<PathBuf> = fs::read_dir(root.join("crates"))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    names.sort();
    for dir in names {
        if dir.join("src").is_dir()
            && let Some(name) = dir.file_name().and_then(|n| n.to_str())
        {
            out.push((name.to_owned(), dir.join("src")));
        }
    }
    Ok(out)
}

/// Prints one JSON line per crate (`{"loc":NAME,"lines":N,"test_lines":M}`) and the
/// files longer than [`MAX_FILE_LINES`]; with `--check`, fails when there is one.
pub(crate) fn run(ws: &Workspace, args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        [other, ..] => usage_error!("`loc` takes only --check, got `{other}`"),
    };
    announce("loc", "lines per crate, tests apart");
    let mut too_long = Vec::new();
    for (name, src) in crates(&ws.root)? {
        let mut files = Vec::new();
        rust_files(&src, &mut files)?;
        let mut count = Count::default();
        for file in &files {
            let lines = fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?
                .lines()
                .count();
            let relative = file.strip_prefix(&src).unwrap_or(file);
            if is_test(relative) {
                count.test_lines += lines;
            } else {
                count.lines += lines;
            }
            if lines > MAX_FILE_LINES {
                too_long.push((
                    file.strip_prefix(&ws.root).unwrap_or(file).to_owned(),
                    lines,
                ));
            }
        }
        println!(
            "{}",
            json!({"loc": name, "lines": count.lines, "test_lines": count.test_lines})
        );
    }
    for (file, lines) in &too_long {
        eprintln!(
            "    {}: {lines} lines (more than {MAX_FILE_LINES})",
            file.display()
        );
    }
    if check && !too_long.is_empty() {
        bail!(
            "{} file(s) longer than {MAX_FILE_LINES} lines: split them",
            too_long.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_told_apart_from_library_files() {
        for (path, test) in [
            ("tests.rs", true),
            ("trainer/tests.rs", true),
            ("trainer/recurrent_tests.rs", true),
            ("tests/cli.rs", true),
            ("trainer.rs", false),
            ("trainer/off_policy.rs", false),
            ("contests.rs", false),
        ] {
            assert_eq!(is_test(Path::new(path)), test, "{path}");
        }
    }
}
