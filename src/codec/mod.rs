//! Image formats: sniffing by magic bytes (never by file name), and one decode entry per
//! format. JPEG ([`jpeg`]: the header parser the index and the routing use), PNG ([`png`]).
//!
//! The decode conventions of every format are Pillow's `Image.open(f).convert('RGB')`: always
//! 3-channel RGB, alpha dropped, gray replicated.

pub mod jpeg;
pub mod png;

/// An image format, as told by the first bytes of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// JPEG: starts with the SOI marker `FF D8`.
    Jpeg,
    /// PNG: starts with the 8-byte PNG signature.
    Png,
}

impl ImageFormat {
    /// Lowercase name for messages.
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Png => "png",
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
        assert_eq!(sniff(&[]), None);
        assert_eq!(sniff(&[0xFF]), None);
    }
}
