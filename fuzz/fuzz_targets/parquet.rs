//! Fuzz the Parquet reader (src/source/parquet) on a file's bytes: its footer, the columns found
//! from the Hugging Face metadata, each row group's image and label column chunks decoded (snappy,
//! zstd). No panic, no allocation past libFuzzer's cap; an `Ok` decodes as many rows as the
//! footer lists for each row group, every row's bytes inside its group's data.
//!
//! One kind of panic is let through: one raised inside the parquet crate (or the `bytes` crate
//! it slices with) while the reader decodes a column chunk, which `read_rows` catches and makes
//! that chunk's error, naming the file, row group and column, as it does for a user (the crate's
//! decoders trust parts of a page stoke cannot check without decoding it: a DELTA page's
//! lengths, a varint's length). Each such place is printed once. Any other panic, one of
//! stoke's or one of the crate's that nothing catches, aborts as libFuzzer's hook makes it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::sync::Mutex;

/// Whether a panic at `file` is inside the parquet or bytes crate's sources.
fn in_the_parquet_crate(file: &str) -> bool {
    file.contains("index.crates.io") && (file.contains("/parquet-") || file.contains("/bytes-"))
}

fn let_the_reader_catch_the_parquet_crates_panics() {
    let abort = std::panic::take_hook();
    let seen = Mutex::new(HashSet::new());
    std::panic::set_hook(Box::new(move |info| match info.location() {
        Some(at) if in_the_parquet_crate(at.file()) => {
            if seen.lock().unwrap_or_else(|e| e.into_inner()).insert((at.file().to_string(), at.line())) {
                eprintln!("parquet fuzz: a panic inside the parquet crate, for the reader to catch: {info}");
            }
        }
        _ => abort(info),
    }));
}

fuzz_target!(
    init: {
        stoke::fuzzing::seeds_from_env("parquet");
        let_the_reader_catch_the_parquet_crates_panics();
    },
    |data: &[u8]| {
        let _ = stoke::fuzzing::parquet_file(data);
    }
);
