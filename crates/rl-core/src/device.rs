//! Devices as plain data.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Where a tensor or a batch should live. Naming a device never touches CUDA: only the
/// crates that own CUDA code (behind their `cuda` feature) act on [`Device::Cuda`].
///
/// ```
/// use rl_core::Device;
///
/// let gpu: Device = "cuda:1".parse()?;
/// assert_eq!(gpu, Device::Cuda(1));
/// assert_eq!(Device::Cpu.to_string(), "cpu");
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Device {
    /// Host memory and CPU compute.
    #[default]
    Cpu,
    /// A CUDA device, by ordinal.
    Cuda(u32),
}

impl Device {
    /// Whether this is the CPU.
    pub fn is_cpu(self) -> bool {
        self == Device::Cpu
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for Device {
    type Err = Error;

    /// Parses `cpu`, `cuda` (ordinal 0) or `cuda:N`.
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || {
            Error::config(
                format!("device `{s}`"),
                "is not a device: write cpu, cuda or cuda:N",
            )
        };
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(bad),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_round_trip() {
        for device in [Device::Cpu, Device::Cuda(0), Device::Cuda(7)] {
            assert_eq!(device.to_string().parse::<Device>().unwrap(), device);
        }
        assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda(0));
        assert!("gpu".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
        assert!(Device::default().is_cpu());
    }
}
