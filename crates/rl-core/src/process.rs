//! Resident memory of this process, read from `/proc/self/status` without allocating.
//!
//! Collectors and trainers report these figures every iteration next to their
//! [`MemoryPlan`](crate::MemoryPlan), so the read must be cheap and must not itself
//! disturb an allocation count: it uses a stack buffer only.

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

fn read_status(buffer: &mut [u8]) -> Result<usize> {
    let io = |source| Error::Io {
        context: "reading /proc/self/status".into(),
        source,
    };
    let mut file = File::open("/proc/self/status").map_err(io)?;
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
    for line in text.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (key, rest) = line.split_at(colon);
        let field = match key {
            b"VmRSS" => &mut memory.rss_bytes,
            b"VmHWM" => &mut memory.peak_rss_bytes,
            b"RssAnon" => &mut memory.rss_anon_bytes,
            b"RssFile" => &mut memory.rss_file_bytes,
            b"RssShmem" => &mut memory.rss_shmem_bytes,
            _ => continue,
        };
        let kib = rest
            .iter()
            .filter(|b| b.is_ascii_digit())
            .fold(0u64, |acc, &b| acc * 10 + u64::from(b - b'0'));
        *field = kib * 1024;
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
