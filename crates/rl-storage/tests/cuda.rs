//! Real GPU tests, run on every CI machine.
//!
//! Without an NVIDIA driver they print `skipped: ...` and pass, unless `RL_REQUIRE_GPU=1`
//! is set (GPU runners set it, so a broken driver cannot pass as "skipped"). Without the
//! `cuda` feature only the not-compiled path is checked.
//!
//! With a GPU, the [`rl_storage::device::DeviceBackend`] implementation of
//! [`rl_storage::device::CudaDevice`] is checked against [`rl_storage::device::FakeDevice`] (the same calls
//! on both must give the same bytes), and transfer rates are printed as JSON lines
//! (`cargo test -p rl-storage --features cuda --release --test cuda -- --nocapture`).

// Counts allocations, to check that copies and gathers allocate no host memory.
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;

/// Without the feature, asking for a GPU is a typed error that says how to get one, and
/// CUDA is never touched.
#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_feature_cuda_is_not_compiled() {
    use rl_storage::{
        Error,
        device::{CudaDevice, cuda_initializations, libcuda_loaded},
    };

    let err = CudaDevice::open(0).unwrap_err();
    assert!(matches!(err, Error::CudaNotCompiled), "{err:?}");
    assert!(
        err.to_string().contains("enable the `cuda` feature"),
        "{err}"
    );
    assert!(matches!(
        CudaDevice::device_count(),
        Err(Error::CudaNotCompiled)
    ));
    assert_eq!(cuda_initializations(), 0);
    assert!(!libcuda_loaded());
}

#[cfg(feature = "cuda")]
mod gpu {
    use std::sync::{Mutex, MutexGuard};
    use std::time::Instant;

    use rand::seq::SliceRandom;
    use rand::{Rng, RngCore, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;
    use rl_core::{Column, DType, Device, Schema};
    use rl_storage::{
        Error,
        device::{
            CudaDevice, DeviceBackend, DeviceBatch, FakeDevice, cuda_initializations, encode_pairs,
            libcuda_loaded,
        },
    };

    /// Returns normally when the test should be skipped (after saying so), panics when
    /// `RL_REQUIRE_GPU=1` asks for a GPU that is not there.
    fn skip(why: &str) {
        if std::env::var("RL_REQUIRE_GPU").is_ok_and(|v| v == "1") {
            panic!("RL_REQUIRE_GPU=1 but {why}");
        }
        println!("skipped: {why} (set RL_REQUIRE_GPU=1 to fail instead)");
    }

    /// Serialises the tests that open a device: the initialisation counter is
    /// process-wide (one test checks exact counts), and transfer rates are measured alone.
    fn gpu_lock() -> MutexGuard<'static, ()> {
        static GPU: Mutex<()> = Mutex::new(());
        GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// cuda:0, or `None` after [`skip`] when there is none.
    fn open_or_skip() -> Option<CudaDevice> {
        match CudaDevice::open(0) {
            Ok(device) => Some(device),
            Err(Error::CudaUnavailable { .. }) => {
                skip("no CUDA driver found");
                None
            }
            Err(e @ Error::CudaDriver { .. }) => {
                skip(&format!(
                    "a CUDA driver was found but cuda:0 did not open ({e})"
                ));
                None
            }
            Err(e) => panic!("unexpected error opening cuda:0: {e}"),
        }
    }

    /// One test, in order, under [`gpu_lock`]: the initialisation counter is
    /// process-wide, so tests opening devices in parallel would make its exact counts race.
    #[test]
    fn open_count_memory_and_round_trip() {
        let _gpu = gpu_lock();
        let before = cuda_initializations();
        let device = match CudaDevice::open(0) {
            Ok(device) => device,
            Err(Error::CudaUnavailable { .. }) => {
                assert_eq!(
                    cuda_initializations(),
                    before,
                    "a missing driver is not an init"
                );
                return skip("no CUDA driver found");
            }
            Err(e @ Error::CudaDriver { .. }) => {
                return skip(&format!(
                    "a CUDA driver was found but cuda:0 did not open ({e})"
                ));
            }
            Err(e) => panic!("unexpected error opening cuda:0: {e}"),
        };
        assert_eq!(
            cuda_initializations(),
            before + 1,
            "open initialises exactly once"
        );
        assert_eq!(device.ordinal(), 0);
        assert!(
            libcuda_loaded(),
            "the driver library must be mapped once a device is open"
        );

        let count = CudaDevice::device_count().unwrap();
        assert!(
            count >= 1,
            "device 0 is open but the driver counts {count} devices"
        );
        assert_eq!(cuda_initializations(), before + 2);

        let (free, total) = device.memory_info().unwrap();
        assert!(total > 0);
        assert!(free <= total, "free {free} > total {total}");

        // A clone shares the context: no new initialisation.
        let clone = device.clone();
        assert_eq!(clone.ordinal(), 0);
        assert_eq!(cuda_initializations(), before + 2);

        // A tiny round trip through device memory.
        let host = [1.5f32, -2.0, 0.0, f32::MAX, f32::MIN_POSITIVE];
        let stream = device.stream();
        let on_device = stream.clone_htod(&host).unwrap();
        let mut back = [0f32; 5];
        stream.memcpy_dtoh(&on_device, &mut back).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(back, host);
        assert_eq!(stream.clone_dtoh(&on_device).unwrap(), host);

        // Opening an ordinal that does not exist is an error, not a panic.
        let err = CudaDevice::open(count).unwrap_err();
        assert!(
            matches!(&err, Error::CudaDriver { ordinal: Some(o), .. } if *o == count),
            "{err:?}"
        );
        assert!(err.to_string().contains(&format!("cuda:{count}")), "{err}");
        let err = CudaDevice::open(u32::MAX).unwrap_err();
        assert!(matches!(err, Error::CudaDriver { .. }), "{err:?}");
        println!("cuda:0: {count} device(s), {free} of {total} bytes free");
    }

    #[test]
    fn buffers_round_trip_at_offsets_and_refuse_out_of_range_copies() {
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        assert_eq!(device.device(), Device::Cuda(0));

        let mut buffer = device.alloc(1000).unwrap();
        assert_eq!(device.len(&buffer), 1000);
        assert_eq!(buffer.len(), 1000);
        assert_eq!(buffer.view().len(), 1000);
        let mut back = vec![1u8; 1000];
        device.download(&buffer, 0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0), "alloc zeroes");

        let pattern: Vec<u8> = (0..100u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(1))
            .collect();
        device.upload(&pattern, &mut buffer, 37).unwrap();
        device.download(&buffer, 0, &mut back).unwrap();
        assert!(back[..37].iter().all(|&b| b == 0));
        assert_eq!(&back[37..137], &pattern[..]);
        assert!(back[137..].iter().all(|&b| b == 0));
        let mut middle = [0u8; 50];
        device.download(&buffer, 60, &mut middle).unwrap();
        assert_eq!(&middle[..], &pattern[23..73]);
        device.upload(&pattern[..3], &mut buffer, 997).unwrap();
        device.download(&buffer, 997, &mut middle[..3]).unwrap();
        assert_eq!(&middle[..3], &pattern[..3]);

        // Out of range: typed errors, no panic, and the device goes on working.
        let config = |r: rl_storage::Result<()>| matches!(r, Err(Error::Core(_)));
        assert!(config(device.upload(&pattern, &mut buffer, 901)));
        assert!(config(device.upload(&pattern, &mut buffer, usize::MAX)));
        assert!(config(device.upload(&[], &mut buffer, 1001)));
        assert!(config(device.download(&buffer, 951, &mut middle)));
        assert!(config(device.download(
            &buffer,
            usize::MAX - 10,
            &mut middle
        )));
        device.download(&buffer, 37, &mut middle).unwrap();
        assert_eq!(&middle[..], &pattern[..50]);

        // Empty buffers and copies.
        let mut empty = device.alloc(0).unwrap();
        assert_eq!(device.len(&empty), 0);
        assert!(empty.is_empty() && empty.view().is_empty());
        device.upload(&[], &mut empty, 0).unwrap();
        device.download(&empty, 0, &mut []).unwrap();
        assert!(config(device.upload(&[1], &mut empty, 0)));
        device.upload(&[], &mut buffer, 1000).unwrap();

        // The generic device batch works on the GPU.
        let schema = Schema::new([
            Column::new("obs", DType::F32, &[3]),
            Column::scalar("action", DType::U32),
        ])
        .unwrap();
        let batch = DeviceBatch::new(&device, &schema, 8).unwrap();
        assert_eq!(device.len(batch.column("obs").unwrap()), 8 * 3 * 4);
        let mut none: [f32; 0] = [];
        batch.download(&device, "obs", &mut none).unwrap();
        device.synchronize().unwrap();
    }

    /// Uploads `source`, gathers `pairs` (through a staging buffer) into a zeroed
    /// destination of `dst_rows` rows, then gathers the first half of the pairs again;
    /// returns the destination's bytes. The same calls run on every backend.
    fn gather_on<D: DeviceBackend>(
        device: &D,
        source: &[u8],
        row_bytes: usize,
        pairs: &[(usize, usize)],
        dst_rows: usize,
    ) -> Vec<u8> {
        let mut src = device.alloc(source.len()).expect("device call");
        device.upload(source, &mut src, 0).expect("device call");
        let mut staging = device.alloc_staging(pairs.len() * 8).expect("device call");
        let bytes = encode_pairs(
            pairs.iter().copied(),
            device.staging_mut(&mut staging).expect("device call"),
        )
        .expect("device call");
        let mut on_device = device.alloc(pairs.len() * 8).expect("device call");
        device
            .upload_staging(&staging, bytes, &mut on_device, 0)
            .expect("device call");
        let mut dst = device.alloc(dst_rows * row_bytes).expect("device call");
        device
            .gather(&src, row_bytes, &on_device, pairs.len(), &mut dst)
            .expect("device call");
        // A second gather over part of the first: stream order decides.
        let half = pairs.len() / 2;
        device
            .gather(&src, row_bytes, &on_device, half, &mut dst)
            .expect("device call");
        let mut out = vec![0u8; dst_rows * row_bytes];
        device.download(&dst, 0, &mut out).expect("device call");
        out
    }

    #[test]
    fn gather_matches_the_fake_device_for_every_row_size() {
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        device.load_kernels().unwrap();
        device.load_kernels().unwrap();
        let fake = FakeDevice::new();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        // 1 and 3 bytes take the byte kernel, 4 and 12 the 4-byte one, 16 and the Atari
        // frames (84x84 and 4 stacked) the 16-byte one; the last case has more blocks
        // than a grid's y or z dimension could hold.
        let cases = [
            (1, 64, 50, 48),
            (3, 64, 50, 48),
            (4, 64, 50, 48),
            (12, 200_000, 100_000, 100_000),
            (16, 64, 50, 48),
            (7056, 64, 50, 48),
            (28_224, 64, 50, 48),
        ];
        for (row_bytes, src_rows, dst_rows, rows) in cases {
            let mut source = vec![0u8; src_rows * row_bytes];
            rng.fill_bytes(&mut source);
            let mut slots: Vec<usize> = (0..dst_rows).collect();
            slots.shuffle(&mut rng);
            let pairs: Vec<(usize, usize)> = slots[..rows]
                .iter()
                .map(|&slot| (rng.random_range(0..src_rows), slot))
                .collect();
            let gpu = gather_on(&device, &source, row_bytes, &pairs, dst_rows);
            let reference = gather_on(&fake, &source, row_bytes, &pairs, dst_rows);
            assert!(
                gpu == reference,
                "rows of {row_bytes} bytes differ from FakeDevice"
            );
            // And FakeDevice is what the trait says: check one pair by hand.
            let (position, slot) = pairs[rows - 1];
            assert_eq!(
                &gpu[slot * row_bytes..][..row_bytes],
                &source[position * row_bytes..][..row_bytes]
            );
        }
    }

    #[test]
    fn gather_checks_sizes_before_launching() {
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        let src = device.alloc(64).unwrap();
        let pairs = device.alloc(16).unwrap();
        let mut dst = device.alloc(32).unwrap();
        let config = |r: rl_storage::Result<()>| matches!(r, Err(Error::Core(_)));
        assert!(
            config(device.gather(&src, 8, &pairs, 3, &mut dst)),
            "3 pairs need 24 bytes"
        );
        assert!(
            config(device.gather(&src, 65, &pairs, 1, &mut dst)),
            "no whole source row"
        );
        assert!(
            config(device.gather(&src, 33, &pairs, 1, &mut dst)),
            "no whole destination row"
        );
        assert!(config(device.gather(&src, 8, &pairs, usize::MAX, &mut dst)));
        // Nothing to do is not an error (and launches nothing).
        device.gather(&src, 8, &pairs, 0, &mut dst).unwrap();
        device.gather(&src, 0, &pairs, 2, &mut dst).unwrap();
        // Zeroed pairs are (0, 0) twice: valid.
        device.gather(&src, 8, &pairs, 2, &mut dst).unwrap();
        device.synchronize().unwrap();
    }

    #[test]
    fn staging_copies_are_asynchronous_yet_never_see_later_writes() {
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        const BYTES: usize = 64 << 20;
        const TAIL: usize = 1 << 20;
        let pattern = |seed: u8| move |i: usize| (i as u8).wrapping_mul(31).wrapping_add(seed);
        let mut staging = device.alloc_staging(BYTES).unwrap();
        assert_eq!(staging.len(), BYTES);
        assert!(!staging.is_write_combined());
        let bytes = device.staging_mut(&mut staging).unwrap();
        assert!(bytes.iter().all(|&b| b == 0), "alloc_staging zeroes");
        bytes
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(1)(i));
        let mut first = device.alloc(BYTES).unwrap();
        let mut second = device.alloc(BYTES).unwrap();
        device
            .upload_staging(&staging, BYTES, &mut first, 0)
            .unwrap();
        // Refilling at once must wait for the copy above. The tail goes first, with a
        // fast fill: the copy reads it last, so a missing wait would corrupt it.
        let bytes = device.staging_mut(&mut staging).unwrap();
        bytes[BYTES - TAIL..].fill(0xEE);
        bytes
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(2)(i));
        device
            .upload_staging(&staging, BYTES / 2, &mut second, BYTES / 2)
            .unwrap();
        // `upload` from page-locked memory returns only once it may be overwritten.
        let mut third = device.alloc(BYTES).unwrap();
        let bytes = device.staging_mut(&mut staging).unwrap();
        bytes
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(3)(i));
        device.upload(bytes, &mut third, 0).unwrap();
        bytes[BYTES - TAIL..].fill(0xEE);
        // Dropping a staging buffer with a copy in flight waits for the copy.
        let mut fourth = device.alloc(BYTES).unwrap();
        let mut doomed = device.alloc_staging(BYTES).unwrap();
        let bytes = device.staging_mut(&mut doomed).unwrap();
        bytes
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = pattern(4)(i));
        device
            .upload_staging(&doomed, BYTES, &mut fourth, 0)
            .unwrap();
        drop(doomed);

        let mut back = vec![0u8; BYTES];
        let check = |back: &[u8], seed: u8, what: &str| {
            let bad = back
                .iter()
                .enumerate()
                .position(|(i, &b)| b != pattern(seed)(i));
            assert_eq!(bad, None, "{what}: first wrong byte");
        };
        device.download(&first, 0, &mut back).unwrap();
        check(&back, 1, "staging copy before the refill");
        device
            .download(&second, BYTES / 2, &mut back[..BYTES / 2])
            .unwrap();
        check(&back[..BYTES / 2], 2, "half copy at an offset");
        device.download(&second, 0, &mut back[..BYTES / 2]).unwrap();
        assert!(back[..BYTES / 2].iter().all(|&b| b == 0));
        device.download(&third, 0, &mut back).unwrap();
        check(&back, 3, "upload from page-locked memory");
        device.download(&fourth, 0, &mut back).unwrap();
        check(&back, 4, "copy from a dropped staging buffer");

        // Sizes are checked; empty ones work.
        let config = |r: rl_storage::Result<()>| matches!(r, Err(Error::Core(_)));
        assert!(config(device.upload_staging(
            &staging,
            BYTES + 1,
            &mut first,
            0
        )));
        assert!(config(device.upload_staging(
            &staging,
            2,
            &mut first,
            BYTES - 1
        )));
        device
            .upload_staging(&staging, 0, &mut first, BYTES)
            .unwrap();
        let mut empty = device.alloc_staging(0).unwrap();
        assert!(device.staging_mut(&mut empty).unwrap().is_empty());
        let mut combined = device.alloc_staging_write_combined(4096).unwrap();
        assert!(combined.is_write_combined());
        device.staging_mut(&mut combined).unwrap().fill(9);
        device
            .upload_staging(&combined, 4096, &mut first, 0)
            .unwrap();
        device.download(&first, 0, &mut back[..4096]).unwrap();
        assert!(back[..4096].iter().all(|&b| b == 9));
    }

    #[test]
    fn copies_and_gathers_allocate_no_host_memory() {
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        let (row_bytes, rows) = (7056, 32);
        let source = device.alloc(1000 * row_bytes).unwrap();
        let mut staging = device.alloc_staging(rows * 8).unwrap();
        let mut pairs = device.alloc(rows * 8).unwrap();
        let mut batch = device.alloc(rows * row_bytes).unwrap();
        let mut host = vec![0u8; rows * row_bytes];
        let small = [1u8; 64];
        let mut step = |k: usize| {
            let bytes = encode_pairs(
                (0..rows).map(|j| ((j * 31 + k) % 1000, j)),
                device.staging_mut(&mut staging).unwrap(),
            )
            .unwrap();
            device
                .upload_staging(&staging, bytes, &mut pairs, 0)
                .unwrap();
            device
                .gather(&source, row_bytes, &pairs, rows, &mut batch)
                .unwrap();
            device.upload(&small, &mut batch, 0).unwrap();
            device.download(&batch, 0, &mut host).unwrap();
            device.synchronize().unwrap();
        };
        step(0); // loads the kernels and resolves the driver's symbols
        let ((), stats) = rl_testkit::measure(|| (1..50).for_each(&mut step));
        assert_eq!(stats.allocations, 0, "{stats:?}");
    }

    /// Transfer rates for the notes, one JSON object per line. Asserts nothing about
    /// speed: GPU runners differ.
    #[test]
    fn transfer_rates() {
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        const BYTES: usize = 64 << 20;
        const REPEATS: usize = 10;
        let report = |what: &str, memory: &str, seconds: &mut Vec<f64>| {
            seconds.sort_by(f64::total_cmp);
            let gbps = |s: f64| BYTES as f64 / s / 1e9;
            println!(
                "{{\"bench\":\"{what}\",\"memory\":\"{memory}\",\"bytes\":{BYTES},\
                 \"best_gbps\":{:.2},\"median_gbps\":{:.2},\"repeats\":{REPEATS}}}",
                gbps(seconds[0]),
                gbps(seconds[seconds.len() / 2])
            );
            assert!(seconds[0] > 0.0);
        };
        let time = |f: &mut dyn FnMut()| {
            f(); // warm-up
            let mut seconds = Vec::with_capacity(REPEATS);
            for _ in 0..REPEATS {
                let start = Instant::now();
                f();
                seconds.push(start.elapsed().as_secs_f64());
            }
            seconds
        };
        let mut dst = device.alloc(BYTES).unwrap();
        let pageable = vec![3u8; BYTES];
        let mut pinned = device.alloc_staging(BYTES).unwrap();
        device.staging_mut(&mut pinned).unwrap().fill(3);
        let mut combined = device.alloc_staging_write_combined(BYTES).unwrap();
        device.staging_mut(&mut combined).unwrap().fill(3);

        let mut s = time(&mut || {
            device.upload(&pageable, &mut dst, 0).unwrap();
            device.synchronize().unwrap();
        });
        report("h2d", "pageable", &mut s);
        let mut s = time(&mut || {
            device.upload_staging(&pinned, BYTES, &mut dst, 0).unwrap();
            device.synchronize().unwrap();
        });
        report("h2d", "pinned", &mut s);
        let mut s = time(&mut || {
            device
                .upload_staging(&combined, BYTES, &mut dst, 0)
                .unwrap();
            device.synchronize().unwrap();
        });
        report("h2d", "pinned_write_combined", &mut s);
        let mut host = vec![0u8; BYTES];
        let mut s = time(&mut || device.download(&dst, 0, &mut host).unwrap());
        report("d2h", "pageable", &mut s);

        // Gathering Atari frames on the device: 256 of 84x84 bytes out of 50,000.
        let (row_bytes, rows, src_rows) = (7056, 256, 50_000);
        let src = device.alloc(src_rows * row_bytes).unwrap();
        let mut staging = device.alloc_staging(rows * 8).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let bytes = encode_pairs(
            (0..rows).map(|j| (rng.random_range(0..src_rows), j)),
            device.staging_mut(&mut staging).unwrap(),
        )
        .unwrap();
        let mut pairs = device.alloc(bytes).unwrap();
        device
            .upload_staging(&staging, bytes, &mut pairs, 0)
            .unwrap();
        let mut batch = device.alloc(rows * row_bytes).unwrap();
        device
            .gather(&src, row_bytes, &pairs, rows, &mut batch)
            .unwrap();
        device.synchronize().unwrap();
        const GATHERS: usize = 1000;
        let start = Instant::now();
        for _ in 0..GATHERS {
            device
                .gather(&src, row_bytes, &pairs, rows, &mut batch)
                .unwrap();
        }
        device.synchronize().unwrap();
        let each = start.elapsed().as_secs_f64() / GATHERS as f64;
        println!(
            "{{\"bench\":\"gather\",\"row_bytes\":{row_bytes},\"rows\":{rows},\
             \"us_per_gather\":{:.2},\"copied_gbps\":{:.2}}}",
            each * 1e6,
            (rows * row_bytes) as f64 / each / 1e9
        );
    }

    /// Name of the variable that makes [`out_of_range_pair_child`] run: `position` or
    /// `slot`, the half of the pair to put out of range.
    const CHILD: &str = "RL_CUDA_OUT_OF_RANGE_CHILD";

    /// Run by [`an_out_of_range_pair_aborts_the_gather`] in a child process (a kernel
    /// fault ends the context for the whole process); does nothing otherwise.
    #[test]
    fn out_of_range_pair_child() {
        let Ok(half) = std::env::var(CHILD) else {
            return;
        };
        let device = CudaDevice::open(0).unwrap();
        let src = device.alloc(4 * 16).unwrap(); // 4 rows
        let mut dst = device.alloc(2 * 16).unwrap(); // 2 slots
        let bad = if half == "position" { (4, 0) } else { (0, 2) };
        let mut bytes = [0u8; 16];
        encode_pairs([(3, 1), bad].into_iter(), &mut bytes).unwrap();
        let mut pairs = device.alloc(16).unwrap();
        device.upload(&bytes, &mut pairs, 0).unwrap();
        device.synchronize().unwrap();
        // Sizes are fine, so the launch is queued; the kernel finds the pair.
        device.gather(&src, 16, &pairs, 2, &mut dst).unwrap();
        let err = device.synchronize().unwrap_err();
        let Error::CudaDriver { code, hint, .. } = &err else {
            panic!("expected a driver error, got {err:?}")
        };
        assert!(hint.contains("gather"), "{err}");
        println!("rl-out-of-range: {half} {code}");
    }

    #[test]
    fn an_out_of_range_pair_aborts_the_gather() {
        if std::env::var_os(CHILD).is_some() {
            return;
        }
        let _gpu = gpu_lock();
        let Some(device) = open_or_skip() else { return };
        drop(device);
        for half in ["position", "slot"] {
            let output = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["gpu::out_of_range_pair_child", "--exact", "--nocapture"])
                .env(CHILD, half)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains(&format!("rl-out-of-range: {half}")),
                "child for an out-of-range {half}: {}\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            for line in stdout.lines().filter(|l| l.starts_with("rl-out-of-range")) {
                println!("{line}");
            }
        }
    }
}
