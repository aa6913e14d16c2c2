use super::*;

#[test]
fn every_supported_path_measures_a_positive_rate() {
    for isa in Isa::supported() {
        let peak = fma_peak(isa, 3, Duration::from_millis(1));
        assert_eq!(peak.isa, isa);
        assert!(peak.gflops.is_finite() && peak.gflops > 0.1, "{peak:?}");
    }
}

#[test]
fn lanes_follow_the_vector_width() {
    assert_eq!(isa_lanes(Isa::Avx512), 2 * isa_lanes(Isa::Avx2));
    assert_eq!(isa_lanes(Isa::Avx2), 2 * isa_lanes(Isa::Scalar));
}
