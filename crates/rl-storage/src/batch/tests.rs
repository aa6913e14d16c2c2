use super::*;
use crate::ram::RamStorage;
use crate::storage::HostStorage;
use proptest::prelude::*;
use rl_core::{Column, DType};

/// A schema with one `u8` column of `width` bytes per row.
fn bytes_schema(width: usize) -> Schema {
    Schema::new([Column::new("x", DType::U8, &[width])]).expect("valid schema")
}

#[test]
fn every_column_block_starts_on_a_cache_line_and_the_plan_counts_whole_lines() {
    let schema = Schema::new([
        Column::new("obs", DType::F32, &[1024]),
        Column::scalar("action", DType::U32),
        Column::new("odd", DType::U8, &[3]),
        Column::scalar("terminated", DType::Bool),
    ])
    .expect("valid schema");
    for rows in [1, 7, 256] {
        let mut batch = Batch::new(&schema, rows).expect("batch");
        let plan = batch.memory_plan();
        for (index, column) in schema.columns().iter().enumerate() {
            let block = batch.column_bytes_mut(index);
            assert_eq!(
                block.as_ptr() as usize % 64,
                0,
                "{} x {rows}",
                column.name()
            );
            assert!(block.len() >= rows * column.row_bytes());
            assert_eq!(block.len() % 64, 0);
            assert!(block.len() < rows * column.row_bytes() + 64);
            assert_eq!(plan.lines()[index].bytes, block.len() as u64);
        }
    }
}

proptest! {
    /// Gathers of any row width (the fixed-size copies, the memcpy path, rows past the
    /// prefetch limit copied in pairs, with or without a tail after their last whole
    /// line, odd and even counts) equal copying each drawn row by hand.
    #[test]
    fn gathers_copy_exactly_the_drawn_rows(
        width in prop_oneof![1usize..80, 250usize..400, 4090usize..4100],
        capacity in 1usize..64,
        draws in proptest::collection::vec(any::<usize>(), 1..40),
        shift in 0usize..3,
    ) {
        let schema = bytes_schema(width);
        let mut storage = RamStorage::new(schema.clone(), capacity, None).expect("storage");
        for (i, byte) in storage.column_mut(0).iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(37).wrapping_add((i / 251) as u8);
        }
        let positions: Vec<usize> = draws.iter().map(|d| d % capacity).collect();
        let rows = positions.len();
        let mut batch = Batch::new(&schema, rows).expect("batch");
        batch.positions[..rows].copy_from_slice(&positions);
        batch.gather_from(&storage, (0, 0), shift, rows);
        batch.set_len(rows);
        let got = batch.column_at::<u8>(0).expect("u8 column");
        let source = storage.column(0);
        for (j, &p) in positions.iter().enumerate() {
            let p = (p + shift) % capacity;
            prop_assert_eq!(&got[j * width..(j + 1) * width], &source[p * width..(p + 1) * width]);
        }
    }
}
