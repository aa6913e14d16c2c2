//! The dependency boundary check: which workspace crates may reach which packages.
//!
//! Rules are checked on the resolved graph of `cargo metadata`, over normal
//! dependency edges only (dev- and build-dependencies are free), twice: with default
//! features and with `--all-features` (so optional dependencies count too).

use std::fmt;

use anyhow::{Result, bail};

use crate::cmd::{Workspace, announce};
use crate::graph::Graph;
use crate::metadata;

/// Crates that must stay free of `cudarc`, even with every feature on.
const NO_CUDARC: &[&str] = &["rl-core", "rl-envs"];

/// Crates that must never reach `pyo3`: Python lives in rl-python alone (the facade and
/// every library crate build and link without Python).
const NO_PYO3: &[&str] = &[
    "rl",
    "rl-core",
    "rl-envs",
    "rl-storage",
    "rl-collect",
    "rl-actions",
    "rl-nn",
    "rl-history",
    "rl-algos",
    "rl-train",
    "rl-testkit",
];

/// Every crate below the facade `rl`: none of them may reach it, with no exception (the
/// binary and the Python package both sit on `rl-train`).
const BELOW_FACADE: &[&str] = &[
    "rl-core",
    "rl-envs",
    "rl-storage",
    "rl-collect",
    "rl-actions",
    "rl-nn",
    "rl-history",
    "rl-algos",
    "rl-train",
    "rl-testkit",
    "rl-python",
    "xtask",
];

/// The design: the workspace crates each crate may depend on. A member missing from
/// this table (and not in [`UNRESTRICTED`]) may have no internal normal dependency.
const DESIGN: &[(&str, &[&str])] = &[
    ("rl-core", &[]),
    ("rl-envs", &["rl-core"]),
    ("rl-storage", &["rl-core"]),
    ("rl-collect", &["rl-core", "rl-storage"]),
    ("rl-actions", &["rl-core"]),
    ("rl-nn", &["rl-core"]),
    ("rl-history", &["rl-core", "rl-nn"]),
    (
        "rl-algos",
        &[
            "rl-core",
            "rl-storage",
            "rl-actions",
            "rl-nn",
            "rl-history",
            "rl-collect",
        ],
    ),
    (
        "rl-train",
        &[
            "rl-core",
            "rl-envs",
            "rl-storage",
            "rl-actions",
            "rl-nn",
            "rl-history",
            "rl-collect",
            "rl-algos",
        ],
    ),
    ("rl-testkit", &["rl-core"]),
    // The run layer for the trainers and configs of the `rl` command (`flatrl.train`).
    (
        "rl-python",
        &[
            "rl-train",
            "rl-algos",
            "rl-core",
            "rl-envs",
            "rl-storage",
            "rl-collect",
            // The thread pool a replay buffer's gather runs on (`threads=`).
            "rl-nn",
        ],
    ),
];

/// Members that may depend on any workspace crate: the facade.
const UNRESTRICTED: &[&str] = &["rl"];

/// Which crates a reachability rule applies to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sources<'a> {
    /// The workspace members with these names.
    Crates(&'a [&'a str]),
    /// Every workspace member.
    AllMembers,
}

/// "None of `sources` may reach a package named `target`", with the reason to print.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReachRule<'a> {
    /// The crates the rule constrains.
    pub(crate) sources: Sources<'a>,
    /// The forbidden package name.
    pub(crate) target: &'a str,
    /// Why, for the report.
    pub(crate) why: &'a str,
}

/// Everything checked on one graph.
#[derive(Debug, Clone)]
pub(crate) struct Rules<'a> {
    /// Forbidden transitive dependencies.
    pub(crate) reach: Vec<ReachRule<'a>>,
    /// Allowed internal edges per member (see [`DESIGN`]).
    pub(crate) design: &'a [(&'a str, &'a [&'a str])],
    /// Members free to depend on any member.
    pub(crate) unrestricted: &'a [&'a str],
}

/// A broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Violation {
    /// A crate reaches a forbidden package along `path` (source first, target last).
    Reaches {
        /// Package names from the constrained crate to the forbidden one.
        path: Vec<String>,
        /// The rule's reason.
        why: String,
    },
    /// A direct internal edge the design does not allow.
    Edge {
        /// The depending member.
        from: String,
        /// The member it depends on.
        to: String,
        /// The members `from` may depend on.
        allowed: Vec<String>,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reaches { path, why } => write!(f, "{} ({why})", path.join(" -> ")),
            Self::Edge { from, to, allowed } => {
                write!(f, "{from} -> {to} (internal edge not in the design: ")?;
                if allowed.is_empty() {
                    write!(f, "{from} may depend on no workspace crate)")
                } else {
                    write!(f, "{from} may depend only on {})", allowed.join(", "))
                }
            }
        }
    }
}

/// Checks `rules` on `graph` and returns every violation, reach rules first (one per
/// constrained crate and forbidden package, with a shortest path), then edges.
pub(crate) fn check(graph: &Graph, rules: &Rules<'_>) -> Vec<Violation> {
    let mut violations = Vec::new();
    for rule in &rules.reach {
        let sources: Vec<usize> = match rule.sources {
            Sources::AllMembers => graph.members().collect(),
            Sources::Crates(names) => names.iter().filter_map(|n| graph.member(n)).collect(),
        };
        for source in sources {
            if let Some(path) = graph.path_to(source, rule.target) {
                violations.push(Violation::Reaches {
                    path: graph.names(&path),
                    why: rule.why.to_owned(),
                });
            }
        }
    }
    for from in graph.members() {
        let name = graph.nodes[from].name.as_str();
        if rules.unrestricted.contains(&name) {
            continue;
        }
        let allowed: &[&str] = rules
            .design
            .iter()
            .find(|(crate_name, _)| *crate_name == name)
            .map_or(&[], |(_, allowed)| allowed);
        for &to in &graph.nodes[from].deps {
            let dep = &graph.nodes[to];
            if dep.member && !allowed.contains(&dep.name.as_str()) {
                violations.push(Violation::Edge {
                    from: name.to_owned(),
                    to: dep.name.clone(),
                    allowed: allowed.iter().map(|s| s.to_string()).collect(),
                });
            }
        }
    }
    violations
}

/// Crates named by `rules` that are not workspace members of `graph` (their rules
/// cannot fail, which deserves a warning).
pub(crate) fn unknown_crates<'a>(graph: &Graph, rules: &Rules<'a>) -> Vec<&'a str> {
    let mut named: Vec<&str> = rules
        .reach
        .iter()
        .flat_map(|rule| match rule.sources {
            Sources::Crates(names) => names.to_vec(),
            Sources::AllMembers => Vec::new(),
        })
        .chain(
            rules
                .design
                .iter()
                .flat_map(|(from, to)| std::iter::once(*from).chain(to.iter().copied())),
        )
        .chain(rules.unrestricted.iter().copied())
        .filter(|name| graph.member(name).is_none())
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}

/// The rules of this workspace for one feature set.
fn workspace_rules(all_features: bool) -> Rules<'static> {
    let mut reach = vec![
        ReachRule {
            sources: Sources::AllMembers,
            target: "dfdx",
            why: "networks live in rl-nn; dfdx may only be a dev-dependency (rl-nn's test oracle)",
        },
        ReachRule {
            sources: Sources::Crates(NO_PYO3),
            target: "pyo3",
            why: "Python bindings live in rl-python only; no other crate may need Python",
        },
        ReachRule {
            sources: Sources::Crates(BELOW_FACADE),
            target: "rl",
            why: "no crate may depend on the facade: shared run code belongs in rl-train",
        },
    ];
    reach.push(if all_features {
        ReachRule {
            sources: Sources::Crates(NO_CUDARC),
            target: "cudarc",
            why: "must not depend on cudarc, even with every feature on",
        }
    } else {
        ReachRule {
            sources: Sources::AllMembers,
            target: "cudarc",
            why: "cudarc reachable with default features; it must come only with a non-default `cuda` feature",
        }
    });
    Rules {
        reach,
        design: DESIGN,
        unrestricted: UNRESTRICTED,
    }
}

/// Runs the check on the workspace with default features and with `--all-features`,
/// prints what it finds, and fails when a rule is broken.
pub(crate) fn run(ws: &Workspace) -> Result<()> {
    let mut failures = 0;
    for (label, args, all_features) in [
        ("default features", &[][..], false),
        ("--all-features", &["--all-features"][..], true),
    ] {
        announce("boundaries", &metadata::command(args).display());
        let graph = Graph::from_metadata(&metadata::load(ws, args)?)?;
        let rules = workspace_rules(all_features);
        // Members do not change with features: warn once, on the first graph.
        if !all_features {
            for name in unknown_crates(&graph, &rules) {
                eprintln!("warning: boundary rules name `{name}`, which is not a workspace member");
            }
        }
        let violations = check(&graph, &rules);
        if violations.is_empty() {
            eprintln!("    {label}: ok ({} members)", graph.members().count());
        } else {
            eprintln!("    {label}: {} violation(s):", violations.len());
            for violation in &violations {
                eprintln!("      {violation}");
            }
        }
        failures += violations.len();
    }
    if failures > 0 {
        bail!("{failures} dependency boundary violation(s), listed above");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace as designed, with allowed external dependencies.
    fn good_edges() -> Vec<(&'static str, &'static str)> {
        vec![
            ("rl-core", "serde"),
            ("rl-envs", "rl-core"),
            ("rl-storage", "rl-core"),
            ("rl-storage", "bytemuck"),
            ("rl-collect", "rl-core"),
            ("rl-collect", "rl-storage"),
            ("rl-actions", "rl-core"),
            ("rl-nn", "rl-core"),
            ("rl-history", "rl-core"),
            ("rl-history", "rl-nn"),
            ("rl-algos", "rl-nn"),
            ("rl-algos", "rl-collect"),
            ("rl-algos", "rl-history"),
            ("rl-algos", "rand"),
            ("rl-testkit", "rl-core"),
            ("rl-train", "rl-algos"),
            ("rl-train", "rl-envs"),
            ("rl-python", "rl-train"),
            ("rl-python", "rl-core"),
            ("rl-python", "rl-envs"),
            ("rl-python", "rl-storage"),
            ("rl-python", "rl-collect"),
            ("rl-python", "pyo3"),
            ("rl", "rl-algos"),
            ("rl", "rl-testkit"),
        ]
    }

    /// All members of the real workspace.
    const MEMBERS: &[&str] = &[
        "rl",
        "rl-core",
        "rl-envs",
        "rl-storage",
        "rl-collect",
        "rl-actions",
        "rl-nn",
        "rl-history",
        "rl-algos",
        "rl-train",
        "rl-testkit",
        "rl-python",
        "xtask",
    ];

    #[test]
    fn the_designed_workspace_passes() -> Result<()> {
        let graph = Graph::from_names(MEMBERS, &good_edges())?;
        for all_features in [false, true] {
            let rules = workspace_rules(all_features);
            assert_eq!(check(&graph, &rules), []);
            assert_eq!(unknown_crates(&graph, &rules), Vec::<&str>::new());
        }
        Ok(())
    }

    #[test]
    fn a_transitive_dfdx_is_reported_with_its_path() -> Result<()> {
        let mut edges = good_edges();
        edges.extend([("rl-storage", "foo"), ("foo", "bar"), ("bar", "dfdx")]);
        let graph = Graph::from_names(MEMBERS, &edges)?;
        let violations = check(&graph, &workspace_rules(true));
        let mut paths: Vec<String> = violations
            .iter()
            .map(|v| match v {
                Violation::Reaches { path, .. } => path.join(" -> "),
                Violation::Edge { from, to, .. } => format!("edge {from} -> {to}"),
            })
            .collect();
        paths.sort();
        // Every member that reaches dfdx through rl-storage is reported, with its path.
        assert_eq!(
            paths,
            [
                "rl -> rl-algos -> rl-collect -> rl-storage -> foo -> bar -> dfdx",
                "rl-algos -> rl-collect -> rl-storage -> foo -> bar -> dfdx",
                "rl-collect -> rl-storage -> foo -> bar -> dfdx",
                "rl-python -> rl-storage -> foo -> bar -> dfdx",
                "rl-storage -> foo -> bar -> dfdx",
                "rl-train -> rl-algos -> rl-collect -> rl-storage -> foo -> bar -> dfdx",
            ]
        );
        let storage = violations
            .iter()
            .find(|v| v.to_string().starts_with("rl-storage"))
            .map(ToString::to_string);
        assert_eq!(
            storage.as_deref(),
            Some(
                "rl-storage -> foo -> bar -> dfdx (networks live in rl-nn; dfdx may only be a dev-dependency (rl-nn's test oracle))"
            )
        );
        Ok(())
    }

    #[test]
    fn cudarc_only_behind_a_feature() -> Result<()> {
        let mut edges = good_edges();
        edges.push(("rl-algos", "cudarc"));
        let graph = Graph::from_names(MEMBERS, &edges)?;
        // With every feature on, rl-algos (and rl, through it) may reach cudarc ...
        assert_eq!(check(&graph, &workspace_rules(true)), []);
        // ... but not with default features.
        let violations = check(&graph, &workspace_rules(false));
        let rendered: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
        assert_eq!(rendered.len(), 4, "{rendered:?}");
        assert!(rendered[0].starts_with("rl -> rl-algos -> cudarc"));
        assert!(rendered[1].starts_with("rl-algos -> cudarc"));
        assert!(rendered[2].starts_with("rl-python -> rl-train -> rl-algos -> cudarc"));
        assert!(rendered[3].starts_with("rl-train -> rl-algos -> cudarc"));
        // rl-envs may never reach it.
        edges.push(("rl-envs", "cudarc"));
        let graph = Graph::from_names(MEMBERS, &edges)?;
        let violations = check(&graph, &workspace_rules(true));
        assert_eq!(
            violations,
            [Violation::Reaches {
                path: vec!["rl-envs".into(), "cudarc".into()],
                why: "must not depend on cudarc, even with every feature on".into(),
            }]
        );
        Ok(())
    }

    #[test]
    fn pyo3_only_in_rl_python() -> Result<()> {
        let mut edges = good_edges();
        edges.push(("rl-storage", "pyo3"));
        let graph = Graph::from_names(MEMBERS, &edges)?;
        let rendered: Vec<String> = check(&graph, &workspace_rules(true))
            .iter()
            .map(ToString::to_string)
            .collect();
        // rl-storage and everything above it in NO_PYO3; rl-python's own pyo3 is fine.
        assert!(
            rendered.iter().any(|v| v.starts_with("rl-storage -> pyo3")),
            "{rendered:?}"
        );
        assert!(
            rendered.iter().all(|v| !v.starts_with("rl-python")),
            "{rendered:?}"
        );
        // The facade may not depend on rl-python (it would reach pyo3).
        let mut edges = good_edges();
        edges.push(("rl", "rl-python"));
        let graph = Graph::from_names(MEMBERS, &edges)?;
        let rendered: Vec<String> = check(&graph, &workspace_rules(false))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(rendered.len(), 1, "{rendered:?}");
        assert!(
            rendered[0].starts_with("rl -> rl-python -> pyo3"),
            "{rendered:?}"
        );
        Ok(())
    }

    #[test]
    fn no_crate_depends_on_the_facade() -> Result<()> {
        for from in ["rl-python", "rl-train", "xtask"] {
            let mut edges = good_edges();
            edges.push((from, "rl"));
            let graph = Graph::from_names(MEMBERS, &edges)?;
            let rendered: Vec<String> = check(&graph, &workspace_rules(false))
                .iter()
                .map(ToString::to_string)
                .collect();
            assert!(
                rendered
                    .iter()
                    .any(|v| v.starts_with(&format!("{from} -> rl ("))
                        && v.contains("no crate may depend on the facade")),
                "{from}: {rendered:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn internal_edges_follow_the_design() -> Result<()> {
        let mut edges = good_edges();
        edges.extend([
            ("rl-envs", "rl-storage"),
            ("rl-core", "rl-testkit"),
            ("xtask", "rl-core"),
            ("rl", "rl-history"),
        ]);
        let graph = Graph::from_names(MEMBERS, &edges)?;
        let violations = check(&graph, &workspace_rules(true));
        let rendered: Vec<String> = violations.iter().map(|v| v.to_string()).collect();
        assert_eq!(
            rendered,
            [
                "rl-core -> rl-testkit (internal edge not in the design: \
                 rl-core may depend on no workspace crate)",
                "rl-envs -> rl-storage (internal edge not in the design: \
                 rl-envs may depend only on rl-core)",
                "xtask -> rl-core (internal edge not in the design: \
                 xtask may depend on no workspace crate)",
            ]
        );
        Ok(())
    }

    #[test]
    fn rules_on_small_hand_made_graphs() -> Result<()> {
        let rules = Rules {
            reach: vec![ReachRule {
                sources: Sources::Crates(&["a"]),
                target: "bad",
                why: "no",
            }],
            design: &[("a", &["b"])],
            unrestricted: &[],
        };
        // a -> b -> x -> bad: transitive violation.
        let graph = Graph::from_names(&["a", "b"], &[("a", "b"), ("b", "x"), ("x", "bad")])?;
        assert_eq!(
            check(&graph, &rules),
            [Violation::Reaches {
                path: vec!["a".into(), "b".into(), "x".into(), "bad".into()],
                why: "no".into(),
            }]
        );
        // Passes: only a is constrained and it does not reach bad; b -> bad is fine.
        let graph = Graph::from_names(&["a", "b"], &[("a", "x"), ("b", "bad")])?;
        assert_eq!(check(&graph, &rules), []);
        // b -> a is not in the design (b has no entry: no internal edges at all).
        let graph = Graph::from_names(&["a", "b"], &[("b", "a")])?;
        assert_eq!(
            check(&graph, &rules),
            [Violation::Edge {
                from: "b".into(),
                to: "a".into(),
                allowed: vec![],
            }]
        );
        // A rule naming a crate that does not exist is flagged, not silently passed.
        let graph = Graph::from_names(&["b"], &[])?;
        assert_eq!(unknown_crates(&graph, &rules), ["a"]);
        Ok(())
    }
}
