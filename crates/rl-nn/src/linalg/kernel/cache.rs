//! The CPU's data caches, read once per process, and the block sizes of the blocked
//! product derived from them.
//!
//! Sizes come from Linux's `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`,
//! else from CPUID (leaf 4 on Intel, `0x8000001D` on AMD), else from conservative
//! constants (32 KiB L1d, 256 KiB L2, 2 MiB L3) that suit any x86-64 of the last decade.

use std::sync::OnceLock;

/// Data (or unified) cache sizes in bytes: L1d and L2 of one core, L3 as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Caches {
    /// Level 1 data cache of one core.
    pub(crate) l1: usize,
    /// Level 2 cache of one core.
    pub(crate) l2: usize,
    /// Level 3 cache (shared by several cores).
    pub(crate) l3: usize,
}

impl Caches {
    /// What an unknown CPU is assumed to have.
    pub(crate) const FALLBACK: Caches = Caches {
        l1: 32 << 10,
        l2: 256 << 10,
        l3: 2 << 20,
    };

    /// The caches of this CPU, detected on the first call.
    pub(crate) fn detect() -> Caches {
        static DETECTED: OnceLock<Caches> = OnceLock::new();
        *DETECTED.get_or_init(|| {
            let found = from_sysfs(|path| std::fs::read_to_string(path).ok())
                .or_else(from_cpuid)
                .unwrap_or(Caches::FALLBACK);
            // A level that was not reported keeps the fallback; sizes never shrink below
            // it, so a bogus tiny report cannot make blocks degenerate.
            Caches {
                l1: found.l1.max(Caches::FALLBACK.l1 / 2),
                l2: found.l2.max(Caches::FALLBACK.l2 / 2),
                l3: found.l3.max(found.l2),
            }
        })
    }
}

/// Parses sysfs sizes such as `32K`, `512K`, `32768K` or `1M` into bytes.
pub(crate) fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

/// The caches described under `/sys/devices/system/cpu/cpu0/cache`, read through `read`
/// (a parameter so tests can feed it files). `None` if no data cache is described.
pub(crate) fn from_sysfs(read: impl Fn(&str) -> Option<String>) -> Option<Caches> {
    let mut caches = Caches {
        l1: 0,
        l2: 0,
        l3: 0,
    };
    for index in 0..16 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        let (Some(level), Some(kind), Some(size)) = (
            read(&format!("{dir}/level")),
            read(&format!("{dir}/type")),
            read(&format!("{dir}/size")),
        ) else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let size = parse_size(&size).unwrap_or(0);
        match level.trim() {
            "1" => caches.l1 = size,
            "2" => caches.l2 = size,
            "3" => caches.l3 = size,
            _ => {}
        }
    }
    (caches.l1 > 0 || caches.l2 > 0).then_some(Caches {
        l1: nonzero_or(caches.l1, Caches::FALLBACK.l1),
        l2: nonzero_or(caches.l2, Caches::FALLBACK.l2),
        l3: caches.l3,
    })
}

/// `value`, or `fallback` when `value` is 0.
fn nonzero_or(value: usize, fallback: usize) -> usize {
    if value == 0 { fallback } else { value }
}

/// The caches from CPUID's deterministic cache parameters (leaf 4, or AMD's `0x8000001D`).
#[cfg(target_arch = "x86_64")]
fn from_cpuid() -> Option<Caches> {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID exists on every x86-64 CPU; leaf 0 and leaf 0x80000000 are always valid.
    let (max, max_ext) = (__cpuid(0).eax, __cpuid(0x8000_0000).eax);
    let mut caches = Caches {
        l1: 0,
        l2: 0,
        l3: 0,
    };
    for leaf in [4u32, 0x8000_001D] {
        let available = if leaf == 4 { max >= 4 } else { max_ext >= leaf };
        if !available {
            continue;
        }
        for sub in 0..16 {
            // The leaf is at most the maximum this CPU reported; unknown subleaves
            // return zeros (cache type 0), which ends the loop.
            let r = __cpuid_count(leaf, sub);
            let kind = r.eax & 0x1f;
            if kind == 0 {
                break;
            }
            if kind == 2 {
                continue; // instruction cache
            }
            let ways = (r.ebx >> 22) as usize + 1;
            let partitions = ((r.ebx >> 12) & 0x3ff) as usize + 1;
            let line = (r.ebx & 0xfff) as usize + 1;
            let sets = r.ecx as usize + 1;
            let size = ways * partitions * line * sets;
            match (r.eax >> 5) & 7 {
                1 => caches.l1 = size,
                2 => caches.l2 = size,
                3 => caches.l3 = size,
                _ => {}
            }
        }
        if caches.l1 > 0 {
            break;
        }
    }
    (caches.l1 > 0).then_some(Caches {
        l1: caches.l1,
        l2: nonzero_or(caches.l2, Caches::FALLBACK.l2),
        l3: caches.l3,
    })
}

/// No CPUID outside x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn from_cpuid() -> Option<Caches> {
    None
}

/// Columns of the `rhs` panel that sizes `kc` (the AVX2 tile's width).
const KC_PANEL_WIDTH: usize = 16;

/// Block sizes of the blocked product for one microkernel shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Steps of the inner dimension per kernel call: a `kc x 16` panel of `rhs` (the AVX2
    /// tile's width) fills about half of L1, at most 256 steps (the AVX-512 tile's
    /// `kc x 32` panel then fills 32 KiB of its CPUs' 48 KiB L1).
    pub(crate) kc: usize,
    /// Largest row block of `lhs` packed at once: `mc x kc` fills about a quarter of L2.
    pub(crate) mc: usize,
    /// Largest column block of `rhs` packed at once: `kc x nc` fills about an eighth of
    /// L3 (shared by the cores), at most 4096 columns.
    pub(crate) nc: usize,
    /// The L2 size these were derived from, in bytes.
    pub(crate) l2: usize,
}

impl Blocking {
    /// The blocks for `MR x NR` tiles on this CPU's caches.
    pub(crate) fn new(mr: usize, nr: usize) -> Blocking {
        Blocking::for_caches(Caches::detect(), mr, nr)
    }

    /// The blocks for `MR x NR` tiles on the given caches.
    pub(crate) fn for_caches(caches: Caches, mr: usize, nr: usize) -> Blocking {
        let floats = size_of::<f32>();
        // One `kc` for every tile shape: it sets where the sum over `k` is split, and a
        // product must round the same whichever kernel runs it (a split across threads
        // may give a block of a few rows to the narrow kernels).
        let kc = (caches.l1 / 2 / (KC_PANEL_WIDTH * floats)).clamp(128, 256) / 16 * 16;
        let mc = (caches.l2 / 4 / (kc * floats)).clamp(mr, 1024) / mr * mr;
        let nc = (caches.l3 / 8 / (kc * floats)).clamp(4 * nr, 4096) / nr * nr;
        Blocking {
            kc,
            mc,
            nc,
            l2: caches.l2,
        }
    }

    /// The row block for `m` rows: blocks of at most `mc` rows, as equal as whole
    /// strips of `mr` allow (no block of a few leftover rows).
    pub(crate) fn mc_for(&self, m: usize, mr: usize) -> usize {
        balanced(m, self.mc)
            .next_multiple_of(mr)
            .min(self.mc.max(mr))
    }

    /// The column block for `n` columns, as [`Blocking::mc_for`] with panels of `nr`.
    pub(crate) fn nc_for(&self, n: usize, nr: usize) -> usize {
        balanced(n, self.nc)
            .next_multiple_of(nr)
            .min(self.nc.max(nr))
    }
}

/// The size of `ceil(len / max)` near-equal blocks covering `len`, at most `max`.
fn balanced(len: usize, max: usize) -> usize {
    let blocks = len.div_ceil(max).max(1);
    len.div_ceil(blocks).min(max).max(1)
}

#[cfg(test)]
mod tests;
