//! Real GPU tests, run on every CI machine.
//!
//! Without an NVIDIA driver they print `skipped: ...` and pass, unless `RL_REQUIRE_GPU=1`
//! is set (GPU runners set it, so a broken driver cannot pass as "skipped"). Without the
//! `cuda` feature only the not-compiled path is checked.

/// Without the feature, asking for a GPU is a typed error that says how to get one, and
/// CUDA is never touched.
#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_feature_cuda_is_not_compiled() {
    use rl_storage::{CudaDevice, Error, cuda_initializations, libcuda_loaded};

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
    use rl_storage::{CudaDevice, Error, cuda_initializations, libcuda_loaded};

    /// Returns normally when the test should be skipped (after saying so), panics when
    /// `RL_REQUIRE_GPU=1` asks for a GPU that is not there.
    fn skip(why: &str) {
        if std::env::var("RL_REQUIRE_GPU").is_ok_and(|v| v == "1") {
            panic!("RL_REQUIRE_GPU=1 but {why}");
        }
        println!("skipped: {why} (set RL_REQUIRE_GPU=1 to fail instead)");
    }

    /// One test, in order: the initialisation counter is process-wide, so parallel tests
    /// opening devices would make its exact counts race.
    #[test]
    fn open_count_memory_and_round_trip() {
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
}
