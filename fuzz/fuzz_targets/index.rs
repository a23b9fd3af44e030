//! Fuzz the saved-index reader (`.stoke-index`, src/source/index.rs). The target appends the
//! right checksum to the input (a fuzzer cannot find a matching FNV-1a), so the whole format
//! behind it is reached. No panic, no allocation sized by a count the bytes cannot hold; an
//! index that reads, written again, reads back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoke::fuzzing::{index, index_file};

fuzz_target!(init: stoke::fuzzing::seeds_from_env("index"), |data: &[u8]| {
    if let Some(again) = index(data) {
        assert_eq!(index_file(&again).as_ref(), Some(&again), "an index written from a read one does not read back the same");
    }
    // The bytes as a whole file too (checksum included): the checksum's own checks.
    let _ = index_file(data);
});
