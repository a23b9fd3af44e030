//! CPU decode on JPEGs the tests encode themselves (jpeg-encoder, an independent encoder),
//! including damaged and hostile headers made by patching those bytes.

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use stoke::backend::cpu::decode::{decode_rgb, decode_rgb_region, DecodeErrorKind, DecodedImage};

/// Smooth deterministic picture (smooth so that JPEG loss stays small).
fn picture(w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            v.push((x * 255 / (w - 1)) as u8);
            v.push((y * 255 / (h - 1)) as u8);
            v.push(((x + y) * 255 / (w + h - 2)) as u8);
        }
    }
    v
}

fn encode(rgb: &[u8], w: u16, h: u16, color: ColorType, sampling: SamplingFactor, progressive: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = Encoder::new(&mut out, 95);
    e.set_sampling_factor(sampling);
    e.set_progressive(progressive);
    e.encode(rgb, w, h, color).unwrap();
    out
}

fn mean_abs(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y) as f64).sum::<f64>() / a.len() as f64
}

/// Offset of the SOF0/SOF2 marker's precision byte.
fn sof_offset(jpeg: &[u8]) -> usize {
    (0..jpeg.len() - 1).find(|&i| jpeg[i] == 0xFF && (jpeg[i + 1] == 0xC0 || jpeg[i + 1] == 0xC2)).unwrap() + 4
}

#[test]
fn baseline_progressive_and_subsampled_images_decode_close_to_the_source() {
    let (w, h) = (67u16, 45u16);
    let src = picture(w as usize, h as usize);
    let mut out = DecodedImage::default();
    for sampling in [SamplingFactor::F_1_1, SamplingFactor::F_2_1, SamplingFactor::F_2_2, SamplingFactor::F_1_2] {
        for progressive in [false, true] {
            let jpeg = encode(&src, w, h, ColorType::Rgb, sampling, progressive);
            decode_rgb(&jpeg, 1 << 20, &mut out).unwrap();
            assert_eq!((out.width, out.height, out.region_w, out.region_h), (67, 45, 67, 45));
            let d = mean_abs(&out.rgb, &src);
            assert!(d < 2.0, "{sampling:?} progressive={progressive}: mean abs diff {d}");
        }
    }
}

#[test]
fn grayscale_is_replicated_to_three_channels() {
    let (w, h) = (20u16, 12u16);
    let gray: Vec<u8> = (0..w as usize * h as usize).map(|i| (i * 255 / (w as usize * h as usize)) as u8).collect();
    let jpeg = encode(&gray, w, h, ColorType::Luma, SamplingFactor::F_1_1, false);
    let mut out = DecodedImage::default();
    decode_rgb(&jpeg, 1 << 20, &mut out).unwrap();
    assert_eq!(out.rgb.len(), 20 * 12 * 3);
    for (i, px) in out.rgb.chunks_exact(3).enumerate() {
        assert!(px[0] == px[1] && px[1] == px[2], "pixel {i}: {px:?}");
        assert!(px[0].abs_diff(gray[i]) <= 3, "pixel {i}: {} vs {}", px[0], gray[i]);
    }
}

#[test]
fn cmyk_is_converted_to_rgb() {
    // Plain (non-inverted) CMYK with K = 0 and C = 255 − R etc. is the RGB picture.
    let (w, h) = (16u16, 16u16);
    let rgb = picture(w as usize, h as usize);
    let cmyk: Vec<u8> = rgb.chunks_exact(3).flat_map(|p| [255 - p[0], 255 - p[1], 255 - p[2], 0]).collect();
    let jpeg = encode(&cmyk, w, h, ColorType::Cmyk, SamplingFactor::F_1_1, false);
    let mut out = DecodedImage::default();
    decode_rgb(&jpeg, 1 << 20, &mut out).unwrap();
    assert_eq!(out.rgb.len(), rgb.len());
    // jpeg-encoder writes an Adobe marker with inverted CMYK; either way the picture must come
    // back as RGB within JPEG loss, not as its negative.
    let d = mean_abs(&out.rgb, &rgb);
    assert!(d < 4.0, "mean abs diff {d}");
}

#[test]
fn the_size_guard_fires_from_the_header_before_allocating() {
    let src = picture(16, 16);
    let mut jpeg = encode(&src, 16, 16, ColorType::Rgb, SamplingFactor::F_2_2, false);
    let o = sof_offset(&jpeg);
    // precision, height (2 bytes), width (2 bytes): claim 64250 x 64250.
    jpeg[o + 1..o + 3].copy_from_slice(&64250u16.to_be_bytes());
    jpeg[o + 3..o + 5].copy_from_slice(&64250u16.to_be_bytes());
    let mut out = DecodedImage::default();
    let e = decode_rgb(&jpeg, 100_000_000, &mut out).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::TooLarge);
    assert!(e.message.contains("64250x64250") && e.message.contains("100000000"), "{e}");
    assert_eq!(out.rgb.capacity(), 0, "nothing may be allocated for a rejected image");
    // The same guard, configured lower, rejects an ordinary image.
    let ok = encode(&src, 16, 16, ColorType::Rgb, SamplingFactor::F_2_2, false);
    assert_eq!(decode_rgb(&ok, 255, &mut out).unwrap_err().kind, DecodeErrorKind::TooLarge);
    decode_rgb(&ok, 256, &mut out).unwrap();
}

#[test]
fn twelve_bit_precision_is_unsupported_with_the_reason() {
    let src = picture(16, 16);
    let mut jpeg = encode(&src, 16, 16, ColorType::Rgb, SamplingFactor::F_1_1, false);
    let o = sof_offset(&jpeg);
    jpeg[o] = 12;
    jpeg[o - 3] = 0xC1; // SOF1, extended: the only baseline-like frame 12-bit may use
    let e = decode_rgb(&jpeg, 1 << 20, &mut DecodedImage::default()).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("12-bit"), "{e}");
}

#[test]
fn truncated_and_garbage_streams_are_errors_not_panics() {
    let src = picture(64, 48);
    let jpeg = encode(&src, 64, 48, ColorType::Rgb, SamplingFactor::F_2_2, false);
    let mut out = DecodedImage::default();
    let e = decode_rgb(&jpeg[..jpeg.len() * 6 / 10], 1 << 20, &mut out).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::Truncated, "{e}");
    for cut in [2usize, 3, 10, 50, 100] {
        assert!(decode_rgb(&jpeg[..cut], 1 << 20, &mut out).is_err(), "cut at {cut}");
        // The decoder keeps no state from one image to the next: a good image first.
        decode_rgb(&jpeg, 1 << 20, &mut out).unwrap();
        assert!(decode_rgb(&jpeg[..cut], 1 << 20, &mut out).is_err(), "cut at {cut} after a good image");
    }
    let e = decode_rgb(b"GIF89a", 1 << 20, &mut out).unwrap_err();
    assert_eq!(e.kind, DecodeErrorKind::UnknownFormat);
    // Every single-byte corruption of the header region: an error or an image, never a panic.
    for i in 2..200.min(jpeg.len()) {
        let mut bad = jpeg.clone();
        bad[i] ^= 0xA5;
        let _ = decode_rgb(&bad, 1 << 20, &mut out);
    }
}

#[test]
fn region_decode_matches_the_full_decode() {
    let (w, h) = (97u16, 75u16);
    // Sharp colour edges every few pixels, so that chroma upsampling at a region's edge
    // would show if it used different neighbours than the full decode.
    let src: Vec<u8> = picture(w as usize, h as usize)
        .chunks_exact(3)
        .enumerate()
        .flat_map(|(i, p)| {
            let (x, y) = (i % w as usize, i / w as usize);
            if (x / 3 + y / 2) % 2 == 0 {
                [p[0], 255 - p[1], p[2] / 2]
            } else {
                [255 - p[0], p[1], 255 - p[2]]
            }
        })
        .collect();
    let mut full = DecodedImage::default();
    let mut part = DecodedImage::default();
    for (sampling, progressive) in [(SamplingFactor::F_2_2, false), (SamplingFactor::F_1_1, true), (SamplingFactor::F_2_1, false)] {
        let jpeg = encode(&src, w, h, ColorType::Rgb, sampling, progressive);
        // The iMCU is 8 pixels times the largest horizontal sampling factor.
        let info = stoke::codec::jpeg::parse(&jpeg).unwrap();
        let mcu_width = 8 * info.sampling.iter().map(|s| s.0 as u32).max().unwrap();
        decode_rgb(&jpeg, 1 << 20, &mut full).unwrap();
        // Includes regions whose edges fall on iMCU boundaries (x = 16, right edge 48, y = 16).
        for (x, y, cw, ch) in [(0u32, 0u32, 97u32, 75u32), (21, 13, 40, 30), (50, 40, 47, 35), (3, 70, 10, 5), (16, 16, 32, 16)] {
            decode_rgb_region(&jpeg, 1 << 20, Some((x, y, cw, ch)), &mut part).unwrap();
            assert_eq!(part.region_x % mcu_width, 0);
            assert!(part.region_x <= x && part.region_x + part.region_w >= x + cw);
            assert!(part.region_y <= y && part.region_y + part.region_h >= y + ch);
            let mut worst = 0u8;
            for yy in y..y + ch {
                for xx in x..x + cw {
                    for c in 0..3 {
                        let a = full.rgb[((yy * 97 + xx) * 3 + c) as usize];
                        let b = part.rgb[(((yy - part.region_y) * part.region_w + xx - part.region_x) * 3 + c) as usize];
                        worst = worst.max(a.abs_diff(b));
                    }
                }
            }
            assert_eq!(worst, 0, "{sampling:?} progressive={progressive} region ({x},{y},{cw},{ch})");
        }
    }
}

#[test]
fn scaled_decoding_gives_ceil_sizes_and_refuses_other_factors() {
    let src = picture(67, 45);
    let jpeg = encode(&src, 67, 45, ColorType::Rgb, SamplingFactor::F_2_2, false);
    let mut out = DecodedImage::default();
    for (d, w, h) in [(1u32, 67u32, 45u32), (2, 34, 23), (4, 17, 12), (8, 9, 6)] {
        stoke::backend::cpu::decode::decode_rgb_scaled(&jpeg, 1 << 20, d, &mut out).unwrap();
        assert_eq!((out.width, out.height, out.region_w, out.region_h, out.rgb.len()), (w, h, w, h, (w * h * 3) as usize));
        // A smooth picture reduced is still the picture: compare with a box-average of the source.
        let (mut sum, mut n) = (0f64, 0f64);
        for y in 0..h as usize {
            for x in 0..w as usize {
                let (sx, sy) = (((x * d as usize) + d as usize / 2).min(66), ((y * d as usize) + d as usize / 2).min(44));
                sum += (out.rgb[(y * w as usize + x) * 3] as f64 - src[(sy * 67 + sx) * 3] as f64).abs();
                n += 1.0;
            }
        }
        assert!(sum / n < 6.0, "1/{d}: mean abs diff {} against the source", sum / n);
    }
    let e = stoke::backend::cpu::decode::decode_rgb_scaled(&jpeg, 1 << 20, 3, &mut out).unwrap_err();
    assert!(e.message.contains("1/3"), "{e}");
    // The next full decode is not scaled (the handle is reused).
    decode_rgb(&jpeg, 1 << 20, &mut out).unwrap();
    assert_eq!((out.width, out.height), (67, 45));
}

/// A region whose right or bottom edge is past 2^32 lies outside the image: decoded whole, as
/// any region outside it is. The sum `x + w` used to overflow: a panic in debug builds, and in
/// release a wrapped sum that passed the inside check and made a crop region libjpeg-turbo
/// refused (found by fuzz/fuzz_targets/jpeg_decode.rs).
#[test]
fn a_region_whose_edge_overflows_u32_is_decoded_whole() {
    let (w, h) = (40u16, 24u16);
    let jpeg = encode(&picture(w as usize, h as usize), w, h, ColorType::Rgb, SamplingFactor::F_2_2, false);
    let mut full = DecodedImage::default();
    decode_rgb(&jpeg, 1 << 20, &mut full).unwrap();
    let mut part = DecodedImage::default();
    for region in [(u32::MAX - 5, 0, 10, 4), (0, u32::MAX - 1, 8, 8), (u32::MAX, u32::MAX, u32::MAX, u32::MAX)] {
        decode_rgb_region(&jpeg, 1 << 20, Some(region), &mut part).unwrap_or_else(|e| panic!("{region:?}: {e}"));
        assert_eq!((part.region_x, part.region_y, part.region_w, part.region_h), (0, 0, w as u32, h as u32), "{region:?}");
        assert_eq!(part.rgb, full.rgb, "{region:?}");
    }
}

/// `bytes` without its segments of marker `ff m` (DHT c4, DQT db).
fn without_segments(bytes: &[u8], m: u8) -> Vec<u8> {
    let mut out = bytes[..2].to_vec();
    let mut i = 2;
    while bytes[i + 1] != 0xDA {
        let len = 2 + u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize;
        if bytes[i + 1] != m {
            out.extend_from_slice(&bytes[i..i + len]);
        }
        i += len;
    }
    out.extend_from_slice(&bytes[i..]);
    out
}

/// A file that does not define its own tables — a Motion-JPEG frame without its DHT (decoders
/// use the standard tables then), a damaged file without its DQT — decodes the same whatever
/// the thread decoded before: libjpeg-turbo keeps the tables of earlier images in its handle,
/// which gave such a file the previous image's Huffman tables (garbage, or an error) after an
/// image with optimized ones; the same bytes must come whatever the thread count (contract 1).
#[test]
fn an_image_without_its_own_tables_decodes_the_same_after_any_other() {
    let (w, h) = (64u16, 48u16);
    let rgb = picture(w as usize, h as usize);
    let mut optimized = Vec::new();
    let mut e = Encoder::new(&mut optimized, 90);
    e.set_optimized_huffman_tables(true);
    e.encode(&rgb, w, h, ColorType::Rgb).unwrap();
    let standard = encode(&rgb, w, h, ColorType::Rgb, SamplingFactor::F_2_2, false);
    let mjpeg = without_segments(&standard, 0xC4);
    let no_dqt = without_segments(&standard, 0xDB);
    assert!(mjpeg.len() < standard.len() && no_dqt.len() < standard.len());
    let decode = |before: Option<&[u8]>, b: &[u8]| {
        let (before, b) = (before.map(<[u8]>::to_vec), b.to_vec());
        // A thread of its own: its decoder has seen `before` only.
        std::thread::spawn(move || {
            let mut out = DecodedImage::default();
            if let Some(x) = before {
                decode_rgb(&x, 1 << 20, &mut out).unwrap();
            }
            decode_rgb(&b, 1 << 20, &mut out).map(|()| out.rgb)
        })
        .join()
        .unwrap()
    };
    let want = decode(None, &standard).unwrap();
    assert_eq!(decode(None, &mjpeg).unwrap(), want, "the standard tables, on a fresh decoder");
    assert_eq!(decode(Some(&optimized), &mjpeg).unwrap(), want, "after an image with optimized tables");
    let e = decode(None, &no_dqt).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("quantization table"), "{e}");
    let e = decode(Some(&standard), &no_dqt).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("quantization table"), "after an image that defined it: {e}");
}
