//! Resident memory of this process, read from `/proc/self/status` without allocating,
//! and the machine's memory, from `/proc/meminfo`.
//!
//! Collectors and trainers report these figures every iteration next to their
//! [`MemoryPlan`](crate::MemoryPlan), so the read must be cheap and must not itself
//! disturb an allocation count: it uses a stack buffer only. A run without a budget
//! checks its plan against [`SystemMemory::available_bytes`] before it starts.

use std::fs::File;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A snapshot of the process's resident memory, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMemory {
    /// Resident set size now (`VmRSS`).
    pub rss_bytes: u64,
    /// Peak resident set size since start or the last [`ProcessMemory::reset_peak`] (`VmHWM`).
    pub peak_rss_bytes: u64,
    /// Resident anonymous memory: heap, stacks, anonymous mappings (`RssAnon`).
    pub rss_anon_bytes: u64,
    /// Resident file-backed memory: binaries and memory-mapped files (`RssFile`).
    pub rss_file_bytes: u64,
    /// Resident shared memory (`RssShmem`).
    pub rss_shmem_bytes: u64,
}

/// Big enough for `/proc/self/status` of any process (it is about 1.5 KiB).
const STATUS_BUFFER: usize = 8192;

impl ProcessMemory {
    /// Reads the current figures. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::Unsupported`] off Linux, [`Error::Io`] if `/proc` cannot be read.
    pub fn read() -> Result<Self> {
        if !cfg!(target_os = "linux") {
            return Err(Error::Unsupported {
                what: "reading resident memory from /proc",
            });
        }
        let mut buffer = [0u8; STATUS_BUFFER];
        let len = read_status(&mut buffer)?;
        Ok(parse_status(&buffer[..len]))
    }

    /// Resets the kernel's peak-RSS mark (`VmHWM`) to the current RSS, so that the next
    /// [`ProcessMemory::read`] reports the peak of the phase that follows.
    ///
    /// # Errors
    /// [`Error::Unsupported`] off Linux, [`Error::Io`] if `/proc/self/clear_refs` cannot be
    /// written.
    pub fn reset_peak() -> Result<()> {
        if !cfg!(target_os = "linux") {
            return Err(Error::Unsupported {
                what: "resetting the peak resident memory",
            });
        }
        // Writing "5" to clear_refs resets the high-water mark (Linux >= 4.0).
        File::options()
            .write(true)
            .open("/proc/self/clear_refs")
            .and_then(|mut f| f.write_all(b"5"))
            .map_err(|source| Error::Io {
                context: "resetting the peak RSS through /proc/self/clear_refs".into(),
                source,
            })
    }
}

/// The machine's memory, from `/proc/meminfo`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemMemory {
    /// Physical memory (`MemTotal`).
    pub total_bytes: u64,
    /// Memory a new allocation can get without swapping (`MemAvailable`: free memory
    /// plus the page cache and slabs the kernel can reclaim).
    pub available_bytes: u64,
}

/// Big enough for `/proc/meminfo` (about 1.5 KiB; `MemAvailable` is its third line).
const MEMINFO_BUFFER: usize = 8192;

impl SystemMemory {
    /// Reads the current figures. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::Unsupported`] off Linux or on a kernel without `MemAvailable` (before
    /// 3.14), [`Error::Io`] if `/proc/meminfo` cannot be read.
    pub fn read() -> Result<Self> {
        const WHAT: &str = "reading the available memory (MemAvailable) from /proc/meminfo";
        if !cfg!(target_os = "linux") {
            return Err(Error::Unsupported { what: WHAT });
        }
        let mut buffer = [0u8; MEMINFO_BUFFER];
        let len = read_proc("/proc/meminfo", &mut buffer)?;
        parse_meminfo(&buffer[..len]).ok_or(Error::Unsupported { what: WHAT })
    }
}

/// Parses `MemTotal` and `MemAvailable` (values in kB); `None` without `MemAvailable`.
fn parse_meminfo(text: &[u8]) -> Option<SystemMemory> {
    let (mut total, mut available) = (None, None);
    for (key, kib) in kib_lines(text) {
        match key {
            b"MemTotal" => total = Some(kib),
            b"MemAvailable" => available = Some(kib),
            _ => {}
        }
    }
    Some(SystemMemory {
        total_bytes: total.unwrap_or(0).saturating_mul(1024),
        available_bytes: available?.saturating_mul(1024),
    })
}

/// The `key: value kB` lines of a `/proc` file, values in kB.
fn kib_lines(text: &[u8]) -> impl Iterator<Item = (&[u8], u64)> {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        let (key, rest) = line.split_at(colon);
        let kib = rest
            .iter()
            .filter(|b| b.is_ascii_digit())
            .fold(0u64, |acc, &b| {
                acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
            });
        Some((key, kib))
    })
}

fn read_status(buffer: &mut [u8]) -> Result<usize> {
    read_proc("/proc/self/status", buffer)
}

/// Reads as much of the `/proc` file `path` as fits in `buffer`.
fn read_proc(path: &str, buffer: &mut [u8]) -> Result<usize> {
    let io = |source| Error::Io {
        context: format!("reading {path}"),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let mut len = 0;
    while len < buffer.len() {
        let n = file.read(&mut buffer[len..]).map_err(io)?;
        if n == 0 {
            break;
        }
        len += n;
    }
    Ok(len)
}

/// Parses the `Vm*`/`Rss*` lines of `/proc/self/status` (values are in kB).
fn parse_status(text: &[u8]) -> ProcessMemory {
    let mut memory = ProcessMemory::default();
    for (key, kib) in kib_lines(text) {
        let field = match key {
            b"VmRSS" => &mut memory.rss_bytes,
            b"VmHWM" => &mut memory.peak_rss_bytes,
            b"RssAnon" => &mut memory.rss_anon_bytes,
            b"RssFile" => &mut memory.rss_file_bytes,
            b"RssShmem" => &mut memory.rss_shmem_bytes,
            _ => continue,
        };
        *field = kib.saturating_mul(1024);
    }
    memory
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_status_file() {
        let text = b"Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t    1024 kB\nRssAnon:\t  512 kB\nRssFile:\t  500 kB\nRssShmem:\t  12 kB\nThreads:\t1\n";
        let m = parse_status(text);
        assert_eq!(m.rss_bytes, 1024 * 1024);
        assert_eq!(m.peak_rss_bytes, 2048 * 1024);
        assert_eq!(m.rss_anon_bytes, 512 * 1024);
        assert_eq!(m.rss_file_bytes, 500 * 1024);
        assert_eq!(m.rss_shmem_bytes, 12 * 1024);
    }

    #[test]
    fn parses_meminfo_and_needs_mem_available() {
        let text = b"MemTotal:       16384 kB\nMemFree:          1024 kB\nMemAvailable:     8192 kB\nBuffers:  1 kB\n";
        let m = parse_meminfo(text).unwrap();
        assert_eq!(m.total_bytes, 16384 * 1024);
        assert_eq!(m.available_bytes, 8192 * 1024);
        // Kernels before 3.14 have no MemAvailable: no reading, rather than a wrong one.
        assert_eq!(
            parse_meminfo(b"MemTotal: 16384 kB\nMemFree: 1024 kB\n"),
            None
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn available_memory_is_positive_and_at_most_the_total() {
        let m = SystemMemory::read().unwrap();
        assert!(m.available_bytes > 0, "{m:?}");
        assert!(m.available_bytes <= m.total_bytes, "{m:?}");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn resident_memory_grows_when_pages_are_touched() {
        let before = ProcessMemory::read().unwrap();
        assert!(before.rss_bytes > 0);
        assert!(before.peak_rss_bytes >= before.rss_bytes);
        // 64 MiB of touched pages must show up as anonymous resident memory.
        let block = vec![1u8; 64 << 20];
        let after = ProcessMemory::read().unwrap();
        assert!(
            after.rss_anon_bytes >= before.rss_anon_bytes + (48 << 20),
            "before {before:?} after {after:?}"
        );
        drop(std::hint::black_box(block));
    }
}
