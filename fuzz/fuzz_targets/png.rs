//! Fuzz the PNG path (src/codec/png.rs over the `png` crate): header facts and the RGB decode.
//! No panic, no memory error, no allocation past the size guard (libFuzzer's -malloc_limit_mb);
//! an `Ok` decode is `width × height × 3` bytes of the size the header parser reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoke::codec::{parse_info, png, DecodedImage, ImageFormat};

const MAX_PIXELS: u64 = 1 << 22;

fuzz_target!(init: stoke::fuzzing::seeds_from_env("png"), |data: &[u8]| {
    let info = parse_info(data);
    if let Ok(i) = &info {
        assert!(i.width > 0 && i.height > 0 && (1..=4).contains(&i.components));
    }
    let mut out = DecodedImage::default();
    if png::decode_rgb(data, MAX_PIXELS, &mut out).is_ok() {
        assert!(out.width as u64 * out.height as u64 <= MAX_PIXELS, "decoded past the size guard");
        assert_eq!((out.region_x, out.region_y, out.region_w, out.region_h), (0, 0, out.width, out.height));
        assert_eq!(out.rgb.len(), out.width as usize * out.height as usize * 3, "buffer is not width x height RGB");
        let i = info.expect("a PNG that decodes has a header the parser reads");
        assert_eq!((i.format, i.width, i.height), (ImageFormat::Png, out.width, out.height));
    }
});
