//! Fuzz libjpeg-turbo behind stoke's wrapper (src/backend/cpu/decode.rs): the whole-image,
//! region and DCT-scaled decodes. Any bytes must give `Ok` or `Err`, never a panic or a memory
//! error (ASan; libFuzzer's -malloc_limit_mb in scripts/fuzz.sh fails an allocation far past
//! what the size guard allows). An `Ok` must keep the promises: the size the header parser
//! reads, an RGB buffer of exactly the decoded region, a region inside the image that contains
//! the one asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoke::backend::cpu::decode::{decode_rgb, decode_rgb_region, decode_rgb_scaled, DecodedImage};

/// The decoded-size guard the target decodes under (4 Mpixel: 12 MiB of RGB).
const MAX_PIXELS: u64 = 1 << 22;

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn check_buffer(out: &DecodedImage) {
    assert!(out.region_w > 0 && out.region_h > 0, "empty region: {out:?}");
    assert!(out.region_x as u64 + out.region_w as u64 <= out.width as u64, "region past the right edge");
    assert!(out.region_y as u64 + out.region_h as u64 <= out.height as u64, "region past the bottom edge");
    assert_eq!(out.rgb.len(), out.region_w as usize * out.region_h as usize * 3, "buffer is not the region's RGB");
}

fuzz_target!(init: stoke::fuzzing::seeds_from_env("jpeg_decode"), |data: &[u8]| {
    // PNG and WebP bytes are routed to their own decoders (their own targets).
    if !data.starts_with(&[0xFF, 0xD8]) {
        return;
    }
    let h = fnv(data);
    let mut full = DecodedImage::default();
    let whole = decode_rgb(data, MAX_PIXELS, &mut full).is_ok();
    if whole {
        check_buffer(&full);
        assert_eq!((full.region_x, full.region_y, full.region_w, full.region_h), (0, 0, full.width, full.height));
        assert!(full.width as u64 * full.height as u64 <= MAX_PIXELS, "decoded past the size guard");
        // The index's header facts (what the sampler draws crops from) say the same size.
        if let Ok(info) = stoke::codec::parse_info(data) {
            assert_eq!((info.width, info.height), (full.width, full.height), "header parser and decoder disagree on the size");
        }
    }
    // A region: inside the image when its size is known, else anywhere (even absurd numbers).
    let (w, hgt) = if whole { (full.width, full.height) } else { (1 + (h >> 48) as u32 % 4096, 1 + (h >> 32) as u32 % 4096) };
    let rw = 1 + (h as u32) % w;
    let rh = 1 + ((h >> 12) as u32) % hgt;
    let rx = ((h >> 24) as u32) % (w - rw + 1);
    let ry = ((h >> 36) as u32) % (hgt - rh + 1);
    let region = if h % 17 == 0 { (u32::MAX - rx, ry, rw.max(2), rh) } else { (rx, ry, rw, rh) };
    let mut part = DecodedImage::default();
    if decode_rgb_region(data, MAX_PIXELS, Some(region), &mut part).is_ok() {
        check_buffer(&part);
        let (x, y, rw, rh) = region;
        let inside = x as u64 + rw as u64 <= part.width as u64 && y as u64 + rh as u64 <= part.height as u64;
        if whole {
            assert_eq!((part.width, part.height), (full.width, full.height), "region decode of another size");
        }
        if inside {
            assert!(part.crop_to(x, y, rw, rh), "decoded region {part:?} does not contain the requested {region:?}");
            // Not asserted here: that the region's pixels are the whole decode's. That holds
            // for intact streams (tests/corpus_decode.rs checks every corpus file), but on a
            // damaged stream libjpeg-turbo's warnings are accepted and its recovery differs
            // between a cropped and a whole decode (the first campaign found a damaged
            // arithmetic-coded progressive file where they differ).
        }
    }
    let denom = [2u32, 4, 8][(h % 3) as usize];
    let mut small = DecodedImage::default();
    if decode_rgb_scaled(data, MAX_PIXELS, denom, &mut small).is_ok() {
        check_buffer(&small);
        if whole {
            // Lossless images do not scale: decoded whole.
            let scaled = (full.width.div_ceil(denom), full.height.div_ceil(denom));
            assert!((small.width, small.height) == scaled || (small.width, small.height) == (full.width, full.height));
        }
    }
});
