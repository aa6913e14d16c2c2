//! Tests of the trainers.
