//! Fuzz the two lossless rewrites the readers make of untrusted JPEGs (src/reader/transcode.rs,
//! src/codec/jpeg.rs): `to_baseline` (progressive and arithmetic-coded files rewritten as
//! baseline by libjpeg-turbo's transform, `transcode_progressive`) and `declare_gray_1x1` (a gray
//! file's sampling byte, `gpu_engine_gray`). Any bytes must give a result, never a panic or a
//! memory error. A rewrite must keep the promises: a baseline file of the same size, within the
//! size guard, and — where libjpeg-turbo decodes both without a fatal error — the stored file's
//! pixels; `declare_gray_1x1` changes one byte of a one-component file at most, and its pixels
//! never.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoke::backend::cpu::decode::{decode_rgb, to_baseline, DecodedImage};
use stoke::codec::jpeg::{declare_gray_1x1, parse, Coding};

/// The decoded-size guard the target works under (4 Mpixel: 12 MiB of RGB).
const MAX_PIXELS: u64 = 1 << 22;

fn same_pixels(a: &[u8], b: &[u8], what: &str) {
    let (mut x, mut y) = (DecodedImage::default(), DecodedImage::default());
    if decode_rgb(a, MAX_PIXELS, &mut x).is_ok() && decode_rgb(b, MAX_PIXELS, &mut y).is_ok() {
        assert_eq!((x.width, x.height), (y.width, y.height), "{what}: another size");
        assert!(x.rgb == y.rgb, "{what}: other pixels");
    }
}

fuzz_target!(init: stoke::fuzzing::seeds_from_env("jpeg_rewrite"), |data: &[u8]| {
    if !data.starts_with(&[0xFF, 0xD8]) {
        return;
    }
    if let Some(t) = to_baseline(data, MAX_PIXELS) {
        let (before, after) = (parse(data).expect("rewritten, so it parsed"), parse(&t).expect("a rewrite parses"));
        assert_eq!(after.coding, Coding::Baseline, "a rewrite is baseline");
        assert_eq!((after.width, after.height, after.components), (before.width, before.height, before.components));
        assert!(before.pixels() <= MAX_PIXELS, "rewritten past the size guard");
        same_pixels(data, &t, "to_baseline");
    }
    let mut b = data.to_vec();
    if declare_gray_1x1(&mut b) {
        let info = parse(data).expect("declared, so it parsed");
        assert_eq!(info.components, 1, "declared a file of {} components", info.components);
        assert_eq!(b.iter().zip(data).filter(|(x, y)| x != y).count(), 1, "more than one byte changed");
        assert_eq!(parse(&b).expect("still parses").sampling[0], (1, 1));
        same_pixels(data, &b, "declare_gray_1x1");
    } else {
        assert!(b == data, "changed without saying so");
    }
});
