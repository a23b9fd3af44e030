//! PNG → RGB with the `png` crate, as Pillow's `convert('RGB')` gives it: palette and low bit
//! depths expanded, alpha (and `tRNS`) dropped, gray replicated; 16-bit samples reduced to
//! their high byte, except 16-bit grayscale, which Pillow opens as `I;16` and clips to 255.
//! The decoded-size guard is checked from the IHDR before anything is allocated.

use super::jpeg::HeaderError;
use super::{DecodeError, DecodeErrorKind, DecodedImage, ImageFormat, ImageInfo};
use png::{BitDepth, ColorType, Transformations};

/// Width and height from the IHDR (the first chunk, at a fixed place after the signature).
pub fn dimensions(bytes: &[u8]) -> Result<(u32, u32), DecodeError> {
    if bytes.len() < 24 {
        return Err(DecodeError::new(
            DecodeErrorKind::Truncated,
            format!("png: the file ends after {} bytes, inside the header", bytes.len()),
        ));
    }
    if &bytes[12..16] != b"IHDR" {
        return Err(DecodeError::new(DecodeErrorKind::Corrupt, "png: the first chunk is not IHDR"));
    }
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    Ok((w, h))
}

/// The header facts from the IHDR: size and stored components.
pub fn parse_info(bytes: &[u8]) -> Result<ImageInfo, HeaderError> {
    if bytes.len() < 26 {
        return Err(HeaderError::Truncated { at: bytes.len(), context: "png IHDR" });
    }
    if &bytes[12..16] != b"IHDR" {
        return Err(HeaderError::Invalid { at: 12, message: "png: the first chunk is not IHDR".into() });
    }
    let (width, height) = dimensions(bytes).map_err(|e| HeaderError::Invalid { at: 16, message: e.message })?;
    if width == 0 || height == 0 {
        return Err(HeaderError::Invalid { at: 16, message: format!("png: {width}x{height} image") });
    }
    let components = match bytes[25] {
        0 => 1,
        2 | 3 => 3,
        4 => 2,
        6 => 4,
        t => return Err(HeaderError::Invalid { at: 25, message: format!("png: colour type {t} is not one of 0, 2, 3, 4, 6") }),
    };
    Ok(ImageInfo { format: ImageFormat::Png, width, height, components, orientation: 1, jpeg: None })
}

/// Decode the whole PNG in `bytes` to RGB into `out` (buffers reused; the region is the
/// whole image).
pub fn decode_rgb(bytes: &[u8], max_pixels: u64, out: &mut DecodedImage) -> Result<(), DecodeError> {
    let (w, h) = dimensions(bytes)?;
    let pixels = w as u64 * h as u64;
    if pixels > max_pixels {
        return Err(DecodeError::new(
            DecodeErrorKind::TooLarge,
            format!("the header announces {w}x{h} = {pixels} pixels, over the decoded-size guard of {max_pixels} pixels"),
        ));
    }
    let err = |e: png::DecodingError| {
        let kind = match &e {
            png::DecodingError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => DecodeErrorKind::Truncated,
            png::DecodingError::LimitsExceeded => DecodeErrorKind::TooLarge,
            png::DecodingError::Parameter(_) => DecodeErrorKind::Unsupported,
            _ => DecodeErrorKind::Corrupt,
        };
        DecodeError::new(kind, format!("png: {e}"))
    };
    // The guard above bounds the image; the crate's own allocation limit must not refuse less.
    let limit = (pixels as usize).saturating_mul(8).saturating_add(1 << 20);
    let mut dec = png::Decoder::new_with_limits(std::io::Cursor::new(bytes), png::Limits { bytes: limit });
    dec.set_transformations(Transformations::EXPAND);
    let mut reader = dec.read_info().map_err(err)?;
    // An indexed image's palette that is not whole RGB entries (or more than 256 of them) is
    // corrupt (the PNG spec's PLTE; libpng refuses it for a palette image too); png 0.18
    // expands it anyway and indexes past its end (a panic: fuzz/regressions/png), so it is
    // refused here, before the crate reads a row. (A suggested palette beside RGB samples is
    // never expanded: libpng ignores a bad one, and so does this.)
    if reader.info().color_type == ColorType::Indexed {
        if let Some(p) = reader.info().palette.as_deref().filter(|p| p.len() % 3 != 0 || p.len() > 3 * 256) {
            return Err(DecodeError::new(
                DecodeErrorKind::Corrupt,
                format!("png: a PLTE chunk of {} bytes, not whole RGB entries of 3 bytes (at most 256)", p.len()),
            ));
        }
    }
    let source = reader.info().color_type;
    let (color, depth) = reader.output_color_type();
    let size =
        reader.output_buffer_size().ok_or_else(|| DecodeError::new(DecodeErrorKind::TooLarge, "png: the image does not fit in memory"))?;
    let mut buf = vec![0u8; size];
    let frame = reader.next_frame(&mut buf).map_err(err)?;
    let (fw, fh) = (frame.width, frame.height);
    let channels = match color {
        ColorType::Grayscale => 1,
        ColorType::GrayscaleAlpha => 2,
        ColorType::Rgb => 3,
        ColorType::Rgba => 4,
        ColorType::Indexed => return Err(DecodeError::new(DecodeErrorKind::Unsupported, "png: palette left unexpanded")),
    };
    let wide = depth == BitDepth::Sixteen;
    if !wide && depth != BitDepth::Eight {
        return Err(DecodeError::new(DecodeErrorKind::Unsupported, format!("png: {depth:?}-bit samples left unexpanded")));
    }
    let bps = if wide { 2 } else { 1 };
    let clip_gray16 = wide && source == ColorType::Grayscale;
    let sample = |s: &[u8]| -> u8 {
        if !wide {
            s[0]
        } else if clip_gray16 {
            u16::from_be_bytes([s[0], s[1]]).min(255) as u8
        } else {
            s[0]
        }
    };
    out.set_whole(fw, fh);
    out.rgb.clear();
    out.rgb.reserve(fw as usize * fh as usize * 3);
    let line = frame.line_size;
    for row in buf.chunks_exact(line).take(fh as usize) {
        for px in row[..fw as usize * channels * bps].chunks_exact(channels * bps) {
            if channels < 3 {
                let g = sample(px);
                out.rgb.extend_from_slice(&[g, g, g]);
            } else {
                out.rgb.extend_from_slice(&[sample(px), sample(&px[bps..]), sample(&px[2 * bps..])]);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encode `data` (rows of samples as the PNG stores them) with the `png` crate.
    fn encode(w: u32, h: u32, color: ColorType, depth: BitDepth, data: &[u8], palette: Option<(&[u8], &[u8])>) -> Vec<u8> {
        let mut v = Vec::new();
        {
            let mut e = png::Encoder::new(&mut v, w, h);
            e.set_color(color);
            e.set_depth(depth);
            if let Some((pal, trns)) = palette {
                e.set_palette(pal.to_vec());
                if !trns.is_empty() {
                    e.set_trns(trns.to_vec());
                }
            }
            let mut wr = e.write_header().unwrap();
            wr.write_image_data(data).unwrap();
        }
        v
    }

    fn decode(bytes: &[u8]) -> DecodedImage {
        let mut out = DecodedImage::default();
        decode_rgb(bytes, 1 << 24, &mut out).unwrap();
        assert_eq!((out.region_w, out.region_h, out.region_x, out.region_y), (out.width, out.height, 0, 0));
        out
    }

    /// Deterministic test bytes.
    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8).collect()
    }

    #[test]
    fn eight_bit_kinds_convert_as_pillow_does() {
        let (w, h) = (7u32, 5u32);
        let n = (w * h) as usize;
        // RGB: as stored.
        let rgb = bytes(n * 3, 1);
        assert_eq!(decode(&encode(w, h, ColorType::Rgb, BitDepth::Eight, &rgb, None)).rgb, rgb);
        // RGBA: alpha dropped.
        let rgba = bytes(n * 4, 2);
        let want: Vec<u8> = rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
        assert_eq!(decode(&encode(w, h, ColorType::Rgba, BitDepth::Eight, &rgba, None)).rgb, want);
        // Gray: replicated.
        let g = bytes(n, 3);
        let want: Vec<u8> = g.iter().flat_map(|&v| [v, v, v]).collect();
        assert_eq!(decode(&encode(w, h, ColorType::Grayscale, BitDepth::Eight, &g, None)).rgb, want);
        // Gray + alpha: alpha dropped, gray replicated.
        let ga = bytes(n * 2, 4);
        let want: Vec<u8> = ga.chunks(2).flat_map(|p| [p[0], p[0], p[0]]).collect();
        assert_eq!(decode(&encode(w, h, ColorType::GrayscaleAlpha, BitDepth::Eight, &ga, None)).rgb, want);
    }

    #[test]
    fn palettes_and_low_bit_depths_expand_and_transparency_is_dropped() {
        let (w, h) = (9u32, 3u32);
        let pal = bytes(16 * 3, 5);
        let trns = [0u8, 10, 200];
        // 4-bit indices, two per byte, rows padded to a whole byte.
        let stride = (w as usize).div_ceil(2);
        let idx: Vec<u8> = (0..h as usize * w as usize).map(|i| (i * 7 % 16) as u8).collect();
        let mut data = vec![0u8; stride * h as usize];
        for y in 0..h as usize {
            for x in 0..w as usize {
                data[y * stride + x / 2] |= idx[y * w as usize + x] << (4 * (1 - x % 2));
            }
        }
        let want: Vec<u8> = idx.iter().flat_map(|&i| pal[i as usize * 3..i as usize * 3 + 3].to_vec()).collect();
        let got = decode(&encode(w, h, ColorType::Indexed, BitDepth::Four, &data, Some((&pal, &trns))));
        assert_eq!(got.rgb, want);
        // 1-bit gray: 0 → 0, 1 → 255.
        let data = vec![0b1010_0000u8, 0b1000_0000];
        let got = decode(&encode(3, 2, ColorType::Grayscale, BitDepth::One, &data, None));
        assert_eq!(got.rgb, [255, 255, 255, 0, 0, 0, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn sixteen_bit_samples_reduce_as_pillow_does() {
        let vals: [u16; 6] = [0, 255, 256, 300, 0x1234, 65535];
        let be: Vec<u8> = vals.iter().flat_map(|v| v.to_be_bytes()).collect();
        // RGB 16: high byte (Pillow's "RGB;16B" unpacker).
        let got = decode(&encode(2, 1, ColorType::Rgb, BitDepth::Sixteen, &be, None));
        let want: Vec<u8> = vals.iter().map(|v| (v >> 8) as u8).collect();
        assert_eq!(got.rgb, want);
        // Gray 16: Pillow opens it as "I;16" and clips to 255 on convert('RGB').
        let got = decode(&encode(6, 1, ColorType::Grayscale, BitDepth::Sixteen, &be, None));
        let want: Vec<u8> = vals.iter().flat_map(|&v| [v.min(255) as u8; 3]).collect();
        assert_eq!(got.rgb, want);
        // Gray + alpha 16: high byte of the gray ("LA;16B").
        let got = decode(&encode(3, 1, ColorType::GrayscaleAlpha, BitDepth::Sixteen, &be, None));
        let want: Vec<u8> = vals.chunks(2).flat_map(|p| [(p[0] >> 8) as u8; 3]).collect();
        assert_eq!(got.rgb, want);
    }

    #[test]
    fn header_facts_come_from_the_ihdr() {
        let png = encode(7, 5, ColorType::GrayscaleAlpha, BitDepth::Eight, &bytes(70, 1), None);
        let i = crate::codec::parse_info(&png).unwrap();
        assert_eq!((i.format, i.width, i.height, i.components, i.orientation, i.jpeg), (ImageFormat::Png, 7, 5, 2, 1, None));
        assert!(matches!(crate::codec::parse_info(&png[..20]), Err(HeaderError::Truncated { .. })));
        assert!(matches!(crate::codec::parse_info(&png[..5]), Err(HeaderError::Truncated { .. })));
        let e = crate::codec::parse_info(b"GIF89a.......").unwrap_err();
        assert!(e.to_string().starts_with("not a supported image format") && e.to_string().contains("GIF"), "{e}");
    }

    #[test]
    fn the_size_guard_reads_the_ihdr_before_allocating() {
        let mut png = encode(1, 1, ColorType::Rgb, BitDepth::Eight, &[1, 2, 3], None);
        png[16..20].copy_from_slice(&60000u32.to_be_bytes());
        png[20..24].copy_from_slice(&60000u32.to_be_bytes());
        let mut out = DecodedImage::default();
        let e = decode_rgb(&png, 89_478_485, &mut out).unwrap_err();
        assert_eq!(e.kind, DecodeErrorKind::TooLarge);
        assert!(e.message.contains("60000x60000 = 3600000000 pixels"), "{e}");
    }

    #[test]
    fn truncated_and_corrupt_files_are_errors_never_panics() {
        let png = encode(16, 16, ColorType::Rgba, BitDepth::Eight, &bytes(16 * 16 * 4, 9), None);
        let mut out = DecodedImage::default();
        for cut in [0, 8, 20, 24, 33, 40, png.len() / 2, png.len() - 13] {
            assert!(decode_rgb(&png[..cut], 1 << 20, &mut out).is_err(), "cut at {cut}");
        }
        let e = decode_rgb(&png[..png.len() / 2], 1 << 20, &mut out).unwrap_err();
        assert!(e.message.starts_with("png: "), "{e}");
        for i in 8..png.len() {
            let mut bad = png.clone();
            bad[i] ^= 0x5A;
            let _ = decode_rgb(&bad, 1 << 20, &mut out);
        }
    }
}
