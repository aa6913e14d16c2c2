//! Every public error type is `std::error::Error + Send + Sync + 'static`, so `?` works
//! into `anyhow::Error` and `Box<dyn Error + Send + Sync>` across threads.

fn error_trait<E: std::error::Error + Send + Sync + 'static>() {}

#[test]
fn every_error_type_crosses_threads_and_boxes() {
    // rl-envs and rl-actions report rl-core's errors.
    error_trait::<rl::core::Error>();
    #[cfg(feature = "storage")]
    error_trait::<rl::storage::Error>();
    #[cfg(feature = "nn")]
    error_trait::<rl::nn::Error>();
    #[cfg(feature = "algos")]
    error_trait::<rl::algos::Error>();
    #[cfg(feature = "collect")]
    error_trait::<rl::collect::Error>();
}

/// A policy's error (boxed) converts into `anyhow` and survives a thread boundary.
#[cfg(feature = "collect")]
#[test]
fn a_policy_error_goes_into_anyhow_and_across_threads() {
    let policy_error: rl::collect::PolicyError = "the network diverged".into();
    let handle =
        std::thread::spawn(move || -> anyhow::Result<()> { Err(anyhow::anyhow!(policy_error)) });
    let err = handle.join().expect("the thread ran").unwrap_err();
    assert!(err.to_string().contains("diverged"), "{err}");
}
