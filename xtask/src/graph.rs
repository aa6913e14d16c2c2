//! A resolved package graph reduced to its normal (non-dev, non-build) dependency
//! edges, with the reachability queries the boundary check needs.

use std::collections::{BTreeMap, VecDeque};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::metadata::{array_field, str_field};

/// One package of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    /// The package name (several nodes share one when versions differ).
    pub(crate) name: String,
    /// Whether the package is a workspace member.
    pub(crate) member: bool,
    /// Normal dependencies, as node indices, sorted by name for stable reports.
    pub(crate) deps: Vec<usize>,
}

/// Packages and their normal dependency edges. Nodes are keyed by package id, so two
/// versions of one crate stay two nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Graph {
    /// All packages, sorted by (name, id).
    pub(crate) nodes: Vec<Node>,
}

impl Graph {
    /// Builds a graph from packages `(id, name, is_member)` and normal edges
    /// `(from_id, to_id)`. Fails on an edge naming an unknown package id.
    pub(crate) fn new<'a>(
        packages: impl IntoIterator<Item = (&'a str, &'a str, bool)>,
        edges: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self> {
        let mut packages: Vec<(&str, &str, bool)> = packages.into_iter().collect();
        packages.sort_by_key(|&(id, name, _)| (name, id));
        packages.dedup_by_key(|&mut (id, _, _)| id);
        let index: BTreeMap<&str, usize> = packages
            .iter()
            .enumerate()
            .map(|(i, &(id, _, _))| (id, i))
            .collect();
        let mut nodes: Vec<Node> = packages
            .iter()
            .map(|&(_, name, member)| Node {
                name: name.to_owned(),
                member,
                deps: Vec::new(),
            })
            .collect();
        for (from, to) in edges {
            let lookup = |id: &str| {
                index
                    .get(id)
                    .copied()
                    .with_context(|| format!("dependency edge names unknown package `{id}`"))
            };
            let (from, to) = (lookup(from)?, lookup(to)?);
            nodes[from].deps.push(to);
        }
        for node in &mut nodes {
            // Indices follow (name, id) order, so sorting them sorts by name.
            node.deps.sort_unstable();
            node.deps.dedup();
        }
        Ok(Self { nodes })
    }

    /// Builds the graph of `resolve.nodes` in a `cargo metadata` document, keeping an
    /// edge when at least one of its `dep_kinds` is normal (`"kind": null`), whatever
    /// its target platform, and the dependency is actually switched on.
    ///
    /// The metadata resolve graph comes from cargo's dependency resolver, which also
    /// lists optional dependencies that are only named through weak features
    /// (`std = ["cudarc?/std"]` in dfdx: rust-lang/cargo#10801, #15784) and so are
    /// never built. An edge to an optional dependency is therefore kept only when one
    /// of the node's resolved `features` enables it (`dep:NAME` or `NAME/feature`).
    pub(crate) fn from_metadata(meta: &Value) -> Result<Self> {
        let members = array_field(meta, "workspace_members")?
            .iter()
            .map(|id| {
                id.as_str()
                    .context("cargo metadata: non-string workspace member id")
            })
            .collect::<Result<Vec<&str>>>()?;
        let mut packages = Vec::new();
        let mut by_id = BTreeMap::new();
        for package in array_field(meta, "packages")? {
            let id = str_field(package, "id")?;
            let name = str_field(package, "name")?;
            packages.push((id, name, members.contains(&id)));
            by_id.insert(id, (name, package));
        }
        if meta["resolve"].is_null() {
            bail!("cargo metadata has no `resolve` graph (run without --no-deps)");
        }
        let mut edges = Vec::new();
        for node in array_field(&meta["resolve"], "nodes")? {
            let from = str_field(node, "id")?;
            let enabled: Vec<&str> = node["features"]
                .as_array()
                .map(|features| features.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            for dep in array_field(node, "deps")? {
                let kinds = array_field(dep, "dep_kinds").with_context(|| {
                    format!("dependency of `{from}` without dep_kinds (cargo too old?)")
                })?;
                if !kinds.iter().any(|kind| kind["kind"].is_null()) {
                    continue;
                }
                let to = str_field(dep, "pkg")?;
                let switched_on = match (by_id.get(from), by_id.get(to)) {
                    (Some(&(_, package)), Some(&(to_name, _))) => {
                        normal_dep_enabled(package, &enabled, to_name)
                    }
                    // Unknown ids fail in `Graph::new` below with a clear message.
                    _ => true,
                };
                if switched_on {
                    edges.push((from, to));
                }
            }
        }
        Self::new(packages, edges)
    }

    /// Indices of the workspace members, in name order.
    pub(crate) fn members(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].member)
    }

    /// The workspace member called `name`, if any.
    pub(crate) fn member(&self, name: &str) -> Option<usize> {
        self.members().find(|&i| self.nodes[i].name == name)
    }

    /// A shortest path of normal edges from node `from` to a package named `target`
    /// (`from` first, the target last), or `None` when no such package is reachable.
    pub(crate) fn path_to(&self, from: usize, target: &str) -> Option<Vec<usize>> {
        let mut parent: Vec<Option<usize>> = vec![None; self.nodes.len()];
        let mut seen = vec![false; self.nodes.len()];
        let mut queue = VecDeque::from([from]);
        seen[from] = true;
        while let Some(at) = queue.pop_front() {
            if at != from && self.nodes[at].name == target {
                let mut path = vec![at];
                let mut cur = at;
                while let Some(prev) = parent[cur] {
                    path.push(prev);
                    cur = prev;
                }
                path.reverse();
                return Some(path);
            }
            for &dep in &self.nodes[at].deps {
                if !seen[dep] {
                    seen[dep] = true;
                    parent[dep] = Some(at);
                    queue.push_back(dep);
                }
            }
        }
        None
    }

    /// The package names along a path of node indices.
    pub(crate) fn names(&self, path: &[usize]) -> Vec<String> {
        path.iter().map(|&i| self.nodes[i].name.clone()).collect()
    }

    /// A graph from names alone (ids = names): `members` are the workspace members and
    /// every other name in `edges` is an external package. For tests.
    #[cfg(test)]
    pub(crate) fn from_names(members: &[&str], edges: &[(&str, &str)]) -> Result<Self> {
        let mut packages: Vec<(&str, &str, bool)> =
            members.iter().map(|&name| (name, name, true)).collect();
        for &(from, to) in edges {
            for name in [from, to] {
                if !members.contains(&name) {
                    packages.push((name, name, false));
                }
            }
        }
        Self::new(packages, edges.iter().copied())
    }
}

/// Whether `package` (a `packages[]` entry of cargo metadata), with the resolved
/// features `enabled`, really uses its normal dependency on the package `dep_name`:
/// yes when one matching normal declaration is not optional or is enabled by a feature.
/// When the manifest data is missing, the answer is yes (the check stays strict).
fn normal_dep_enabled(package: &Value, enabled: &[&str], dep_name: &str) -> bool {
    let Some(declared) = package["dependencies"].as_array() else {
        return true;
    };
    let normal: Vec<&Value> = declared
        .iter()
        .filter(|dep| dep["name"].as_str() == Some(dep_name) && dep["kind"].is_null())
        .collect();
    if normal.is_empty() {
        return true;
    }
    normal.iter().any(|dep| {
        if dep["optional"].as_bool() != Some(true) {
            return true;
        }
        // The key features use for this dependency: its rename, else its name.
        let key = dep["rename"].as_str().unwrap_or(dep_name);
        let strong = format!("{key}/");
        let explicit = format!("dep:{key}");
        enabled.iter().any(|feature| {
            package["features"][*feature]
                .as_array()
                .is_some_and(|values| {
                    values
                        .iter()
                        .filter_map(Value::as_str)
                        .any(|value| value == explicit || value.starts_with(&strong))
                })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_path_is_reported_in_order() -> Result<()> {
        let graph = Graph::from_names(
            &["a"],
            &[
                ("a", "b"),
                ("b", "c"),
                ("c", "target"),
                ("a", "d"),
                ("d", "target"),
            ],
        )?;
        let a = graph.member("a").context("a")?;
        let path = graph.path_to(a, "target").context("reachable")?;
        assert_eq!(graph.names(&path), ["a", "d", "target"]);
        assert_eq!(graph.path_to(a, "nowhere"), None);
        Ok(())
    }

    #[test]
    fn cycles_terminate() -> Result<()> {
        let graph = Graph::from_names(&["a"], &[("a", "b"), ("b", "a")])?;
        let a = graph.member("a").context("a")?;
        assert_eq!(graph.path_to(a, "c"), None);
        Ok(())
    }

    #[test]
    fn unknown_edge_endpoint_is_an_error() {
        assert!(Graph::new([("a", "a", true)], [("a", "b")]).is_err());
    }

    /// A `cargo metadata`-shaped document: `rl-core` has a normal dep on `foo` (only on
    /// one platform), a dev dep on `devonly` and a build dep on `buildonly`; `two`
    /// depends on an old `foo` that depends on `dfdx`, while the new `foo` does not.
    fn sample_metadata() -> Value {
        serde_json::json!({
            "workspace_members": ["ws#rl-core@0.1.0"],
            "packages": [
                {"id": "ws#rl-core@0.1.0", "name": "rl-core"},
                {"id": "reg#foo@2.0.0", "name": "foo"},
                {"id": "reg#foo@1.0.0", "name": "foo"},
                {"id": "reg#two@1.0.0", "name": "two"},
                {"id": "reg#dfdx@0.13.0", "name": "dfdx"},
                {"id": "reg#devonly@1.0.0", "name": "devonly"},
                {"id": "reg#buildonly@1.0.0", "name": "buildonly"},
            ],
            "resolve": {"root": null, "nodes": [
                {"id": "ws#rl-core@0.1.0", "deps": [
                    {"name": "foo", "pkg": "reg#foo@2.0.0",
                     "dep_kinds": [{"kind": null, "target": "cfg(unix)"}]},
                    {"name": "devonly", "pkg": "reg#devonly@1.0.0",
                     "dep_kinds": [{"kind": "dev", "target": null}]},
                    {"name": "buildonly", "pkg": "reg#buildonly@1.0.0",
                     "dep_kinds": [{"kind": "build", "target": null}]},
                ]},
                {"id": "reg#devonly@1.0.0", "deps": [
                    {"name": "dfdx", "pkg": "reg#dfdx@0.13.0",
                     "dep_kinds": [{"kind": null, "target": null}]},
                ]},
                {"id": "reg#buildonly@1.0.0", "deps": [
                    {"name": "dfdx", "pkg": "reg#dfdx@0.13.0",
                     "dep_kinds": [{"kind": null, "target": null}]},
                ]},
                {"id": "reg#two@1.0.0", "deps": [
                    {"name": "foo", "pkg": "reg#foo@1.0.0",
                     "dep_kinds": [{"kind": null, "target": null}]},
                ]},
                {"id": "reg#foo@1.0.0", "deps": [
                    {"name": "dfdx", "pkg": "reg#dfdx@0.13.0",
                     "dep_kinds": [{"kind": "dev", "target": null}, {"kind": null, "target": null}]},
                ]},
                {"id": "reg#foo@2.0.0", "deps": []},
                {"id": "reg#dfdx@0.13.0", "deps": []},
            ]},
        })
    }

    #[test]
    fn metadata_keeps_only_normal_edges_and_versions_apart() -> Result<()> {
        let graph = Graph::from_metadata(&sample_metadata())?;
        let core = graph.member("rl-core").context("rl-core is a member")?;
        let deps: Vec<&str> = graph.nodes[core]
            .deps
            .iter()
            .map(|&i| graph.nodes[i].name.as_str())
            .collect();
        assert_eq!(deps, ["foo"], "dev and build edges are dropped");
        assert_eq!(graph.path_to(core, "dfdx"), None, "foo@2 is not foo@1");
        assert_eq!(graph.members().count(), 1);
        let two = graph
            .nodes
            .iter()
            .position(|n| n.name == "two")
            .context("two")?;
        let path = graph
            .path_to(two, "dfdx")
            .context("normal among dev kinds")?;
        assert_eq!(graph.names(&path), ["two", "foo", "dfdx"]);
        Ok(())
    }

    #[test]
    fn metadata_without_resolve_is_rejected() {
        let mut meta = sample_metadata();
        meta["resolve"] = Value::Null;
        assert!(Graph::from_metadata(&meta).is_err());
    }

    /// `lib` with the resolved features `enabled`: optional `cudarc` (weakly named by
    /// `std`, enabled by `cuda`), optional `gemm` under the rename `fastmath` (enabled
    /// strongly by `simd`), and `rand`, non-optional.
    fn optional_deps_metadata(enabled: &[&str]) -> Value {
        serde_json::json!({
            "workspace_members": ["ws#lib@0.1.0"],
            "packages": [
                {"id": "ws#lib@0.1.0", "name": "lib",
                 "dependencies": [
                    {"name": "cudarc", "rename": null, "optional": true, "kind": null},
                    {"name": "gemm", "rename": "fastmath", "optional": true, "kind": null},
                    {"name": "rand", "rename": null, "optional": false, "kind": null},
                    {"name": "cudarc", "rename": null, "optional": false, "kind": "dev"},
                 ],
                 "features": {
                    "std": ["cudarc?/std", "rand/std"],
                    "cuda": ["dep:cudarc"],
                    "simd": ["fastmath/avx"],
                    "fastmath": ["dep:fastmath"],
                 }},
                {"id": "reg#cudarc@0.9.15", "name": "cudarc"},
                {"id": "reg#gemm@0.15.0", "name": "gemm"},
                {"id": "reg#rand@0.9.0", "name": "rand"},
            ],
            "resolve": {"root": null, "nodes": [
                {"id": "ws#lib@0.1.0", "features": enabled, "deps": [
                    {"name": "cudarc", "pkg": "reg#cudarc@0.9.15",
                     "dep_kinds": [{"kind": null, "target": null}, {"kind": "dev", "target": null}]},
                    {"name": "fastmath", "pkg": "reg#gemm@0.15.0",
                     "dep_kinds": [{"kind": null, "target": null}]},
                    {"name": "rand", "pkg": "reg#rand@0.9.0",
                     "dep_kinds": [{"kind": null, "target": null}]},
                ]},
                {"id": "reg#cudarc@0.9.15", "features": [], "deps": []},
                {"id": "reg#gemm@0.15.0", "features": [], "deps": []},
                {"id": "reg#rand@0.9.0", "features": [], "deps": []},
            ]},
        })
    }

    /// The names of the normal dependencies of `lib` with the features `enabled`.
    fn lib_deps(enabled: &[&str]) -> Result<Vec<String>> {
        let graph = Graph::from_metadata(&optional_deps_metadata(enabled))?;
        let lib = graph.member("lib").context("lib is a member")?;
        Ok(graph.nodes[lib]
            .deps
            .iter()
            .map(|&i| graph.nodes[i].name.clone())
            .collect())
    }

    #[test]
    fn optional_deps_count_only_when_a_feature_enables_them() -> Result<()> {
        // A weak `cudarc?/std` does not pull cudarc in (cargo metadata lists it anyway).
        assert_eq!(lib_deps(&["std"])?, ["rand"]);
        assert_eq!(lib_deps(&["std", "cuda"])?, ["cudarc", "rand"]);
        // A renamed optional dependency, enabled strongly or through its own feature.
        assert_eq!(lib_deps(&["simd"])?, ["gemm", "rand"]);
        assert_eq!(lib_deps(&["fastmath"])?, ["gemm", "rand"]);
        Ok(())
    }
}
