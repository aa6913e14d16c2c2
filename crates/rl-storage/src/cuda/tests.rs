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

/// `ptxas` is not available where this crate is built, so the hand-written PTX gets a
/// structural check here: per entry, the parameters the host passes, declared and
/// defined-before-use registers, branch targets, statement syntax, and the copy width
/// the host expects. (The driver compiles it for real in `tests/cuda.rs`.)
#[cfg(feature = "cuda")]
#[test]
fn gather_ptx_is_well_formed() {
    use std::collections::{HashMap, HashSet};

    let ptx = driver::GATHER_PTX.to_str().unwrap();
    assert!(ptx.is_ascii());
    assert!(ptx.starts_with(".version 7.0\n.target sm_52\n.address_size 64\n"));
    let entries: Vec<&str> = ptx.split(".visible .entry ").skip(1).collect();
    assert_eq!(entries.len(), driver::GATHER_ENTRIES.len());
    let mut widths = Vec::new();
    for ((name, width), entry) in driver::GATHER_ENTRIES.iter().zip(&entries) {
        let name = name.to_str().unwrap();
        assert!(entry.starts_with(&format!("{name}(")), "{entry}");
        widths.push(*width);
        let (head, body) = entry.split_once("\n{\n").unwrap();
        let body = body.trim_end().strip_suffix('}').unwrap();
        assert!(!body.contains(".entry"), "one entry per body");

        let params: Vec<&str> = head
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".param .u64 "))
            .map(|p| p.trim_end_matches(','))
            .collect();
        assert_eq!(params.len(), driver::GATHER_PARAMS, "{name}");
        let expected = ["src", "pairs", "dst", "row_bytes", "src_rows", "dst_rows"];
        for (param, suffix) in params.iter().zip(expected) {
            assert_eq!(*param, format!("{name}_{suffix}"));
        }

        let lines: Vec<&str> = body
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let labels: HashSet<&str> = lines.iter().filter_map(|l| l.strip_suffix(':')).collect();
        let mut declared: HashMap<String, usize> = HashMap::new();
        let mut defined: HashSet<String> = HashSet::new();
        let mut loaded_params = HashSet::new();
        // `%name<digits>` registers of a text.
        let registers = |text: &str| -> Vec<(String, usize)> {
            let mut out = Vec::new();
            for piece in text.split('%').skip(1) {
                let letters: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase())
                    .collect();
                let digits: String = piece[letters.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if digits.is_empty() {
                    let special = ["ctaid.x", "tid.x", "ntid.x"];
                    assert!(special.iter().any(|s| piece.starts_with(s)), "%{piece}");
                } else {
                    out.push((format!("%{letters}{digits}"), digits.parse().unwrap()));
                    let _ = &letters;
                }
            }
            out
        };
        for line in &lines {
            if labels.contains(line.trim_end_matches(':')) && line.ends_with(':') {
                continue;
            }
            let statement = line
                .strip_suffix(';')
                .unwrap_or_else(|| panic!("{name}: `{line}` does not end with `;`"));
            if let Some(declaration) = statement.strip_prefix(".reg ") {
                let (_, register) = declaration.split_once(" %").unwrap();
                let (prefix, count) = register.strip_suffix('>').unwrap().split_once('<').unwrap();
                declared.insert(prefix.to_owned(), count.parse().unwrap());
                continue;
            }
            let (guard, instruction) = match statement.strip_prefix('@') {
                Some(rest) => rest.split_once(' ').map(|(g, i)| (Some(g), i)).unwrap(),
                None => (None, statement),
            };
            let (opcode, operands) = instruction.split_once(' ').unwrap_or((instruction, ""));
            // Destinations: none for stores, branches, `ret` and `trap`; the braced or
            // plain first operand otherwise.
            let (defs, uses) =
                if opcode.starts_with("st.") || matches!(opcode, "bra" | "ret" | "trap") {
                    ("", operands)
                } else if operands.starts_with('{') {
                    operands.split_at(operands.find('}').unwrap() + 1)
                } else {
                    operands.split_at(operands.find(',').unwrap())
                };
            for (register, index) in registers(guard.unwrap_or(""))
                .into_iter()
                .chain(registers(uses))
            {
                assert!(
                    defined.contains(&register),
                    "{name}: {register} read before written in `{line}`"
                );
                let prefix = register
                    .trim_start_matches('%')
                    .trim_end_matches(|c: char| c.is_ascii_digit());
                assert!(index < declared[prefix], "{name}: {register} not declared");
            }
            for (register, index) in registers(defs) {
                let prefix = register
                    .trim_start_matches('%')
                    .trim_end_matches(|c: char| c.is_ascii_digit());
                assert!(index < declared[prefix], "{name}: {register} not declared");
                defined.insert(register);
            }
            if opcode == "bra" {
                assert!(labels.contains(operands), "{name}: no label `{operands}`");
            }
            if opcode == "ld.param.u64" {
                let param = operands.split_once('[').unwrap().1.trim_end_matches(']');
                assert!(params.contains(&param), "{name}: unknown parameter {param}");
                loaded_params.insert(param);
            }
            let memory_width = match opcode {
                "ld.global.v4.u32" | "st.global.v4.u32" => Some(16),
                "ld.global.u8" | "st.global.u8" => Some(1),
                _ => None,
            };
            if let Some(bytes) = memory_width {
                assert_eq!(bytes, *width, "{name}: `{line}`");
            }
        }
        assert_eq!(
            loaded_params.len(),
            driver::GATHER_PARAMS,
            "{name}: every parameter is read"
        );
        for step in ["mul.wide.u32 %rd10, %r4, ", "mul.wide.u32 %rd11, %r5, "] {
            assert!(
                body.contains(&format!("{step}{width};")),
                "{name}: stride of {width} bytes"
            );
        }
        assert!(
            body.contains("@%p3 trap;"),
            "{name}: out-of-range pairs trap"
        );
        assert!(body.contains(&format!(
            "st.global.{}",
            match width {
                16 => "v4.u32",
                4 => "u32",
                _ => "u8",
            }
        )));
    }
    assert_eq!(
        widths,
        [16, 4, 1],
        "widest first, and the last fits every row"
    );
}

#[cfg(feature = "cuda")]
#[test]
fn gather_picks_the_widest_aligned_kernel() {
    use driver::gather_entry;
    // v4 needs the row size and both bases 16-aligned.
    assert_eq!(gather_entry(7056, 0x7f00_0000_0000, 0x7f00_0010_0000), 0);
    assert_eq!(gather_entry(28_224, 256, 512), 0);
    assert_eq!(gather_entry(16, 256, 512), 0);
    assert_eq!(gather_entry(16, 256, 516), 1, "destination only 4-aligned");
    assert_eq!(gather_entry(4, 256, 512), 1);
    assert_eq!(gather_entry(12, 256, 512), 1);
    assert_eq!(gather_entry(3, 256, 512), 2);
    assert_eq!(gather_entry(1, 256, 512), 2);
    assert_eq!(gather_entry(16, 257, 512), 2, "source not aligned at all");
}

#[cfg(feature = "cuda")]
#[test]
fn gather_sizes_are_checked_on_the_host() {
    use driver::{GatherLaunch, plan_gather};
    let launch = plan_gather(7056, 32, 32 * 8, 100 * 7056 + 5, 32 * 7056).unwrap();
    assert_eq!(
        launch,
        Some(GatherLaunch {
            blocks: 32,
            row_bytes: 7056,
            src_rows: 100,
            dst_rows: 32,
        })
    );
    // Nothing to copy: no launch (a grid of zero blocks is a driver error).
    assert_eq!(plan_gather(8, 0, 0, 0, 0).unwrap(), None);
    assert_eq!(plan_gather(0, 3, 24, 0, 0).unwrap(), None);
    // Too few pairs, rows that fit neither buffer, overflow.
    let message = |r: Result<Option<GatherLaunch>>| r.unwrap_err().to_string();
    assert!(message(plan_gather(8, 4, 31, 64, 64)).contains("gather pairs"));
    assert!(message(plan_gather(0, 4, 31, 64, 64)).contains("gather pairs"));
    assert!(message(plan_gather(65, 1, 8, 64, 65)).contains("gather source"));
    assert!(message(plan_gather(65, 1, 8, 65, 64)).contains("gather destination"));
    assert!(plan_gather(1, usize::MAX, usize::MAX, 1, 1).is_err());
    let too_many = 1usize << 31;
    assert!(message(plan_gather(1, too_many, too_many * 8, 1, 1)).contains("2^31 - 1"));
    assert_eq!(
        plan_gather(1, too_many - 1, (too_many - 1) * 8, 1, 1)
            .unwrap()
            .unwrap()
            .blocks,
        i32::MAX as u32
    );
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
