//! Fuzz the JPEG header parser: any bytes must give `Ok` or `Err`, never a panic, an overflow
//! or a read past the end (ASan catches those); an `Ok` must be self-consistent; and a
//! `Truncated` answer must be honest (a prefix that ends inside the header).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../src/codec/jpeg.rs"]
#[allow(dead_code, unused_imports)]
mod jpeg;

use jpeg::{parse, HeaderError};

fuzz_target!(init: stoke::fuzzing::seeds_from_env("jpeg_header"), |data: &[u8]| {
    match parse(data) {
        Ok(info) => {
            assert!(info.width > 0 && info.height > 0, "zero dimension accepted: {info:?}");
            assert!(info.components > 0);
            assert!((1..=8).contains(&info.orientation));
            assert!((2..=16).contains(&info.precision));
            // Whatever parsed from a prefix parses the same with more bytes after it.
            let mut longer = data.to_vec();
            longer.extend_from_slice(&[0xFF, 0xD9]);
            assert_eq!(parse(&longer), Ok(info));
        }
        Err(HeaderError::Truncated { at, .. }) => assert!(at <= data.len()),
        Err(HeaderError::Invalid { at, .. }) => assert!(at < data.len()),
        Err(HeaderError::NotJpeg(_) | HeaderError::UnknownFormat(_)) => {}
    }
});
