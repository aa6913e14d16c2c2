//! Memory plans: what a component will allocate, declared before it allocates anything.
//!
//! Every component that owns memory (storages, buffers, action tables, collectors) reports
//! a [`MemoryPlan`] from its configuration alone. A run sums the plans of its parts,
//! prints them as a table and checks them against a [`MemoryBudget`] before the first
//! step, so a configuration that cannot fit is refused up front instead of half an hour in.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where planned bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Location {
    /// Anonymous host memory (heap, pinned staging buffers).
    Ram,
    /// A file on disk, memory-mapped: the page cache holds what is hot.
    File,
    /// Device memory on a GPU.
    Gpu,
}

impl Location {
    /// Every location, in display order.
    pub const ALL: [Location; 3] = [Location::Ram, Location::File, Location::Gpu];

    /// Lowercase name used in tables and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Ram => "ram",
            Location::File => "file",
            Location::Gpu => "gpu",
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A byte count that displays itself in binary units (`1.50 GiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
        let mut value = self.0 as f64;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            write!(f, "{} B", self.0)
        } else {
            write!(f, "{value:.2} {}", UNITS[unit])
        }
    }
}

/// One line of a plan: a named component, where its bytes live, and how many.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanLine {
    /// What owns the bytes, e.g. `replay/obs`.
    pub component: String,
    /// Where the bytes live.
    pub location: Location,
    /// How many bytes.
    pub bytes: u64,
}

impl PlanLine {
    /// Formats lines as `a (ram, 1.00 GiB), b (file, 2.00 MiB)` for error messages.
    pub(crate) fn join(lines: &[PlanLine]) -> String {
        let parts: Vec<String> = lines
            .iter()
            .map(|l| format!("{} ({}, {})", l.component, l.location, Bytes(l.bytes)))
            .collect();
        parts.join(", ")
    }
}

/// Limits per location; `None` means unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryBudget {
    /// Anonymous host memory allowed, in bytes.
    pub ram: Option<u64>,
    /// File-backed (memory-mapped) bytes allowed.
    pub file: Option<u64>,
    /// GPU bytes allowed.
    pub gpu: Option<u64>,
}

impl MemoryBudget {
    /// A budget that allows everything.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// A budget that limits host RAM only.
    pub fn ram(bytes: u64) -> Self {
        Self {
            ram: Some(bytes),
            ..Self::default()
        }
    }

    /// This budget with a file limit added.
    pub fn with_file(mut self, bytes: u64) -> Self {
        self.file = Some(bytes);
        self
    }

    /// This budget with a GPU limit added.
    pub fn with_gpu(mut self, bytes: u64) -> Self {
        self.gpu = Some(bytes);
        self
    }

    /// The limit at one location.
    pub fn limit(&self, location: Location) -> Option<u64> {
        match location {
            Location::Ram => self.ram,
            Location::File => self.file,
            Location::Gpu => self.gpu,
        }
    }
}

/// What a component (or a whole run) will allocate, line by line.
///
/// ```
/// use rl_core::{Location, MemoryBudget, MemoryPlan};
///
/// let mut plan = MemoryPlan::new();
/// plan.add("replay/obs", Location::File, 4 << 30);
/// plan.add("replay/action", Location::Ram, 4 << 20);
/// assert_eq!(plan.total(Location::File), 4 << 30);
/// assert!(plan.check(&MemoryBudget::ram(1 << 30)).is_ok());
/// assert!(plan.check(&MemoryBudget::ram(1 << 20)).is_err());
/// println!("{plan}");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPlan {
    lines: Vec<PlanLine>,
}

impl MemoryPlan {
    /// An empty plan.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one line.
    pub fn add(&mut self, component: impl Into<String>, location: Location, bytes: u64) {
        self.lines.push(PlanLine {
            component: component.into(),
            location,
            bytes,
        });
    }

    /// Builder form of [`MemoryPlan::add`].
    pub fn with(mut self, component: impl Into<String>, location: Location, bytes: u64) -> Self {
        self.add(component, location, bytes);
        self
    }

    /// Appends every line of `other`, with component names prefixed by `prefix/`.
    pub fn nest(&mut self, prefix: &str, other: &MemoryPlan) {
        for line in &other.lines {
            self.add(
                format!("{prefix}/{}", line.component),
                line.location,
                line.bytes,
            );
        }
    }

    /// The lines, in insertion order.
    pub fn lines(&self) -> &[PlanLine] {
        &self.lines
    }

    /// Bytes planned at one location (saturating: a plan cannot overflow into a wrong sum).
    pub fn total(&self, location: Location) -> u64 {
        self.lines
            .iter()
            .filter(|l| l.location == location)
            .fold(0u64, |sum, l| sum.saturating_add(l.bytes))
    }

    /// Bytes planned at every location together.
    pub fn grand_total(&self) -> u64 {
        Location::ALL
            .iter()
            .fold(0u64, |sum, &loc| sum.saturating_add(self.total(loc)))
    }

    /// Checks the plan against a budget, location by location.
    ///
    /// The error names the location that does not fit and the (at most three) largest
    /// lines there, so the fix is obvious from the message.
    pub fn check(&self, budget: &MemoryBudget) -> Result<()> {
        for location in Location::ALL {
            let Some(limit) = budget.limit(location) else {
                continue;
            };
            let planned = self.total(location);
            if planned > limit {
                let mut largest: Vec<PlanLine> = self
                    .lines
                    .iter()
                    .filter(|l| l.location == location)
                    .cloned()
                    .collect();
                largest.sort_by_key(|line| std::cmp::Reverse(line.bytes));
                largest.truncate(3);
                return Err(Error::OverBudget {
                    location,
                    planned,
                    budget: limit,
                    largest,
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .lines
            .iter()
            .map(|l| l.component.len())
            .max()
            .unwrap_or(0)
            .max("component".len());
        writeln!(
            f,
            "{:<width$}  {:<8}  {:>12}",
            "component", "location", "bytes"
        )?;
        for line in &self.lines {
            writeln!(
                f,
                "{:<width$}  {:<8}  {:>12}",
                line.component,
                line.location.as_str(),
                Bytes(line.bytes).to_string()
            )?;
        }
        let totals: Vec<String> = Location::ALL
            .iter()
            .map(|&loc| format!("{loc} {}", Bytes(self.total(loc))))
            .collect();
        write!(f, "total: {}", totals.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bytes_display_uses_binary_units() {
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB");
        assert_eq!(Bytes(3 << 30).to_string(), "3.00 GiB");
    }

    #[test]
    fn over_budget_error_names_the_largest_lines_first() {
        let plan = MemoryPlan::new()
            .with("small", Location::Ram, 10)
            .with("huge", Location::Ram, 1000)
            .with("medium", Location::Ram, 100)
            .with("tiny", Location::Ram, 1)
            .with("on disk", Location::File, 1 << 40);
        let err = plan.check(&MemoryBudget::ram(500)).unwrap_err();
        match &err {
            Error::OverBudget {
                location,
                planned,
                budget,
                largest,
            } => {
                assert_eq!(*location, Location::Ram);
                assert_eq!(*planned, 1111);
                assert_eq!(*budget, 500);
                let names: Vec<&str> = largest.iter().map(|l| l.component.as_str()).collect();
                assert_eq!(names, ["huge", "medium", "small"]);
            }
            other => panic!("expected OverBudget, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains("huge (ram, 1000 B)"), "{message}");
        assert!(message.contains("raise the budget"), "{message}");
    }

    #[test]
    fn file_bytes_do_not_count_against_a_ram_budget() {
        let plan = MemoryPlan::new().with("replay", Location::File, 1 << 40);
        assert!(plan.check(&MemoryBudget::ram(1)).is_ok());
        assert!(
            plan.check(&MemoryBudget::ram(1).with_file(1 << 30))
                .is_err()
        );
    }

    #[test]
    fn nest_prefixes_components() {
        let inner = MemoryPlan::new().with("obs", Location::Gpu, 7);
        let mut outer = MemoryPlan::new();
        outer.nest("replay", &inner);
        assert_eq!(outer.lines()[0].component, "replay/obs");
        assert_eq!(outer.total(Location::Gpu), 7);
    }

    #[test]
    fn display_lists_every_line_and_the_totals() {
        let plan = MemoryPlan::new()
            .with("replay/obs", Location::File, 2 << 30)
            .with("batch", Location::Ram, 4096);
        let table = plan.to_string();
        assert!(table.contains("replay/obs"));
        assert!(table.contains("2.00 GiB"));
        assert!(table.contains("total: ram 4.00 KiB, file 2.00 GiB, gpu 0 B"));
    }

    proptest! {
        #[test]
        fn totals_sum_lines_per_location(lines in proptest::collection::vec((0u8..3, 0u64..1 << 40), 0..20)) {
            let mut plan = MemoryPlan::new();
            for (i, &(loc, bytes)) in lines.iter().enumerate() {
                plan.add(format!("c{i}"), Location::ALL[loc as usize], bytes);
            }
            for (index, location) in Location::ALL.into_iter().enumerate() {
                let expected: u64 = lines.iter().filter(|l| l.0 as usize == index).map(|l| l.1).sum();
                prop_assert_eq!(plan.total(location), expected);
                let fits = plan.check(&MemoryBudget::unlimited().with_gpu(u64::MAX)).is_ok();
                prop_assert!(fits);
                let limited = match location {
                    Location::Ram => MemoryBudget::ram(expected),
                    Location::File => MemoryBudget::unlimited().with_file(expected),
                    Location::Gpu => MemoryBudget::unlimited().with_gpu(expected),
                };
                // A budget of exactly the planned bytes fits; one byte less does not.
                prop_assert!(plan.check(&limited).is_ok());
                if expected > 0 {
                    let tight = match location {
                        Location::Ram => MemoryBudget::ram(expected - 1),
                        Location::File => MemoryBudget::unlimited().with_file(expected - 1),
                        Location::Gpu => MemoryBudget::unlimited().with_gpu(expected - 1),
                    };
                    prop_assert!(plan.check(&tight).is_err());
                }
            }
        }
    }
}
