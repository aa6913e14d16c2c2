//! Which SIMD kernels run: the one run-time choice that every vectorised crate follows.
//!
//! The repository never sets `target-cpu`, so a crate with hand-vectorised code compiles
//! it inside `#[target_feature]` functions and picks, at run time, the widest copy the
//! CPU runs. That choice is made here, once per process, by [`Isa::detect`]; rl-nn's
//! matrix kernel and rl-actions' scorer both dispatch on it, so a process never mixes an
//! AVX-512 product with an AVX2 softmax, and no other crate queries the CPU. The kernels
//! themselves stay in their crates.
//!
//! # Override
//!
//! The environment variable `RL_NN_KERNEL`, read once at the first [`Isa::detect`], asks
//! for a narrower set: `avx2`, or `scalar` (also spelled `portable`). It can only lower
//! the choice: a set the CPU lacks, `avx512`, or any other value leaves the widest
//! supported one. It serves to time or check, on one machine, what a CPU without AVX-512
//! (or without AVX2) would run.
//!
//! # Example
//!
//! ```
//! use rl_core::simd::Isa;
//!
//! let isa = Isa::detect();
//! assert!(isa.is_supported());
//! assert_eq!(Isa::detect(), isa); // cached: the same answer for the whole process
//! assert!(Isa::supported().any(|s| s == isa));
//! println!(r#"{{"isa":"{}"}}"#, isa.name());
//! ```

use std::fmt;
use std::sync::OnceLock;

/// The environment variable that lowers [`Isa::detect`]'s choice (see the module docs).
pub const OVERRIDE_VAR: &str = "RL_NN_KERNEL";

/// An instruction set the vectorised kernels are compiled for, widest first.
///
/// A crate dispatching on an `Isa` must still check [`Isa::is_supported`] (or take the
/// value from [`Isa::detect`] or [`Isa::supported`]) before it runs a
/// `#[target_feature]` copy: anyone can name a variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// AVX-512F together with AVX2 and FMA (x86-64).
    Avx512,
    /// AVX2 and FMA (x86-64).
    Avx2,
    /// No feature beyond the compilation target: plain Rust that the compiler vectorises
    /// for the baseline (SSE2 on x86-64). Runs everywhere.
    Scalar,
}

/// The choice of [`Isa::detect`], made on its first call.
static DETECTED: OnceLock<Isa> = OnceLock::new();

impl Isa {
    /// Every instruction set, widest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Scalar];

    /// The kernels this process runs: the widest set the CPU supports, lowered by
    /// [`OVERRIDE_VAR`] if it is set. Detected on the first call, then cached: every call
    /// in the process returns the same value.
    pub fn detect() -> Isa {
        *DETECTED.get_or_init(|| {
            let requested = std::env::var(OVERRIDE_VAR).ok();
            choose(requested.as_deref(), Isa::is_supported)
        })
    }

    /// Whether this CPU runs the set (checked at run time; cheap after the first check).
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx512 | Isa::Avx2 => false,
            Isa::Scalar => true,
        }
    }

    /// Every set this CPU runs, widest first, whatever the override: tests run each of
    /// them against the scalar kernels.
    pub fn supported() -> impl Iterator<Item = Isa> {
        Isa::ALL.into_iter().filter(|isa| isa.is_supported())
    }

    /// The lowercase name: `"avx512"`, `"avx2"` or `"scalar"` (what benches print).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::Scalar => "scalar",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The set an override value asks for: a [`Isa::name`], or `portable` for
/// [`Isa::Scalar`]; `None` for anything else.
fn requested(value: &str) -> Option<Isa> {
    match value {
        "portable" => Some(Isa::Scalar),
        _ => Isa::ALL.into_iter().find(|isa| isa.name() == value),
    }
}

/// The widest set that `supported` accepts, lowered to `override_value`'s set when that
/// one is supported and narrower.
fn choose(override_value: Option<&str>, supported: impl Fn(Isa) -> bool) -> Isa {
    let widest = Isa::ALL
        .into_iter()
        .find(|&isa| supported(isa))
        .unwrap_or(Isa::Scalar);
    match override_value.and_then(requested) {
        Some(isa) if supported(isa) && rank(isa) <= rank(widest) => isa,
        _ => widest,
    }
}

/// Width order: `Scalar` 0, `Avx2` 1, `Avx512` 2.
fn rank(isa: Isa) -> u8 {
    match isa {
        Isa::Scalar => 0,
        Isa::Avx2 => 1,
        Isa::Avx512 => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU that runs the sets up to `widest`.
    fn cpu(widest: Isa) -> impl Fn(Isa) -> bool {
        move |isa| rank(isa) <= rank(widest)
    }

    #[test]
    fn names_are_lowercase_and_distinct() {
        let names: Vec<&str> = Isa::ALL.into_iter().map(Isa::name).collect();
        assert_eq!(names, ["avx512", "avx2", "scalar"]);
        for isa in Isa::ALL {
            assert_eq!(isa.to_string(), isa.name());
            assert_eq!(requested(isa.name()), Some(isa));
        }
        assert_eq!(requested("portable"), Some(Isa::Scalar));
        for other in ["", "AVX2", "avx", "sse2", " avx2"] {
            assert_eq!(requested(other), None, "{other:?}");
        }
    }

    #[test]
    fn without_override_the_widest_supported_set_wins() {
        for widest in Isa::ALL {
            assert_eq!(choose(None, cpu(widest)), widest);
        }
        // A CPU with AVX-512 but, say, a hypervisor hiding AVX2: nothing wider than scalar
        // is whole, since `Avx512` needs AVX2 and FMA too.
        let odd = |isa: Isa| isa != Isa::Avx2 && isa != Isa::Avx512;
        assert_eq!(choose(None, odd), Isa::Scalar);
    }

    #[test]
    fn the_override_can_only_lower() {
        for widest in Isa::ALL {
            for value in ["avx512", "avx2", "scalar", "portable", "bogus", ""] {
                let got = choose(Some(value), cpu(widest));
                assert!(rank(got) <= rank(widest), "{value} on {widest}: {got}");
                match requested(value) {
                    Some(want) if rank(want) <= rank(widest) => assert_eq!(got, want),
                    _ => assert_eq!(got, widest, "{value} on {widest}"),
                }
            }
        }
        assert_eq!(choose(Some("avx2"), cpu(Isa::Avx512)), Isa::Avx2);
        assert_eq!(choose(Some("portable"), cpu(Isa::Avx512)), Isa::Scalar);
        assert_eq!(choose(Some("avx512"), cpu(Isa::Avx2)), Isa::Avx2);
    }

    #[test]
    fn detection_is_stable_and_supported() {
        let first = Isa::detect();
        assert!(first.is_supported());
        for _ in 0..3 {
            assert_eq!(Isa::detect(), first);
        }
        let supported: Vec<Isa> = Isa::supported().collect();
        assert!(supported.contains(&first));
        assert_eq!(supported.last(), Some(&Isa::Scalar));
        assert!(supported.windows(2).all(|w| rank(w[0]) > rank(w[1])));
        // Detection agrees with the pure choice over this CPU, given the same override.
        let value = std::env::var(OVERRIDE_VAR).ok();
        assert_eq!(choose(value.as_deref(), Isa::is_supported), first);
    }
}
