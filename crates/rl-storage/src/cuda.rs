//! The one module that calls into CUDA.
//!
//! Every CUDA call of the workspace goes through here, so that two promises can be
//! checked from the outside:
//!
//! - **CPU means CPU**: a run configured with [`rl_core::Device::Cpu`] never initialises
//!   CUDA, even when the `cuda` feature is compiled in. [`cuda_initializations`] counts
//!   every driver initialisation and context creation made here, and [`libcuda_loaded`]
//!   says whether the driver library is mapped into the process at all.
//! - **GPU without a GPU**: with the `cuda` feature, `cudarc` loads the driver library at
//!   run time, so the crate builds without a CUDA toolkit. Asking for a device on a machine
//!   without a driver returns [`Error::CudaUnavailable`]; without the feature,
//!   [`Error::CudaNotCompiled`]. Nothing here panics or runs at load time.
//!
//! Naming a device ([`rl_core::Device::Cuda`]) is plain data; only [`CudaDevice::open`]
//! (and [`CudaDevice::device_count`]) touch the driver.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

#[cfg(feature = "cuda")]
use cudarc::driver::{CudaContext, CudaStream};

/// CUDA initialisations performed through this crate since the process started.
static CUDA_INITIALIZATIONS: AtomicU64 = AtomicU64::new(0);

/// How many times this process initialised CUDA through `rl-storage`: one for each
/// [`CudaDevice::open`] and each [`CudaDevice::device_count`] that reached the driver,
/// whether the driver then succeeded or not. Probing for a missing driver library does
/// not count: nothing was initialised.
///
/// This is how other crates prove they never touched CUDA: after a run configured with
/// [`rl_core::Device::Cpu`], this is still 0, with or without the `cuda` feature (without
/// it, it is always 0). Pair it with [`libcuda_loaded`] for a proof that does not rely on
/// this crate's bookkeeping.
///
/// ```
/// // A CPU-only program never initialises CUDA.
/// assert_eq!(rl_storage::cuda_initializations(), 0);
/// ```
pub fn cuda_initializations() -> u64 {
    // A monotonic counter: no other memory is published through it, and a test that
    // reads it after joining its workers is ordered by the join.
    CUDA_INITIALIZATIONS.load(Ordering::Relaxed)
}

/// Whether the NVIDIA driver library (`libcuda.so*`) is mapped into this process, read
/// from `/proc/self/maps` (Linux only; elsewhere, and when that file cannot be read,
/// `false`).
///
/// This is a second proof of "CPU means CPU", independent of [`cuda_initializations`]:
/// on a GPU machine, a CPU-only run must not even load the driver. It allocates (it reads
/// the file), so call it outside measured loops. Once loaded by [`CudaDevice::open`], the
/// library stays loaded until the process exits.
///
/// ```
/// // A CPU-only program never loads the driver library.
/// assert!(!rl_storage::libcuda_loaded());
/// ```
pub fn libcuda_loaded() -> bool {
    #[cfg(target_os = "linux")]
    {
        match std::fs::read("/proc/self/maps") {
            Ok(maps) => maps_name_libcuda(&maps),
            Err(_) => false,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether any mapping of a `/proc/<pid>/maps` text is a file named `libcuda.so*`.
///
/// The file name is what follows the last `/` of a line (a `" (deleted)"` suffix is
/// harmless); `libcudart`, `libcudnn` and friends do not match.
#[cfg(any(target_os = "linux", test))]
fn maps_name_libcuda(maps: &[u8]) -> bool {
    maps.split(|&b| b == b'\n').any(|line| {
        line.rsplit(|&b| b == b'/')
            .next()
            .is_some_and(|name| name.starts_with(b"libcuda.so"))
    })
}

/// An open CUDA device: a driver context on one GPU and its default stream.
///
/// Open it with [`CudaDevice::open`]; that is the only way this crate initialises CUDA.
/// Cloning is cheap and shares the context (the context is released when the last clone
/// is dropped).
///
/// Without the `cuda` feature the type still exists, so code naming it compiles either
/// way, but it cannot be constructed: [`CudaDevice::open`] returns
/// [`Error::CudaNotCompiled`].
///
/// ```
/// use rl_storage::{CudaDevice, Error};
///
/// match CudaDevice::open(0) {
///     Ok(gpu) => println!("cuda:{} is open", gpu.ordinal()),
///     // No NVIDIA driver here: the CPU path needs none.
///     Err(Error::CudaUnavailable { reason }) => println!("no GPU: {reason}"),
///     // Built without the `cuda` feature.
///     Err(Error::CudaNotCompiled) => println!("built without CUDA"),
///     Err(other) => return Err(other),
/// }
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CudaDevice {
    #[cfg(feature = "cuda")]
    ordinal: u32,
    #[cfg(feature = "cuda")]
    context: std::sync::Arc<CudaContext>,
    #[cfg(feature = "cuda")]
    stream: std::sync::Arc<CudaStream>,
    /// Without the feature the type is uninhabited: no value can exist.
    #[cfg(not(feature = "cuda"))]
    never: std::convert::Infallible,
}

impl CudaDevice {
    /// Opens device `ordinal`: initialises the driver and retains the device's primary
    /// context (counted by [`cuda_initializations`]).
    ///
    /// # Errors
    ///
    /// - [`Error::CudaNotCompiled`] without the `cuda` feature.
    /// - [`Error::CudaUnavailable`] when no NVIDIA driver library can be loaded (checked
    ///   before anything else, so a machine without a GPU gets an error, not a panic).
    /// - [`Error::CudaDriver`] when the driver refuses: no such ordinal, no device at all,
    ///   a driver that fails to initialise.
    pub fn open(ordinal: u32) -> Result<CudaDevice> {
        #[cfg(feature = "cuda")]
        {
            driver::open(ordinal)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Err(Error::CudaNotCompiled)
        }
    }

    /// How many CUDA devices the driver reports. A driver that sees no device gives
    /// `Ok(0)`. This initialises the driver (counted by [`cuda_initializations`]).
    ///
    /// # Errors
    ///
    /// [`Error::CudaNotCompiled`] without the `cuda` feature, [`Error::CudaUnavailable`]
    /// when no NVIDIA driver library can be loaded, [`Error::CudaDriver`] when the
    /// driver fails otherwise. Use `.unwrap_or(0)` where any of these means "no GPU".
    pub fn device_count() -> Result<u32> {
        #[cfg(feature = "cuda")]
        {
            driver::device_count()
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(Error::CudaNotCompiled)
        }
    }

    /// The device's ordinal, as given to [`CudaDevice::open`].
    pub fn ordinal(&self) -> u32 {
        #[cfg(feature = "cuda")]
        {
            self.ordinal
        }
        #[cfg(not(feature = "cuda"))]
        {
            match self.never {}
        }
    }

    /// Free and total device memory, in bytes, as the driver reports them now (other
    /// processes' allocations included).
    ///
    /// # Errors
    ///
    /// [`Error::CudaDriver`] when the driver call fails.
    pub fn memory_info(&self) -> Result<(u64, u64)> {
        #[cfg(feature = "cuda")]
        {
            driver::memory_info(self)
        }
        #[cfg(not(feature = "cuda"))]
        {
            match self.never {}
        }
    }

    /// The `cudarc` context this device holds. An escape hatch: what is done through it
    /// is not counted, and other crates of the workspace go through this module instead.
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn context(&self) -> &std::sync::Arc<CudaContext> {
        &self.context
    }

    /// The context's default stream, on which this crate queues its copies. An escape
    /// hatch, like [`CudaDevice::context`].
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn stream(&self) -> &std::sync::Arc<CudaStream> {
        &self.stream
    }
}

/// Everything that calls `cudarc`. Each entry point probes for the driver library first:
/// `cudarc` panics, instead of returning an error, when a driver call is made without it.
#[cfg(feature = "cuda")]
mod driver {
    use std::sync::OnceLock;
    use std::sync::atomic::Ordering;

    use cudarc::driver::{CudaContext, DriverError, sys};

    use super::{CUDA_INITIALIZATIONS, CudaDevice, Error, Result};

    /// Hint for a device that does not open.
    const CHECK_ORDINAL: &str = "check the ordinal against `nvidia-smi -L` and \
        CUDA_VISIBLE_DEVICES, and that the driver works (`nvidia-smi`)";
    /// Hint for a driver call that fails.
    const CHECK_DRIVER: &str = "check that the driver works (`nvidia-smi`)";

    /// Whether the driver library can be loaded, probed once per process.
    pub(super) fn driver_present() -> bool {
        static PRESENT: OnceLock<bool> = OnceLock::new();
        *PRESENT.get_or_init(|| {
            // SAFETY:
            // - `is_culib_present` loads (`dlopen`) and unloads the NVIDIA driver library by
            //   its usual names, which runs the library's initialisers: it is unsafe only
            //   because loading arbitrary libraries may run arbitrary code. The driver
            //   library is made to be loaded at run time (the CUDA runtime does exactly
            //   this) and its initialisers have no preconditions on the caller.
            // - It calls no driver function, so it is sound whether or not a GPU exists.
            unsafe { sys::is_culib_present() }
        })
    }

    /// Fails with [`Error::CudaUnavailable`] unless the driver library can be loaded.
    fn require_driver() -> Result<()> {
        if driver_present() {
            Ok(())
        } else {
            Err(Error::CudaUnavailable {
                reason: "no NVIDIA driver was found (the libcuda shared library could not be \
                         loaded): install the NVIDIA driver or add its directory to \
                         LD_LIBRARY_PATH"
                    .to_owned(),
            })
        }
    }

    /// Turns a driver error into [`Error::CudaDriver`].
    ///
    /// Only call with errors returned by the driver: describing one calls into the driver
    /// library, which must therefore be loaded (cudarc's own `Debug` and `Display` for
    /// [`DriverError`] panic without it).
    fn driver_error(
        ordinal: Option<u32>,
        operation: &'static str,
        hint: &'static str,
    ) -> impl FnOnce(DriverError) -> Error {
        move |e| Error::CudaDriver {
            ordinal,
            operation,
            hint,
            // The enum variant's name (`CUDA_ERROR_NO_DEVICE`): no driver call needed.
            code: format!("{:?}", e.0),
            message: e
                .error_string()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    pub(super) fn open(ordinal: u32) -> Result<CudaDevice> {
        require_driver()?;
        // The driver takes an `int` (cudarc casts with `as`): refuse what would wrap.
        if i32::try_from(ordinal).is_err() {
            return Err(Error::CudaDriver {
                ordinal: Some(ordinal),
                operation: "opening the device",
                code: "CUDA_ERROR_INVALID_DEVICE".to_owned(),
                message: "device ordinals stop at i32::MAX".to_owned(),
                hint: CHECK_ORDINAL,
            });
        }
        CUDA_INITIALIZATIONS.fetch_add(1, Ordering::Relaxed);
        let context = CudaContext::new(ordinal as usize).map_err(driver_error(
            Some(ordinal),
            "opening the device",
            CHECK_ORDINAL,
        ))?;
        let stream = context.default_stream();
        Ok(CudaDevice {
            ordinal,
            context,
            stream,
        })
    }

    pub(super) fn device_count() -> Result<u32> {
        require_driver()?;
        CUDA_INITIALIZATIONS.fetch_add(1, Ordering::Relaxed);
        match CudaContext::device_count() {
            Ok(n) => Ok(u32::try_from(n).unwrap_or(0)),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE => Ok(0),
            Err(e) => Err(driver_error(None, "counting devices", CHECK_DRIVER)(e)),
        }
    }

    pub(super) fn memory_info(device: &CudaDevice) -> Result<(u64, u64)> {
        let (free, total) = device.context.mem_get_info().map_err(driver_error(
            Some(device.ordinal),
            "reading memory info",
            CHECK_DRIVER,
        ))?;
        // usize is at most 64 bits on every supported target.
        Ok((free as u64, total as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parser_finds_only_the_driver_library() {
        let maps = b"55d0-55d1 r--p 00000000 08:01 1 /usr/bin/prog\n\
            7f00-7f01 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libcudart.so.12.8.90\n\
            7f02-7f03 rw-p 00000000 00:00 0 [heap]\n";
        assert!(!maps_name_libcuda(maps));
        let with_driver = [
            &maps[..],
            b"7f04-7f05 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libcuda.so.570.124.06\n",
        ]
        .concat();
        assert!(maps_name_libcuda(&with_driver));
        assert!(maps_name_libcuda(
            b"7f04-7f05 r-xp 00000000 08:01 3 /usr/lib/wsl/lib/libcuda.so.1 (deleted)"
        ));
        assert!(!maps_name_libcuda(b""));
    }

    /// One test, in order: the counter and the loaded-library check are process-wide, so
    /// tests running in parallel that open devices would race with them. On a machine
    /// with a driver this test has nothing to check (tests/cuda.rs covers that case).
    #[cfg(feature = "cuda")]
    #[test]
    fn without_a_driver_open_is_a_typed_error_and_nothing_is_initialised() {
        if driver::driver_present() {
            eprintln!("skipped: a CUDA driver is present; tests/cuda.rs covers it");
            return;
        }
        // Naming a device is plain data.
        let named = rl_core::Device::Cuda(0);
        assert!(!named.is_cpu());
        assert_eq!(cuda_initializations(), 0);
        assert!(!libcuda_loaded());

        let err = CudaDevice::open(0).unwrap_err();
        assert!(
            matches!(&err, Error::CudaUnavailable { reason } if reason.contains("NVIDIA driver")),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("no NVIDIA driver"), "{message}");
        assert!(message.contains("needs no GPU"), "{message}");

        match CudaDevice::device_count() {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert!(matches!(e, Error::CudaUnavailable { .. }), "{e:?}"),
        }
        // A second open after a failed one fails the same way (the probe is cached).
        assert!(matches!(
            CudaDevice::open(3),
            Err(Error::CudaUnavailable { .. })
        ));
        assert_eq!(cuda_initializations(), 0);
        assert!(!libcuda_loaded());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn without_the_feature_open_says_to_enable_it() {
        let err = CudaDevice::open(0).unwrap_err();
        assert!(matches!(err, Error::CudaNotCompiled), "{err:?}");
        assert!(err.to_string().contains("`cuda` feature"), "{err}");
        assert!(matches!(
            CudaDevice::device_count(),
            Err(Error::CudaNotCompiled)
        ));
        assert_eq!(cuda_initializations(), 0);
        assert!(!libcuda_loaded());
    }
}
