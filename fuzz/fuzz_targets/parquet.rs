//! Fuzz the Parquet reader (src/source/parquet) on a file's bytes: its footer, the columns found
//! from the Hugging Face metadata, each row group's image and label column chunks decoded (snappy,
//! zstd). No panic, no allocation past libFuzzer's cap; an `Ok` decodes as many rows as the
//! footer lists for each row group, every row's bytes inside its group's data.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(init: stoke::fuzzing::seeds_from_env("parquet"), |data: &[u8]| {
    let _ = stoke::fuzzing::parquet_file(data);
});
