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
//!
//! With the `cuda` feature, [`CudaDevice`] is a [`crate::device::DeviceBackend`]: device buffers
//! ([`CudaBuffer`]), page-locked staging buffers ([`CudaStaging`]), copies on the device's
//! stream, and a row gather kernel written in PTX and compiled by the driver (no CUDA
//! toolkit and no NVRTC needed at build or run time).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

#[cfg(feature = "cuda")]
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, PinnedHostSlice,
};

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
/// assert_eq!(rl_storage::device::cuda_initializations(), 0);
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
/// assert!(!rl_storage::device::libcuda_loaded());
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
/// # As a [`DeviceBackend`](crate::device::DeviceBackend) (feature `cuda`)
///
/// Every operation is queued on the context's default stream, in call order:
///
/// - [`alloc`](crate::device::DeviceBackend::alloc) returns zeroed device memory
///   (`CudaBuffer`); [`alloc_staging`](crate::device::DeviceBackend::alloc_staging) returns
///   zeroed page-locked host memory (`CudaStaging`). Allocate both up front: the copy
///   and gather calls below allocate no host memory.
/// - [`upload_staging`](crate::device::DeviceBackend::upload_staging) and
///   [`gather`](crate::device::DeviceBackend::gather) are asynchronous: they return once the work
///   is queued. [`staging_mut`](crate::device::DeviceBackend::staging_mut) waits until earlier
///   copies out of that staging buffer have finished, so refilling it is always safe.
/// - [`upload`](crate::device::DeviceBackend::upload) returns once `src` may be reused: a copy
///   from ordinary (pageable) memory is staged by the driver before it returns, a copy
///   from page-locked memory is waited for.
/// - [`download`](crate::device::DeviceBackend::download) and
///   [`synchronize`](crate::device::DeviceBackend::synchronize) wait for everything queued.
///
/// The gather kernel is loaded on the first gather (or by [`CudaDevice::load_kernels`])
/// and shared by clones. Sizes are checked on the host before each launch; the pairs'
/// values live on the device, so the kernel checks each pair against its buffers itself
/// and aborts the launch (touching nothing outside the buffers) when one is out of range.
/// Callers build pairs from validated positions, so that is a bug: it surfaces as an
/// [`Error::CudaDriver`] from the next call that waits (typically
/// `CUDA_ERROR_LAUNCH_FAILED`), and, as after any kernel fault, the device's context is
/// unusable for the rest of the process.
///
/// Without the `cuda` feature the type still exists, so code naming it compiles either
/// way, but it cannot be constructed: [`CudaDevice::open`] returns
/// [`Error::CudaNotCompiled`].
///
/// ```
/// use rl_storage::{Error, device::CudaDevice};
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
    /// The gather kernels, loaded on first use and shared by clones.
    #[cfg(feature = "cuda")]
    kernels: std::sync::Arc<std::sync::OnceLock<driver::GatherKernels>>,
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

    /// Loads the gather kernels now, instead of on the first
    /// [`gather`](crate::device::DeviceBackend::gather): the driver compiles their PTX for this
    /// GPU, which takes milliseconds. Loading twice does nothing the second time.
    ///
    /// # Errors
    ///
    /// [`Error::CudaDriver`] when the driver cannot compile or load them (the message
    /// carries the compiler's log).
    pub fn load_kernels(&self) -> Result<()> {
        #[cfg(feature = "cuda")]
        {
            self.gather_kernels().map(|_| ())
        }
        #[cfg(not(feature = "cuda"))]
        {
            match self.never {}
        }
    }

    /// A staging buffer of `bytes` bytes in write-combined page-locked memory: the host
    /// writes it and the device reads it faster than a `CudaStaging` from
    /// [`alloc_staging`](crate::device::DeviceBackend::alloc_staging), but reading it from the host
    /// is very slow (uncached). For buffers the host only fills.
    ///
    /// # Errors
    ///
    /// [`Error::CudaDriver`] when page-locked memory runs out or the driver fails.
    #[cfg(feature = "cuda")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
    pub fn alloc_staging_write_combined(&self, bytes: usize) -> Result<CudaStaging> {
        driver::alloc_staging(
            self,
            bytes,
            cudarc::driver::sys::CU_MEMHOSTALLOC_WRITECOMBINED,
        )
    }
}

/// Device memory of a [`CudaDevice`]: its [`DeviceBackend::Buffer`](crate::device::DeviceBackend).
///
/// Allocated zeroed by [`DeviceBackend::alloc`](crate::device::DeviceBackend::alloc) on the
/// device's stream and freed, in stream order, when dropped. [`CudaBuffer::view`] lends it
/// to other `cudarc` code (kernels of a network, say).
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Debug)]
pub struct CudaBuffer {
    /// At least one byte long: the driver refuses empty allocations.
    slice: CudaSlice<u8>,
    /// The size asked for, which may be zero.
    len: usize,
}

#[cfg(feature = "cuda")]
impl CudaBuffer {
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer's bytes, for `cudarc` calls and kernels.
    pub fn view(&self) -> CudaView<'_, u8> {
        self.slice.slice(..self.len)
    }

    /// The buffer's bytes, mutably, for `cudarc` calls and kernels.
    pub fn view_mut(&mut self) -> CudaViewMut<'_, u8> {
        self.slice.slice_mut(..self.len)
    }
}

/// Page-locked host memory of a [`CudaDevice`]: its
/// [`DeviceBackend::Staging`](crate::device::DeviceBackend).
///
/// The device copies from it asynchronously, at full bus speed. Fill it through
/// [`DeviceBackend::staging_mut`](crate::device::DeviceBackend::staging_mut), which first waits for
/// the copies still reading it; dropping it waits for them too.
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
#[derive(Debug)]
pub struct CudaStaging {
    /// At least one byte long: the driver refuses empty allocations.
    pinned: PinnedHostSlice<u8>,
    /// The size asked for, which may be zero.
    len: usize,
    /// Recorded on the stream after each copy out of `pinned`.
    copied: CudaEvent,
    /// Whether the memory is write-combined (slow to read from the host).
    write_combined: bool,
}

#[cfg(feature = "cuda")]
impl CudaStaging {
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the memory is write-combined
    /// ([`CudaDevice::alloc_staging_write_combined`]).
    pub fn is_write_combined(&self) -> bool {
        self.write_combined
    }
}

#[cfg(feature = "cuda")]
impl Drop for CudaStaging {
    fn drop(&mut self) {
        // The page-locked memory is freed after this: copies still reading it must end
        // first. (`PinnedHostSlice` waits on its own event, which this module never
        // records: it hands the driver plain slices of the memory.)
        self.copied.context().record_err(self.copied.synchronize());
    }
}

/// Everything that calls `cudarc`. Each entry point probes for the driver library first:
/// `cudarc` panics, instead of returning an error, when a driver call is made without it.
#[cfg(feature = "cuda")]
mod driver {
    use std::ffi::{CStr, c_void};
    use std::ops::Range;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, OnceLock};

    use cudarc::driver::{CudaContext, DevicePtr, DevicePtrMut, DriverError, result, sys};
    use rl_core::Device;

    use super::{CUDA_INITIALIZATIONS, CudaBuffer, CudaDevice, CudaStaging, Error, Result};
    use crate::device::DeviceBackend;

    /// Hint for a device that does not open.
    const CHECK_ORDINAL: &str = "check the ordinal against `nvidia-smi -L` and \
        CUDA_VISIBLE_DEVICES, and that the driver works (`nvidia-smi`)";
    /// Hint for a driver call that fails.
    const CHECK_DRIVER: &str = "check that the driver works (`nvidia-smi`)";
    /// Hint for device memory that runs out.
    const CHECK_MEMORY: &str = "free device memory (other processes' allocations count: \
        `nvidia-smi`) or plan for less (`CudaDevice::memory_info` tells what is free)";
    /// Hint for page-locked host memory that runs out.
    const CHECK_PINNED: &str = "page-locked memory is limited by RAM and by `ulimit -l`: \
        use smaller or fewer staging buffers";
    /// Hint for a kernel that faulted (reported by whatever waits next).
    const CHECK_KERNEL: &str = "a kernel failed, for instance a gather given a pair outside \
        its buffers (the gather kernel then aborts instead of touching other memory); the \
        device context is unusable after a kernel fault: fix the cause and restart the process";
    /// Hint for PTX the driver does not compile.
    const CHECK_JIT: &str = "the driver could not compile the gather kernel's PTX: PTX ISA \
        7.0 needs an NVIDIA driver for CUDA 11.0 or newer; otherwise report the log";

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
            kernels: Arc::new(OnceLock::new()),
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

    /// The hint for a failed driver call: the code's own when it has one, else `default`.
    fn hint_for(error: &DriverError, default: &'static str) -> &'static str {
        use sys::CUresult as R;
        match error.0 {
            R::CUDA_ERROR_OUT_OF_MEMORY => CHECK_MEMORY,
            R::CUDA_ERROR_LAUNCH_FAILED
            | R::CUDA_ERROR_ILLEGAL_ADDRESS
            | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | R::CUDA_ERROR_MISALIGNED_ADDRESS
            | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | R::CUDA_ERROR_INVALID_PC
            | R::CUDA_ERROR_HARDWARE_STACK_ERROR
            | R::CUDA_ERROR_LAUNCH_TIMEOUT
            | R::CUDA_ERROR_ASSERT => CHECK_KERNEL,
            _ => default,
        }
    }

    /// A host-side range check with the same message as [`crate::device::FakeDevice`]'s.
    fn range(what: &str, offset: usize, len: usize, size: usize) -> Result<Range<usize>> {
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(offset..end),
            _ => Err(Error::config(
                format!("device {what}"),
                format!("of {len} bytes at offset {offset} does not fit a buffer of {size} bytes"),
            )),
        }
    }

    impl CudaDevice {
        /// Turns a driver error of an operation on this device into
        /// [`Error::CudaDriver`], with the code's own hint when it has one.
        fn failed(
            &self,
            operation: &'static str,
            default_hint: &'static str,
        ) -> impl FnOnce(DriverError) -> Error {
            let ordinal = self.ordinal;
            move |e| {
                let hint = hint_for(&e, default_hint);
                driver_error(Some(ordinal), operation, hint)(e)
            }
        }

        /// Refuses memory of another device (or another context).
        fn check_context(&self, what: &str, owner: &Arc<CudaContext>) -> Result<()> {
            if Arc::ptr_eq(owner, &self.context) || **owner == *self.context {
                Ok(())
            } else {
                Err(Error::config(
                    what,
                    format!(
                        "belongs to cuda:{}, not to cuda:{}: allocate it on the device that uses it",
                        owner.ordinal(),
                        self.ordinal
                    ),
                ))
            }
        }

        /// Whether the driver knows `host` as its own (page-locked or registered) memory,
        /// which it copies from asynchronously. Ordinary memory is unknown to it.
        fn is_driver_host_memory(&self, host: &[u8]) -> bool {
            let mut memory_type = 0u32;
            // SAFETY:
            // - `memory_type` is a live, writable `u32`, the size of the `CUmemorytype`
            //   (a C enum) the driver writes for this attribute.
            // - The address is only looked up (64-bit Linux uses unified addressing, where
            //   host addresses are valid arguments), never dereferenced by the driver; an
            //   address the driver does not know gives an error code, nothing else.
            // - The context is current: the copy just before bound it to this thread.
            let status = unsafe {
                sys::cuPointerGetAttribute(
                    (&raw mut memory_type).cast::<c_void>(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                    host.as_ptr() as sys::CUdeviceptr,
                )
            };
            status == sys::CUresult::CUDA_SUCCESS
        }

        /// The gather kernels, loaded on first use.
        pub(super) fn gather_kernels(&self) -> Result<&GatherKernels> {
            if let Some(kernels) = self.kernels.get() {
                return Ok(kernels);
            }
            let loaded = GatherKernels::load(self)?;
            // A racing thread may have stored its own: keep the first, unload this one.
            Ok(self.kernels.get_or_init(|| loaded))
        }
    }

    /// Page-locked host memory of `bytes` bytes (at least one allocated), zeroed.
    pub(super) fn alloc_staging(
        device: &CudaDevice,
        bytes: usize,
        flags: u32,
    ) -> Result<CudaStaging> {
        let failed = || device.failed("allocating page-locked host memory", CHECK_PINNED);
        let size = bytes.max(1);
        // `cudarc` asserts this (a panic) instead of returning an error.
        if size >= isize::MAX as usize {
            return Err(Error::config(
                "staging buffer",
                format!("of {bytes} bytes exceeds the address space"),
            ));
        }
        // SAFETY:
        // - The memory comes back uninitialised (the reason this is unsafe): it is zeroed
        //   below through a raw pointer, before any reference to it exists.
        // - `flags` is 0 or `CU_MEMHOSTALLOC_WRITECOMBINED` (the only callers), both valid
        //   flags of `cuMemHostAlloc`.
        let mut pinned = unsafe { device.context.alloc_pinned_with_flags::<u8>(size, flags) }
            .map_err(failed())?;
        let start = pinned.as_mut_ptr().map_err(failed())?;
        // SAFETY:
        // - `start` points to the `size` bytes just allocated, owned by `pinned` (alive), so
        //   it is valid for writes of `size` bytes, and `u8` needs no alignment.
        // - No reference to those bytes exists yet: the write aliases nothing.
        unsafe { start.write_bytes(0, size) };
        let copied = device.context.new_event(None).map_err(failed())?;
        Ok(CudaStaging {
            pinned,
            len: bytes,
            copied,
            write_combined: flags & sys::CU_MEMHOSTALLOC_WRITECOMBINED != 0,
        })
    }

    // The gather kernels, in PTX written by hand and compiled for the GPU by the driver
    // (`cuModuleLoadDataEx`): no CUDA toolkit and no NVRTC at build or run time. PTX ISA 7.0
    // (CUDA 11.0 drivers and newer) for sm_52: the driver compiles it forward for any newer
    // GPU.
    //
    // One entry per copy width W (16, 4 and 1 bytes). Launched as one block of 256 threads
    // per pair, all parameters 64-bit:
    //
    //     j = blockIdx.x                                  // pair j, j < rows
    //     pos = pairs[2j]; slot = pairs[2j + 1]           // u32 loads at pairs + 8j, + 8j + 4
    //     if pos >= src_rows || slot >= dst_rows: trap    // abort: touch nothing outside
    //     s = src + pos * row_bytes; d = dst + slot * row_bytes
    //     for (i = threadIdx.x * W; i < row_bytes; i += blockDim.x * W)
    //         *(W bytes *)(d + i) = *(W bytes *)(s + i)
    //
    // The host picks the widest W dividing `row_bytes` and both base addresses, so every
    // access is W-aligned and `i < row_bytes` implies `i + W <= row_bytes`. `src_rows` and
    // `dst_rows` are the whole rows each buffer holds: `pos < src_rows` means the source row
    // ends inside `src`, likewise for `slot`. `trap` ends the launch with an error that the
    // next waiting call reports.
    //
    // Registers: %r1 block index, %r2 position, %r3 slot, %r4 thread index, %r5 block size,
    // %r6..%r9 the 16-byte value (%r6 alone: 4 bytes; %rs1: 1 byte); %rd1 src, %rd2 pairs,
    // %rd3 dst, %rd4 row_bytes, %rd5 src_rows, %rd6 dst_rows, %rd7 the pair's address,
    // %rd8 and %rd9 the source and destination rows, %rd10 the byte offset i, %rd11 the
    // stride, %rd12 and %rd13 the addresses of one load and store, %rd14 and %rd15 the
    // position and slot widened to 64 bits. `cvta.to.global` turns the (generic) device
    // pointers into global-space addresses, as `nvcc` does for kernel pointers. The text
    // is `cuda/gather.ptx` (the three entries differ only in W and their load and store),
    // which `cargo xtask ci` also assembles with ptxas.
    /// The PTX module of the gather kernels (`cuda/gather.ptx`, one entry per width as
    /// above), NUL-terminated for the driver.
    pub(super) const GATHER_PTX: &CStr = match CStr::from_bytes_with_nul(
        concat!(include_str!("cuda/gather.ptx"), "\0").as_bytes(),
    ) {
        Ok(ptx) => ptx,
        Err(_) => panic!("the gather PTX must hold no NUL byte"),
    };

    /// The entry points of [`GATHER_PTX`] with the bytes each copies at a time, widest
    /// first; the last (1 byte) fits every row.
    pub(super) const GATHER_ENTRIES: [(&CStr, u64); 3] = [
        (c"rl_gather_v4", 16),
        (c"rl_gather_u32", 4),
        (c"rl_gather_u8", 1),
    ];

    /// The kernels' parameters, all 64-bit: src, pairs, dst, row_bytes, src_rows, dst_rows.
    pub(super) const GATHER_PARAMS: usize = 6;

    /// Threads per block of a gather launch (one block per pair).
    const GATHER_THREADS: u32 = 256;

    /// Index in [`GATHER_ENTRIES`] of the widest kernel whose width divides the row size and
    /// both base addresses.
    pub(super) fn gather_entry(row_bytes: u64, src: u64, dst: u64) -> usize {
        GATHER_ENTRIES
            .iter()
            .position(|&(_, width)| {
                row_bytes.is_multiple_of(width)
                    && src.is_multiple_of(width)
                    && dst.is_multiple_of(width)
            })
            .unwrap_or(GATHER_ENTRIES.len() - 1)
    }

    /// One gather launch, checked on the host.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) struct GatherLaunch {
        /// Blocks: one per pair.
        pub(super) blocks: u32,
        /// Bytes per row.
        pub(super) row_bytes: u64,
        /// Whole rows in the source buffer: positions must be below.
        pub(super) src_rows: u64,
        /// Whole rows in the destination buffer: slots must be below.
        pub(super) dst_rows: u64,
    }

    /// Checks a gather's sizes on the host; `None` when there is nothing to copy.
    ///
    /// The pairs' values are on the device: the kernel checks them against `src_rows` and
    /// `dst_rows`.
    pub(super) fn plan_gather(
        row_bytes: usize,
        rows: usize,
        pairs_len: usize,
        src_len: usize,
        dst_len: usize,
    ) -> Result<Option<GatherLaunch>> {
        let pair_bytes = rows.checked_mul(8).ok_or_else(|| {
            Error::config(
                "gather rows",
                format!("{rows} pairs overflow the address space"),
            )
        })?;
        range("gather pairs", 0, pair_bytes, pairs_len)?;
        if rows == 0 || row_bytes == 0 {
            return Ok(None);
        }
        // The grid's x dimension stops at 2^31 - 1 blocks.
        let blocks = u32::try_from(rows)
            .ok()
            .filter(|&b| b <= i32::MAX as u32)
            .ok_or_else(|| {
                Error::config(
                    "gather rows",
                    format!("{rows} rows in one gather exceed 2^31 - 1: gather in parts"),
                )
            })?;
        let whole_rows = |what: &str, len: usize| {
            if len < row_bytes {
                Err(Error::config(
                    format!("gather {what}"),
                    format!("of {len} bytes does not hold one row of {row_bytes} bytes"),
                ))
            } else {
                Ok((len / row_bytes) as u64)
            }
        };
        Ok(Some(GatherLaunch {
            blocks,
            row_bytes: row_bytes as u64,
            src_rows: whole_rows("source", src_len)?,
            dst_rows: whole_rows("destination", dst_len)?,
        }))
    }

    /// The loaded gather module and its functions, in [`GATHER_ENTRIES`] order.
    #[derive(Debug)]
    pub(crate) struct GatherKernels {
        context: Arc<CudaContext>,
        module: sys::CUmodule,
        functions: [sys::CUfunction; GATHER_ENTRIES.len()],
    }

    // SAFETY:
    // - The fields are opaque driver handles (plus an `Arc` that is `Send`); the driver API
    //   is thread-safe, and a module's handles may be used from any thread on which their
    //   context is current (every use here binds the context first).
    // - Nothing mutates the struct after `load` returns; `Drop` runs once, on one thread.
    unsafe impl Send for GatherKernels {}
    // SAFETY:
    // - Shared use only reads the handles, and the driver supports launching one function
    //   from several threads at once.
    unsafe impl Sync for GatherKernels {}

    impl GatherKernels {
        /// Compiles and loads [`GATHER_PTX`] into the device's context.
        fn load(device: &CudaDevice) -> Result<Self> {
            const OPERATION: &str = "loading the gather kernels";
            device
                .context
                .bind_to_thread()
                .map_err(device.failed(OPERATION, CHECK_DRIVER))?;
            let mut log = [0u8; 4096];
            let mut options = [
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
                sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            ];
            // The size option travels by value, in the pointer (as the driver API says).
            let mut values: [*mut c_void; 2] = [
                log.as_mut_ptr().cast(),
                std::ptr::without_provenance_mut(log.len()),
            ];
            let mut module: sys::CUmodule = std::ptr::null_mut();
            // SAFETY:
            // - `GATHER_PTX` is NUL-terminated PTX text (a `&CStr`) that lives for the
            //   whole program.
            // - `options` and `values` both hold 2 entries, the count passed; the log
            //   option points to `log`, writable for the `log.len()` bytes that the size
            //   option gives.
            // - `module` is a valid place for the driver to write the module's handle.
            // - The device's context is current on this thread (bound above).
            let status = unsafe {
                sys::cuModuleLoadDataEx(
                    &raw mut module,
                    GATHER_PTX.as_ptr().cast(),
                    2,
                    options.as_mut_ptr(),
                    values.as_mut_ptr(),
                )
            };
            if status != sys::CUresult::CUDA_SUCCESS {
                // On return the size option holds the bytes of log written.
                let written = values[1].addr().min(log.len());
                let text = String::from_utf8_lossy(&log[..written]);
                let error = DriverError(status);
                let description = error
                    .error_string()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(Error::CudaDriver {
                    ordinal: Some(device.ordinal),
                    operation: OPERATION,
                    code: format!("{status:?}"),
                    message: format!(
                        "{description}; JIT log: {}",
                        text.trim_end_matches('\0').trim()
                    ),
                    hint: CHECK_JIT,
                });
            }
            // From here on, dropping `kernels` unloads the module.
            let mut kernels = GatherKernels {
                context: Arc::clone(&device.context),
                module,
                functions: [std::ptr::null_mut(); GATHER_ENTRIES.len()],
            };
            for (function, (name, _)) in kernels.functions.iter_mut().zip(GATHER_ENTRIES) {
                // SAFETY:
                // - `kernels.module` was just loaded into the current context and is
                //   unloaded only when `kernels` drops, after its functions' last use.
                *function =
                    unsafe { result::module::get_function(kernels.module, name.to_owned()) }
                        .map_err(device.failed(OPERATION, CHECK_JIT))?;
            }
            Ok(kernels)
        }
    }

    impl Drop for GatherKernels {
        fn drop(&mut self) {
            let context = &self.context;
            // Launches from the module must end before it is unloaded.
            context.record_err(context.synchronize());
            // SAFETY:
            // - `module` was loaded by `load` into `context`, which `synchronize` made
            //   current, and is unloaded only here, once.
            // - No launch from it is still running (synchronized above) and no function
            //   handle outlives `self`.
            context.record_err(unsafe { result::module::unload(self.module) });
        }
    }

    impl DeviceBackend for CudaDevice {
        type Buffer = CudaBuffer;
        type Staging = CudaStaging;

        fn device(&self) -> Device {
            Device::Cuda(self.ordinal)
        }

        fn alloc(&self, bytes: usize) -> Result<CudaBuffer> {
            let slice = self
                .stream
                .alloc_zeros::<u8>(bytes.max(1))
                .map_err(self.failed("allocating device memory", CHECK_MEMORY))?;
            Ok(CudaBuffer { slice, len: bytes })
        }

        fn len(&self, buffer: &CudaBuffer) -> usize {
            buffer.len
        }

        fn alloc_staging(&self, bytes: usize) -> Result<CudaStaging> {
            alloc_staging(self, bytes, 0)
        }

        fn staging_mut<'a>(&self, staging: &'a mut CudaStaging) -> Result<&'a mut [u8]> {
            let failed = || self.failed("waiting for copies out of a staging buffer", CHECK_DRIVER);
            staging.copied.synchronize().map_err(failed())?;
            let len = staging.len;
            let bytes = staging.pinned.as_mut_slice().map_err(failed())?;
            Ok(&mut bytes[..len])
        }

        fn upload(&self, src: &[u8], dst: &mut CudaBuffer, offset: usize) -> Result<()> {
            let range = range("upload", offset, src.len(), dst.len)?;
            self.check_context("device upload destination", dst.slice.context())?;
            if src.is_empty() {
                return Ok(());
            }
            let failed = || self.failed("copying to the device", CHECK_DRIVER);
            let mut view = dst
                .slice
                .try_slice_mut(range)
                .ok_or_else(|| Error::config("device upload", "outside the allocation"))?;
            self.stream.memcpy_htod(src, &mut view).map_err(failed())?;
            // From ordinary memory the driver has staged the bytes before returning; from
            // memory it knows (page-locked) it copies later: wait, so `src` may be reused.
            if self.is_driver_host_memory(src) {
                self.stream.synchronize().map_err(failed())?;
            }
            Ok(())
        }

        fn upload_staging(
            &self,
            staging: &CudaStaging,
            len: usize,
            dst: &mut CudaBuffer,
            offset: usize,
        ) -> Result<()> {
            range("staging upload", 0, len, staging.len)?;
            let range = range("upload", offset, len, dst.len)?;
            self.check_context("staging buffer", staging.pinned.context())?;
            self.check_context("device upload destination", dst.slice.context())?;
            if len == 0 {
                return Ok(());
            }
            let failed = || self.failed("copying a staging buffer to the device", CHECK_DRIVER);
            // Waits on the slice's own event, which is never recorded (this module hands
            // the driver plain slices of it): returns at once.
            let host = staging.pinned.as_slice().map_err(failed())?;
            let mut view = dst
                .slice
                .try_slice_mut(range)
                .ok_or_else(|| Error::config("device upload", "outside the allocation"))?;
            self.stream
                .memcpy_htod(&host[..len], &mut view)
                .map_err(failed())?;
            // `staging_mut` and drop wait for this event before the host touches the
            // memory again.
            if let Err(e) = staging.copied.record(&self.stream) {
                // Without the event nothing would wait for the copy: wait now.
                self.context.record_err(self.stream.synchronize());
                return Err(failed()(e));
            }
            Ok(())
        }

        fn download(&self, src: &CudaBuffer, offset: usize, dst: &mut [u8]) -> Result<()> {
            let range = range("download", offset, dst.len(), src.len)?;
            self.check_context("device download source", src.slice.context())?;
            let failed = || self.failed("copying from the device", CHECK_DRIVER);
            if !dst.is_empty() {
                let view = src
                    .slice
                    .try_slice(range)
                    .ok_or_else(|| Error::config("device download", "outside the allocation"))?;
                self.stream.memcpy_dtoh(&view, dst).map_err(failed())?;
            }
            self.stream.synchronize().map_err(failed())
        }

        fn gather(
            &self,
            src: &CudaBuffer,
            row_bytes: usize,
            pairs: &CudaBuffer,
            rows: usize,
            dst: &mut CudaBuffer,
        ) -> Result<()> {
            let Some(launch) = plan_gather(row_bytes, rows, pairs.len, src.len, dst.len)? else {
                return Ok(());
            };
            self.check_context("gather source", src.slice.context())?;
            self.check_context("gather pairs", pairs.slice.context())?;
            self.check_context("gather destination", dst.slice.context())?;
            let kernels = self.gather_kernels()?;
            let failed = || self.failed("launching the gather kernel", CHECK_DRIVER);
            self.context.bind_to_thread().map_err(failed())?;
            // The guards order the launch after earlier writes (and record it) when
            // `cudarc` tracks several streams; they must live until after the launch.
            let (src_ptr, _src_read) = src.slice.device_ptr(&self.stream);
            let (pairs_ptr, _pairs_read) = pairs.slice.device_ptr(&self.stream);
            let (dst_ptr, _dst_write) = dst.slice.device_ptr_mut(&self.stream);
            if !pairs_ptr.is_multiple_of(4) {
                return Err(Error::config(
                    "gather pairs",
                    "are not 4-byte aligned on the device",
                ));
            }
            let function = kernels.functions[gather_entry(launch.row_bytes, src_ptr, dst_ptr)];
            let args: [u64; GATHER_PARAMS] = [
                src_ptr,
                pairs_ptr,
                dst_ptr,
                launch.row_bytes,
                launch.src_rows,
                launch.dst_rows,
            ];
            let mut params = args
                .each_ref()
                .map(|arg| std::ptr::from_ref(arg).cast_mut().cast::<c_void>());
            // SAFETY:
            // - `function` belongs to the module in `kernels`, loaded into this context
            //   (current: bound above) and alive while `self` is.
            // - `params` holds one pointer per kernel parameter, in order, each to a live
            //   `u64` matching the PTX's six `.u64` parameters; the driver copies the
            //   values during this call.
            // - Memory: block j < `rows` reads bytes 8j..8j+8 of `pairs`, inside it
            //   (`rows * 8 <= pairs.len`, checked by `plan_gather`). It copies only when
            //   the pair's position is below `src_rows` and its slot below `dst_rows`
            //   (whole rows of each buffer), so every row it touches lies inside `src` and
            //   `dst`; otherwise it traps. Accesses are aligned to the kernel's width,
            //   which divides `row_bytes` and both base addresses (`gather_entry`), and
            //   the pair loads are 4-byte aligned (checked above).
            // - Aliasing: `dst` is borrowed mutably, so it is neither `src` nor `pairs`;
            //   the kernel only reads those two.
            // - Lifetime: the launch is queued on this stream, which the buffers were
            //   allocated on and are freed on (stream-ordered, or after a stream
            //   synchronisation), so they outlive the kernel even if dropped right after.
            unsafe {
                result::launch_kernel(
                    function,
                    (launch.blocks, 1, 1),
                    (GATHER_THREADS, 1, 1),
                    0,
                    self.stream.cu_stream(),
                    &mut params,
                )
            }
            .map_err(failed())
        }

        fn synchronize(&self) -> Result<()> {
            self.stream
                .synchronize()
                .map_err(self.failed("waiting for the device", CHECK_DRIVER))
        }
    }
}

#[cfg(test)]
mod tests;
