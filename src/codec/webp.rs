//! WebP → RGB with the `image-webp` crate (lossy VP8 and lossless VP8L, simple and extended
//! files), as Pillow's `convert('RGB')` gives it: alpha dropped, an animation's first frame.
//! The decoded-size guard is checked from the header before anything is allocated.

use super::jpeg::HeaderError;
use super::{DecodeError, DecodeErrorKind, DecodedImage, ImageFormat, ImageInfo};
use image_webp::{DecodingError, WebPDecoder};
use std::io::Cursor;

/// The RIFF container's first twelve bytes: `RIFF`, a length, `WEBP`.
pub(crate) fn is_webp(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP"
}

fn kind_of(e: &DecodingError) -> DecodeErrorKind {
    match e {
        DecodingError::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => DecodeErrorKind::Truncated,
        DecodingError::MemoryLimitExceeded | DecodingError::ImageTooLarge => DecodeErrorKind::TooLarge,
        DecodingError::UnsupportedFeature(_) => DecodeErrorKind::Unsupported,
        _ => DecodeErrorKind::Corrupt,
    }
}

fn decoder(bytes: &[u8]) -> Result<WebPDecoder<Cursor<&[u8]>>, DecodeError> {
    WebPDecoder::new(Cursor::new(bytes)).map_err(|e| DecodeError::new(kind_of(&e), format!("webp: {e}")))
}

/// The header facts: size and stored components (3, or 4 with alpha).
pub fn parse_info(bytes: &[u8]) -> Result<ImageInfo, HeaderError> {
    let d = decoder(bytes).map_err(|e| match e.kind {
        DecodeErrorKind::Truncated => HeaderError::Truncated { at: bytes.len(), context: "webp header" },
        _ => HeaderError::Invalid { at: 0, message: e.message },
    })?;
    let (width, height) = d.dimensions();
    if width == 0 || height == 0 {
        return Err(HeaderError::Invalid { at: 0, message: format!("webp: {width}x{height} image") });
    }
    let components = if d.has_alpha() { 4 } else { 3 };
    Ok(ImageInfo { format: ImageFormat::WebP, width, height, components, orientation: 1, jpeg: None })
}

/// Decode the whole WebP in `bytes` (an animation's first frame) to RGB into `out` (buffers
/// reused; the region is the whole image).
pub fn decode_rgb(bytes: &[u8], max_pixels: u64, out: &mut DecodedImage) -> Result<(), DecodeError> {
    let mut d = decoder(bytes)?;
    let (w, h) = d.dimensions();
    let pixels = w as u64 * h as u64;
    if pixels > max_pixels {
        return Err(DecodeError::new(
            DecodeErrorKind::TooLarge,
            format!("the header announces {w}x{h} = {pixels} pixels, over the decoded-size guard of {max_pixels} pixels"),
        ));
    }
    // The guard above bounds the image; the crate's own limit must not refuse less.
    d.set_memory_limit((pixels as usize).saturating_mul(8).saturating_add(1 << 20));
    let size =
        d.output_buffer_size().ok_or_else(|| DecodeError::new(DecodeErrorKind::TooLarge, "webp: the image does not fit in memory"))?;
    let channels = if d.has_alpha() { 4 } else { 3 };
    if size != w as usize * h as usize * channels {
        return Err(DecodeError::new(DecodeErrorKind::Unsupported, format!("webp: a {size}-byte frame for {w}x{h}x{channels}")));
    }
    out.set_whole(w, h);
    if channels == 3 {
        out.rgb.resize(size, 0);
        return d.read_image(&mut out.rgb).map_err(|e| DecodeError::new(kind_of(&e), format!("webp: {e}")));
    }
    let mut rgba = vec![0u8; size];
    d.read_image(&mut rgba).map_err(|e| DecodeError::new(kind_of(&e), format!("webp: {e}")))?;
    out.rgb.clear();
    out.rgb.extend(rgba.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]));
    Ok(())
}
