use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

#[test]
fn sysfs_sizes_parse() {
    assert_eq!(parse_size("32K\n"), Some(32 << 10));
    assert_eq!(parse_size("512K"), Some(512 << 10));
    assert_eq!(parse_size("32768K"), Some(32 << 20));
    assert_eq!(parse_size("1M"), Some(1 << 20));
    assert_eq!(parse_size("4096"), Some(4096));
    assert_eq!(parse_size(""), None);
    assert_eq!(parse_size("K"), None);
    assert_eq!(parse_size("lots"), None);
}

/// A fake sysfs: `index{i}/{level,type,size}` for each `(level, type, size)`.
fn sysfs(entries: &[(&str, &str, &str)]) -> HashMap<String, String> {
    let mut files = HashMap::new();
    for (i, (level, kind, size)) in entries.iter().enumerate() {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        files.insert(format!("{dir}/level"), format!("{level}\n"));
        files.insert(format!("{dir}/type"), format!("{kind}\n"));
        files.insert(format!("{dir}/size"), format!("{size}\n"));
    }
    files
}

#[test]
fn sysfs_caches_of_a_zen3_core() {
    let files = sysfs(&[
        ("1", "Data", "32K"),
        ("1", "Instruction", "32K"),
        ("2", "Unified", "512K"),
        ("3", "Unified", "32768K"),
    ]);
    let caches = from_sysfs(|path| files.get(path).cloned()).unwrap();
    assert_eq!(
        caches,
        Caches {
            l1: 32 << 10,
            l2: 512 << 10,
            l3: 32 << 20
        }
    );
    // The instruction cache is never taken for L1d, whatever its order.
    let files = sysfs(&[("1", "Instruction", "64K"), ("1", "Data", "48K")]);
    let caches = from_sysfs(|path| files.get(path).cloned()).unwrap();
    assert_eq!(caches.l1, 48 << 10);
    assert_eq!(
        caches.l2,
        Caches::FALLBACK.l2,
        "missing L2 takes the fallback"
    );
    assert_eq!(from_sysfs(|_| None), None);
}

#[test]
fn detected_caches_are_plausible() {
    let caches = Caches::detect();
    assert!(caches.l1 >= 16 << 10 && caches.l1 <= 1 << 20, "{caches:?}");
    assert!(
        caches.l2 >= caches.l1 && caches.l3 >= caches.l2,
        "{caches:?}"
    );
}

#[test]
fn blocks_on_zen3_and_on_the_fallback() {
    let zen3 = Caches {
        l1: 32 << 10,
        l2: 512 << 10,
        l3: 32 << 20,
    };
    let b = Blocking::for_caches(zen3, 6, 16);
    assert_eq!((b.kc, b.mc, b.nc), (256, 126, 4096));
    let b = Blocking::for_caches(Caches::FALLBACK, 6, 16);
    assert_eq!((b.kc, b.mc, b.nc), (256, 60, 256));
    // `kc` does not depend on the tile: every kernel splits the sum over `k` alike.
    for (mr, nr) in [(3, 32), (12, 32), (6, 64), (4, 8)] {
        assert_eq!(Blocking::for_caches(zen3, mr, nr).kc, 256);
    }
}

proptest! {
    /// Row and column blocks cover the dimension in blocks of at most the maximum, in
    /// whole strips or panels.
    #[test]
    fn blocks_cover_their_dimension(
        len in 1usize..5000, l1 in 8usize..100, l2 in 64usize..4096, l3 in 256usize..65536,
        tile in prop::sample::select(vec![(6usize, 16usize), (3, 32), (12, 32), (6, 64), (4, 8)]),
    ) {
        let (mr, nr) = tile;
        let caches = Caches { l1: l1 << 10, l2: l2 << 10, l3: l3 << 10 };
        let b = Blocking::for_caches(caches, mr, nr);
        prop_assert!(b.kc >= 128 && b.kc <= 256 && b.kc.is_multiple_of(16));
        prop_assert!(b.mc >= mr && b.mc.is_multiple_of(mr));
        prop_assert!(b.nc >= nr && b.nc.is_multiple_of(nr) && b.nc <= 4096);
        let mc = b.mc_for(len, mr);
        prop_assert!(mc >= 1 && mc <= b.mc && (mc.is_multiple_of(mr) || mc >= len));
        let nc = b.nc_for(len, nr);
        prop_assert!(nc >= 1 && nc <= b.nc && nc.is_multiple_of(nr));
        // Near-equal blocks: no more blocks than the maximum needs.
        prop_assert!(len.div_ceil(mc) <= len.div_ceil(b.mc) + 1);
    }
}
