//! `cargo metadata`, run and read with serde_json.

use anyhow::{Context, Result};
use serde_json::Value;

use crate::cmd::{Cmd, Workspace};

/// The `cargo metadata` command line with `extra` arguments after the fixed ones.
pub(crate) fn command(extra: &[&str]) -> Cmd {
    Cmd::cargo(["metadata", "--format-version", "1"]).args(extra.iter().copied())
}

/// Runs `cargo metadata --format-version 1 <extra>` in the workspace root and parses it.
pub(crate) fn load(ws: &Workspace, extra: &[&str]) -> Result<Value> {
    let cmd = command(extra);
    let json = cmd.read_stdout(ws)?;
    serde_json::from_str(&json).with_context(|| format!("`{}` printed invalid JSON", cmd.display()))
}

/// A workspace member as `cargo metadata` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// The package name, e.g. `rl-core`.
    pub(crate) name: String,
    /// Its targets, in manifest order.
    pub(crate) targets: Vec<Target>,
}

/// One target (lib, bin, test, bench, example...) of a package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The target name, e.g. `envs` for `benches/envs.rs`.
    pub(crate) name: String,
    /// Its kinds, e.g. `["lib"]`, `["bench"]`.
    pub(crate) kinds: Vec<String>,
}

impl Member {
    /// Whether the package has a library target (any crate type a dependent can use).
    pub(crate) fn is_library(&self) -> bool {
        self.targets.iter().any(|target| {
            target.kinds.iter().any(|kind| {
                matches!(
                    kind.as_str(),
                    "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro"
                )
            })
        })
    }

    /// Names of the targets of the given kind, in manifest order.
    pub(crate) fn targets_of_kind(&self, kind: &str) -> Vec<String> {
        self.targets
            .iter()
            .filter(|target| target.kinds.iter().any(|k| k == kind))
            .map(|target| target.name.clone())
            .collect()
    }
}

/// Reads a string field or explains which one is missing.
pub(crate) fn str_field<'a>(value: &'a Value, field: &str) -> Result<&'a str> {
    value[field]
        .as_str()
        .with_context(|| format!("cargo metadata: missing string field `{field}`"))
}

/// Reads an array field or explains which one is missing.
pub(crate) fn array_field<'a>(value: &'a Value, field: &str) -> Result<&'a Vec<Value>> {
    value[field]
        .as_array()
        .with_context(|| format!("cargo metadata: missing array field `{field}`"))
}

/// The workspace members listed in a `cargo metadata` document, in `packages` order.
pub(crate) fn members(meta: &Value) -> Result<Vec<Member>> {
    let ids = array_field(meta, "workspace_members")?
        .iter()
        .map(|id| {
            id.as_str()
                .context("cargo metadata: non-string workspace member id")
        })
        .collect::<Result<Vec<&str>>>()?;
    let mut members = Vec::new();
    for package in array_field(meta, "packages")? {
        if !ids.contains(&str_field(package, "id")?) {
            continue;
        }
        let mut targets = Vec::new();
        for target in array_field(package, "targets")? {
            let kinds = array_field(target, "kind")?
                .iter()
                .filter_map(|kind| kind.as_str().map(str::to_owned))
                .collect();
            targets.push(Target {
                name: str_field(target, "name")?.to_owned(),
                kinds,
            });
        }
        members.push(Member {
            name: str_field(package, "name")?.to_owned(),
            targets,
        });
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_their_targets() -> Result<()> {
        let meta = serde_json::json!({
            "workspace_members": ["path+file:///w#rl@0.1.0", "path+file:///w/x#xtask@0.1.0"],
            "packages": [
                {"id": "path+file:///w#rl@0.1.0", "name": "rl", "targets": [
                    {"name": "rl", "kind": ["lib"]},
                    {"name": "envs", "kind": ["bench"]},
                    {"name": "storage", "kind": ["bench"]},
                ]},
                {"id": "path+file:///w/x#xtask@0.1.0", "name": "xtask", "targets": [
                    {"name": "xtask", "kind": ["bin"]},
                ]},
                {"id": "registry+x#dfdx@0.13.0", "name": "dfdx", "targets": [
                    {"name": "dfdx", "kind": ["lib"]},
                ]},
            ],
        });
        let members = members(&meta)?;
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["rl", "xtask"]);
        assert!(members[0].is_library());
        assert!(!members[1].is_library());
        assert_eq!(members[0].targets_of_kind("bench"), ["envs", "storage"]);
        Ok(())
    }
}
