//! Image formats: sniffing by magic bytes (never by file name), and one decode entry per
//! format. JPEG ([`jpeg`]: the header parser the index and the routing use), PNG ([`png`]),
//! WebP ([`webp`]).
//!
//! The decoded image and decode error types live here, shared by every format's decoder
//! (libjpeg-turbo's in `backend::cpu::decode`, which re-exports them).
//!
//! The decode conventions of every format are Pillow's `Image.open(f).convert('RGB')`: always
//! 3-channel RGB, alpha dropped, gray replicated.

pub mod jpeg;
pub mod png;
pub mod webp;

use jpeg::{HeaderError, JpegInfo};

/// An image format, as told by the first bytes of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// JPEG: starts with the SOI marker `FF D8`.
    Jpeg,
    /// PNG: starts with the 8-byte PNG signature.
    Png,
    /// WebP: a RIFF container whose form type is `WEBP`.
    WebP,
}

impl ImageFormat {
    /// Lowercase name for messages.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Png => "png",
            ImageFormat::WebP => "webp",
        }
    }
}

/// What the header of an image says, whatever its format: what the index keeps per sample
/// and what the sampler draws the geometry from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// The sniffed format.
    pub format: ImageFormat,
    /// Stored width in pixels (before EXIF orientation).
    pub width: u32,
    /// Stored height in pixels.
    pub height: u32,
    /// Colour components as stored (JPEG: 1, 3 or 4; PNG: 1 gray, 2 gray+alpha, 3 RGB or
    /// palette, 4 RGBA).
    pub components: u8,
    /// EXIF orientation 1..=8 (1 when absent, and always 1 for PNG).
    pub orientation: u8,
    /// The JPEG header facts (coding, subsampling, Adobe transform, restart interval...) the
    /// routing uses; `None` for other formats.
    pub jpeg: Option<JpegInfo>,
}

impl ImageInfo {
    /// Width × height as stored.
    pub fn pixels(&self) -> u64 {
        self.width as u64 * self.height as u64
    }

    /// True for four-component JPEGs (CMYK or YCCK).
    pub fn is_cmyk(&self) -> bool {
        self.jpeg.is_some_and(|j| j.is_cmyk())
    }

    /// True for images without colour (one component, or gray with alpha).
    pub fn is_gray(&self) -> bool {
        self.components <= 2
    }
}

impl From<JpegInfo> for ImageInfo {
    fn from(j: JpegInfo) -> Self {
        ImageInfo {
            format: ImageFormat::Jpeg,
            width: j.width,
            height: j.height,
            components: j.components,
            orientation: j.orientation,
            jpeg: Some(j),
        }
    }
}

/// Parse the header of `bytes` in whatever format they are in (sniffed by magic bytes).
/// A [`HeaderError::Truncated`] means a longer prefix may parse.
pub fn parse_info(bytes: &[u8]) -> Result<ImageInfo, HeaderError> {
    match sniff(bytes) {
        Some(ImageFormat::Jpeg) => jpeg::parse(bytes).map(ImageInfo::from),
        Some(ImageFormat::Png) => png::parse_info(bytes),
        Some(ImageFormat::WebP) => webp::parse_info(bytes),
        None if bytes.len() < PNG_SIGNATURE.len() && PNG_SIGNATURE.starts_with(bytes) && !bytes.is_empty() => {
            Err(HeaderError::Truncated { at: bytes.len(), context: "png signature" })
        }
        None => Err(HeaderError::UnknownFormat(jpeg::describe_non_jpeg(bytes))),
    }
}

/// What kind of failure a [`DecodeError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// The bytes are in no format stoke decodes (sniffed by magic bytes), or a JPEG stream
    /// without a frame header.
    UnknownFormat,
    /// The stream ends before the image does.
    Truncated,
    /// The stream is damaged beyond what the decoder recovers from.
    Corrupt,
    /// A valid file of a kind stoke does not decode (12/16-bit JPEG, hierarchical, ...).
    Unsupported,
    /// The header announces more pixels than the configured guard allows.
    TooLarge,
}

/// Why an image could not be decoded. The message is a lowercase sentence with the numbers
/// involved; the caller adds the file name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecodeError {
    /// Category, for policies and statistics.
    pub kind: DecodeErrorKind,
    /// What went wrong.
    pub message: String,
}

impl DecodeError {
    pub(crate) fn new(kind: DecodeErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// A decoded image, or a region of it, as stored (before EXIF orientation). Buffers are
/// reused from call to call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedImage {
    /// Stored width of the whole image.
    pub width: u32,
    /// Stored height of the whole image.
    pub height: u32,
    /// Left edge of the decoded region (0 for a full decode).
    pub region_x: u32,
    /// Top edge of the decoded region.
    pub region_y: u32,
    /// Width of the decoded region (`width` for a full decode).
    pub region_w: u32,
    /// Height of the decoded region.
    pub region_h: u32,
    /// Interleaved RGB of the region, `region_w · 3` bytes per row.
    pub rgb: Vec<u8>,
}

impl DecodedImage {
    /// Say that the buffer holds the whole `width × height` image (formats decoded whole).
    pub(crate) fn set_whole(&mut self, width: u32, height: u32) {
        (self.width, self.height) = (width, height);
        (self.region_x, self.region_y, self.region_w, self.region_h) = (0, 0, width, height);
    }

    /// Keep only the sub-region `(x, y, w, h)` (stored coordinates) of the decoded region,
    /// moving its rows to the front of the buffer in place. Returns false, changing nothing,
    /// when the decoded region does not contain it.
    pub fn crop_to(&mut self, x: u32, y: u32, w: u32, h: u32) -> bool {
        let inside = x >= self.region_x
            && y >= self.region_y
            && x as u64 + w as u64 <= self.region_x as u64 + self.region_w as u64
            && y as u64 + h as u64 <= self.region_y as u64 + self.region_h as u64;
        if !inside || self.rgb.len() < 3 * self.region_w as usize * self.region_h as usize {
            return false;
        }
        let (pitch, row) = (3 * self.region_w as usize, 3 * w as usize);
        let (dx, dy) = ((x - self.region_x) as usize, (y - self.region_y) as usize);
        for r in 0..h as usize {
            // Row r lands at r·row ≤ its source (row ≤ pitch): a forward copy never overwrites
            // a row still to be moved.
            let from = (dy + r) * pitch + 3 * dx;
            self.rgb.copy_within(from..from + row, r * row);
        }
        self.rgb.truncate(row * h as usize);
        (self.region_x, self.region_y, self.region_w, self.region_h) = (x, y, w, h);
        true
    }
}

#[cfg(test)]
mod crop_tests {
    use super::DecodedImage;

    #[test]
    fn crop_to_keeps_exactly_the_sub_region() {
        // A 7x5 region at (3, 2) of a 20x10 image; each pixel's bytes say where it is.
        let (rx, ry, rw, rh) = (3u32, 2u32, 7u32, 5u32);
        let px = |x: u32, y: u32| [x as u8, y as u8, (x * 7 + y) as u8];
        let mut img = DecodedImage { width: 20, height: 10, region_x: rx, region_y: ry, region_w: rw, region_h: rh, rgb: Vec::new() };
        for y in ry..ry + rh {
            for x in rx..rx + rw {
                img.rgb.extend_from_slice(&px(x, y));
            }
        }
        let whole = img.clone();
        for (x, y, w, h) in [(3, 2, 7, 5), (4, 3, 2, 2), (9, 6, 1, 1), (3, 6, 7, 1), (5, 2, 5, 5)] {
            let mut c = whole.clone();
            assert!(c.crop_to(x, y, w, h), "({x}, {y}, {w}, {h})");
            let want: Vec<u8> = (y..y + h).flat_map(|yy| (x..x + w).flat_map(move |xx| px(xx, yy))).collect();
            assert_eq!(c.rgb, want, "({x}, {y}, {w}, {h})");
            assert_eq!((c.region_x, c.region_y, c.region_w, c.region_h, c.width, c.height), (x, y, w, h, 20, 10));
        }
        for (x, y, w, h) in [(2, 2, 2, 2), (3, 1, 2, 2), (9, 2, 2, 1), (3, 6, 1, 2)] {
            let mut c = whole.clone();
            assert!(!c.crop_to(x, y, w, h), "({x}, {y}, {w}, {h}) is not inside");
            assert_eq!(c, whole);
        }
    }
}

/// The PNG signature.
pub const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The format of `bytes` from its magic bytes, `None` when it is no format stoke decodes.
pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(&[0xFF, 0xD8]) {
        Some(ImageFormat::Jpeg)
    } else if bytes.starts_with(&PNG_SIGNATURE) {
        Some(ImageFormat::Png)
    } else if webp::is_webp(bytes) {
        Some(ImageFormat::WebP)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffing_reads_magic_bytes_only() {
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(ImageFormat::Jpeg));
        assert_eq!(sniff(&PNG_SIGNATURE), Some(ImageFormat::Png));
        assert_eq!(sniff(&PNG_SIGNATURE[..7]), None);
        assert_eq!(sniff(b"GIF89a"), None);
        assert_eq!(sniff(b"RIFF\x10\0\0\0WEBPVP8 "), Some(ImageFormat::WebP));
        assert_eq!(sniff(b"RIFF\x10\0\0\0WAVEfmt "), None, "another RIFF form");
        assert_eq!(sniff(&[]), None);
        assert_eq!(sniff(&[0xFF]), None);
    }
}
