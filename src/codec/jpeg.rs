//! The JPEG header parser: what a sample is, from its first bytes, without decoding it.
//!
//! [`parse`] walks the marker segments up to the first scan (SOS) and records the frame
//! (SOFn: coding, precision, size, components and their sampling factors), the Adobe APP14
//! colour transform, JFIF/ICC presence, the restart interval and the EXIF orientation (APP1,
//! IFD0 tag 0x0112, either byte order). A frame whose height is 0 takes its height from the DNL
//! marker after the first scan. Hierarchical files (DHP) report the full image size from DHP.
//!
//! It reads arbitrary bytes: every access is bounds-checked, nothing panics, and running out
//! of bytes is reported as [`HeaderError::Truncated`] with how far it got, so a caller that
//! read only a prefix of the file can read more and try again (see `index.rs`). It is fuzzed
//! (`fuzz/`) and property-tested over random and mutated inputs.

use serde::{Deserialize, Serialize};
use std::fmt;

// The path is spelled out: fuzz/fuzz_targets/jpeg_header.rs compiles this file on its own (via
// `#[path]`), and there a bare `mod segments;` is looked for beside this file, not in jpeg/ (its
// build failed so from 448a67d on; a `#[path]` is relative to this file's folder either way).
#[path = "jpeg/segments.rs"]
mod segments;
pub use segments::{declare_gray_1x1, defines_its_tables, progressive_complete};

/// How the image data is coded (the SOF marker type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Coding {
    /// SOF0: baseline sequential Huffman, 8-bit. The only kind the hardware decoder takes.
    Baseline,
    /// SOF1: extended sequential Huffman (8 or 12-bit, up to 4 tables).
    Extended,
    /// SOF2: progressive Huffman.
    Progressive,
    /// SOF3: lossless Huffman.
    Lossless,
    /// SOF9: sequential arithmetic.
    ArithmeticSequential,
    /// SOF10: progressive arithmetic.
    ArithmeticProgressive,
    /// SOF11: lossless arithmetic.
    ArithmeticLossless,
    /// DHP + differential frames (SOF5-7, SOF13-15): hierarchical. Few decoders take it.
    Hierarchical,
}

impl Coding {
    /// Short lowercase name, as `stoke index` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Baseline => "baseline",
            Coding::Extended => "extended",
            Coding::Progressive => "progressive",
            Coding::Lossless => "lossless",
            Coding::ArithmeticSequential => "arithmetic",
            Coding::ArithmeticProgressive => "arithmetic-progressive",
            Coding::ArithmeticLossless => "arithmetic-lossless",
            Coding::Hierarchical => "hierarchical",
        }
    }

    /// True for the arithmetic-coded kinds (SOF9-11).
    pub fn is_arithmetic(self) -> bool {
        matches!(self, Coding::ArithmeticSequential | Coding::ArithmeticProgressive | Coding::ArithmeticLossless)
    }

    /// True for the progressive kinds (SOF2, SOF10).
    pub fn is_progressive(self) -> bool {
        matches!(self, Coding::Progressive | Coding::ArithmeticProgressive)
    }

    fn from_sof(marker: u8) -> Option<Coding> {
        Some(match marker {
            0xC0 => Coding::Baseline,
            0xC1 => Coding::Extended,
            0xC2 => Coding::Progressive,
            0xC3 => Coding::Lossless,
            0xC9 => Coding::ArithmeticSequential,
            0xCA => Coding::ArithmeticProgressive,
            0xCB => Coding::ArithmeticLossless,
            0xC5..=0xC7 | 0xCD..=0xCF => Coding::Hierarchical,
            _ => return None,
        })
    }
}

/// Chroma subsampling, named as the manifest and most tools name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Subsampling {
    /// One component (its sampling factors do not matter).
    Gray,
    /// Three components, chroma at full resolution.
    S444,
    /// Chroma halved horizontally.
    S422,
    /// Chroma halved both ways.
    S420,
    /// Chroma halved vertically.
    S440,
    /// Chroma quartered horizontally.
    S411,
    /// Chroma quartered horizontally and halved vertically.
    S410,
    /// Anything else: four components, or chroma factors other than 1×1.
    Other,
}

impl Subsampling {
    /// "4:2:0", "gray", "other", ...
    pub fn name(self) -> &'static str {
        match self {
            Subsampling::Gray => "gray",
            Subsampling::S444 => "4:4:4",
            Subsampling::S422 => "4:2:2",
            Subsampling::S420 => "4:2:0",
            Subsampling::S440 => "4:4:0",
            Subsampling::S411 => "4:1:1",
            Subsampling::S410 => "4:1:0",
            Subsampling::Other => "other",
        }
    }
}

/// What the header says about one JPEG.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JpegInfo {
    /// Stored width in pixels (before EXIF orientation).
    pub width: u32,
    /// Stored height in pixels (before EXIF orientation); from DNL when the SOF says 0.
    pub height: u32,
    /// Number of colour components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK).
    pub components: u8,
    /// Sample precision in bits (8 or 12; 2..16 for lossless).
    pub precision: u8,
    /// The SOF marker's second byte (0xC0 for SOF0, ...).
    pub sof: u8,
    /// Coding process.
    pub coding: Coding,
    /// `(h, v)` sampling factors of the first four components (0 where absent).
    pub sampling: [(u8, u8); 4],
    /// Chroma subsampling derived from [`JpegInfo::sampling`].
    pub subsampling: Subsampling,
    /// Adobe APP14 transform flag: 0 = none (RGB or CMYK), 1 = YCbCr, 2 = YCCK.
    pub adobe_transform: Option<u8>,
    /// EXIF orientation 1..=8; 1 when absent or out of range.
    pub orientation: u8,
    /// A JFIF APP0 segment is present.
    pub jfif: bool,
    /// An ICC profile (APP2 `ICC_PROFILE`) is present.
    pub icc: bool,
    /// Restart interval from DRI (0 = none), as of the first scan.
    pub restart_interval: u16,
    /// The height came from a DNL marker (the SOF said 0).
    pub dnl: bool,
    /// The header has something libjpeg-turbo refuses when it reads the header or starts the
    /// first scan, which nvJPEG 13.0 decodes anyway (on an H200 it delivered such malformed
    /// files; what it makes of them is not documented), so the CUDA backend sends the file to
    /// the CPU decoder, which names the fault:
    /// - a Huffman table failing `get_dht`'s checks (over 256 codes, more codes than the
    ///   segment holds, a table index of 4 or more, bytes left over) or not making a prefix
    ///   code (`jpeg_make_d_derived_tbl`: the codes of some length overflow it; a DC symbol over
    ///   15 in a lossy file) — "bogus Huffman table definition";
    /// - a first scan (SOS) naming a component the frame does not have, or one twice, or whose
    ///   length does not match its component count — "invalid component ID in SOS";
    /// - a width or height over 65500 (`JPEG_MAX_DIMENSION`).
    ///
    /// libjpeg-turbo checks only the tables a scan uses; this checks every table before the
    /// first scan, so a file it flags is at worst decoded whole on the CPU.
    #[serde(default, alias = "bad_huffman")]
    pub turbo_refuses: bool,
}

impl JpegInfo {
    /// True when the file is four-component (CMYK or YCCK).
    pub fn is_cmyk(&self) -> bool {
        self.components == 4
    }

    /// True for single-component files.
    pub fn is_gray(&self) -> bool {
        self.components == 1
    }

    /// Width × height as stored.
    pub fn pixels(&self) -> u64 {
        self.width as u64 * self.height as u64
    }
}

/// Why the bytes are not a usable image header (JPEG, or PNG through [`crate::codec::parse_info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// The bytes do not start with a JPEG SOI marker; says what they look like instead.
    NotJpeg(String),
    /// The bytes are in no format stoke decodes (from [`crate::codec::parse_info`]); says what
    /// they look like instead.
    UnknownFormat(String),
    /// The bytes ended at `at` while the header needed more; a longer prefix may parse.
    Truncated {
        /// How many bytes were available.
        at: usize,
        /// What was being read.
        context: &'static str,
    },
    /// The header is malformed at byte `at`.
    Invalid {
        /// Byte offset of the problem.
        at: usize,
        /// What was expected and found.
        message: String,
    },
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::NotJpeg(what) => write!(f, "not a JPEG: {what}"),
            HeaderError::UnknownFormat(what) => write!(f, "not a supported image format (jpeg, png): {what}"),
            HeaderError::Truncated { at, context } => write!(f, "image header truncated at byte {at} (reading {context})"),
            HeaderError::Invalid { at, message } => write!(f, "bad image header at byte {at}: {message}"),
        }
    }
}

impl std::error::Error for HeaderError {}

/// Describe bytes that are not a JPEG by their magic number.
pub(crate) fn describe_non_jpeg(b: &[u8]) -> String {
    if b.is_empty() {
        return "the file is empty".into();
    }
    let kind = if b.starts_with(b"\x89PNG") {
        Some("a PNG file")
    } else if b.starts_with(b"GIF8") {
        Some("a GIF file")
    } else if b.len() >= 12 && b.starts_with(b"RIFF") && &b[8..12] == b"WEBP" {
        Some("a WebP file")
    } else if b.starts_with(b"BM") {
        Some("a BMP file")
    } else if b.starts_with(b"II*\0") || b.starts_with(b"MM\0*") {
        Some("a TIFF file")
    } else if b.len() >= 12 && &b[4..8] == b"ftyp" {
        Some("an ISO media file (HEIF/AVIF/MP4)")
    } else if b.len() == 1 && b[0] == 0xFF {
        Some("a single 0xff byte")
    } else {
        None
    };
    let head: Vec<String> = b.iter().take(4).map(|x| format!("{x:02x}")).collect();
    match kind {
        Some(k) => format!("starts with {} ({k})", head.join(" ")),
        None => format!("starts with {}, not the SOI marker ff d8", head.join(" ")),
    }
}

/// Bounds-checked big-endian reads.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn u8(&self, at: usize, context: &'static str) -> Result<u8, HeaderError> {
        self.b.get(at).copied().ok_or(HeaderError::Truncated { at: self.b.len(), context })
    }
    fn u16(&self, at: usize, context: &'static str) -> Result<u16, HeaderError> {
        Ok(u16::from_be_bytes([self.u8(at, context)?, self.u8(at + 1, context)?]))
    }
    fn slice(&self, at: usize, len: usize, context: &'static str) -> Result<&'a [u8], HeaderError> {
        at.checked_add(len).and_then(|end| self.b.get(at..end)).ok_or(HeaderError::Truncated { at: self.b.len(), context })
    }
}

fn segment_name(m: u8) -> &'static str {
    match m {
        0xC0..=0xCF if m != 0xC4 && m != 0xC8 && m != 0xCC => "SOF segment",
        0xC4 => "DHT segment",
        0xCC => "DAC segment",
        0xDA => "SOS segment",
        0xDB => "DQT segment",
        0xDD => "DRI segment",
        0xDE => "DHP segment",
        0xE1 => "APP1 segment",
        0xEE => "APP14 segment",
        0xE0..=0xEF => "APPn segment",
        0xFE => "COM segment",
        _ => "marker segment",
    }
}

/// A frame header (SOF or DHP).
struct Frame {
    precision: u8,
    height: u16,
    width: u16,
    components: u8,
    sampling: [(u8, u8); 4],
    /// Component identifiers (the SOS names components by them), in frame order.
    ids: Vec<u8>,
}

fn parse_frame(seg: &[u8], at: usize, name: &str) -> Result<Frame, HeaderError> {
    let bad = |message: String| HeaderError::Invalid { at, message };
    if seg.len() < 6 {
        return Err(bad(format!("{name} is {} bytes long, need at least 6", seg.len())));
    }
    let precision = seg[0];
    let height = u16::from_be_bytes([seg[1], seg[2]]);
    let width = u16::from_be_bytes([seg[3], seg[4]]);
    let nc = seg[5];
    if nc == 0 {
        return Err(bad(format!("{name} declares 0 components")));
    }
    if seg.len() != 6 + 3 * nc as usize {
        return Err(bad(format!("{name} length {} does not match its {nc} components (need {})", seg.len() + 2, 8 + 3 * nc as usize)));
    }
    if !(2..=16).contains(&precision) {
        return Err(bad(format!("{name} precision {precision} bits is outside 2..=16")));
    }
    if width == 0 {
        return Err(bad(format!("{name} width is 0")));
    }
    let mut sampling = [(0u8, 0u8); 4];
    for c in 0..nc as usize {
        let hv = seg[6 + 3 * c + 1];
        let (h, v) = (hv >> 4, hv & 15);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return Err(bad(format!("{name} component {c} has sampling factors {h}x{v}, must be 1..=4")));
        }
        if c < 4 {
            sampling[c] = (h, v);
        }
    }
    let ids = (0..nc as usize).map(|c| seg[6 + 3 * c]).collect();
    Ok(Frame { precision, height, width, components: nc, sampling, ids })
}

fn subsampling_of(nc: u8, s: &[(u8, u8); 4]) -> Subsampling {
    match nc {
        1 => Subsampling::Gray,
        3 if s[1] == (1, 1) && s[2] == (1, 1) => match s[0] {
            (1, 1) => Subsampling::S444,
            (2, 1) => Subsampling::S422,
            (2, 2) => Subsampling::S420,
            (1, 2) => Subsampling::S440,
            (4, 1) => Subsampling::S411,
            (4, 2) => Subsampling::S410,
            _ => Subsampling::Other,
        },
        _ => Subsampling::Other,
    }
}

/// EXIF orientation from an APP1 payload after `Exif\0\0` (a TIFF structure). `None` when
/// absent or malformed: a bad EXIF block never makes the image unusable.
fn exif_orientation(tiff: &[u8]) -> Option<u8> {
    let le = match tiff.get(0..4)? {
        b"II*\0" => true,
        b"MM\0*" => false,
        _ => return None,
    };
    let u16_at = |o: usize| -> Option<u16> {
        let b = tiff.get(o..o.checked_add(2)?)?;
        Some(if le { u16::from_le_bytes([b[0], b[1]]) } else { u16::from_be_bytes([b[0], b[1]]) })
    };
    let u32_at = |o: usize| -> Option<u32> {
        let b: [u8; 4] = tiff.get(o..o.checked_add(4)?)?.try_into().ok()?;
        Some(if le { u32::from_le_bytes(b) } else { u32::from_be_bytes(b) })
    };
    let ifd = u32_at(4)? as usize;
    let count = u16_at(ifd)? as usize;
    for i in 0..count {
        let e = ifd.checked_add(2 + 12 * i)?;
        if u16_at(e)? != 0x0112 {
            continue;
        }
        let value = match u16_at(e + 2)? {
            3 => u16_at(e + 8)? as u32, // SHORT, left-justified in the value field
            4 => u32_at(e + 8)?,        // LONG (some writers)
            _ => return None,
        };
        return (1..=8).contains(&value).then_some(value as u8);
    }
    None
}

/// Scan entropy-coded data from `from` for the DNL marker and return `(height, offset)`.
fn find_dnl(b: &[u8], mut i: usize) -> Result<u16, HeaderError> {
    let c = Cursor { b };
    loop {
        // Find the next marker: 0xFF followed by neither 0x00 (stuffing), 0xFF (fill) nor RSTn.
        let rel = b.get(i..).and_then(|t| t.iter().position(|&x| x == 0xFF));
        let Some(rel) = rel else {
            return Err(HeaderError::Truncated { at: b.len(), context: "scan data looking for the DNL marker" });
        };
        i += rel;
        let m = c.u8(i + 1, "scan data looking for the DNL marker")?;
        match m {
            0x00 | 0xFF | 0xD0..=0xD7 => i += 1,
            0xDC => {
                let len = c.u16(i + 2, "DNL segment")?;
                if len != 4 {
                    return Err(HeaderError::Invalid { at: i, message: format!("DNL segment length {len}, must be 4") });
                }
                let h = c.u16(i + 4, "DNL segment")?;
                if h == 0 {
                    return Err(HeaderError::Invalid { at: i, message: "DNL marker gives height 0".into() });
                }
                return Ok(h);
            }
            0xD9 => {
                return Err(HeaderError::Invalid { at: i, message: "frame height is 0 and no DNL marker precedes the end of image".into() })
            }
            0xD8 | 0x01 => i += 2,
            _ => {
                // A segment between scans (DHT, DQT, SOS, ...): skip its length.
                let len = c.u16(i + 2, segment_name(m))? as usize;
                if len < 2 {
                    return Err(HeaderError::Invalid { at: i, message: format!("marker ff {m:02x} has length {len}, must be at least 2") });
                }
                i += 2 + len;
            }
        }
    }
}

/// Parse the header of a JPEG held (wholly or as a prefix) in `b`.
pub fn parse(b: &[u8]) -> Result<JpegInfo, HeaderError> {
    if b.len() < 2 || b[0] != 0xFF || b[1] != 0xD8 {
        if b == [0xFF] {
            return Err(HeaderError::Truncated { at: 1, context: "the SOI marker" });
        }
        return Err(HeaderError::NotJpeg(describe_non_jpeg(b)));
    }
    let c = Cursor { b };
    let mut i = 2usize;
    let mut frame: Option<(Frame, u8, Coding)> = None;
    let mut dhp: Option<Frame> = None;
    let mut adobe_transform = None;
    let mut orientation = None;
    let (mut jfif, mut icc) = (false, false);
    let mut restart_interval = 0u16;
    let mut bad_huffman = false;
    // The largest DC table symbol (a coefficient difference's bit count, at most 15; lossless
    // files use other tables, which libjpeg-turbo decodes: the corpus's lossless files have
    // 256 DC symbols).
    let mut max_dc_symbol = 0u8;
    // libjpeg-turbo's JPEG_MAX_DIMENSION: it refuses a larger side while reading the header.
    const TURBO_MAX_DIMENSION: u32 = 65500;
    loop {
        // Markers start with 0xFF; libjpeg skips (and warns about) junk bytes before one.
        let rel = b.get(i..).and_then(|t| t.iter().position(|&x| x == 0xFF));
        let Some(rel) = rel else {
            return Err(HeaderError::Truncated { at: b.len(), context: "the next marker" });
        };
        i += rel;
        // Any number of 0xFF fill bytes may precede the marker code.
        while c.u8(i + 1, "a marker")? == 0xFF {
            i += 1;
        }
        let m = c.u8(i + 1, "a marker")?;
        let at = i;
        match m {
            0x00 => {
                // A stuffed zero outside scan data: junk; keep looking.
                i += 2;
                continue;
            }
            0xD8 | 0x01 | 0xD0..=0xD7 => {
                i += 2;
                continue;
            }
            0xD9 => {
                return Err(HeaderError::Invalid { at, message: "end of image (EOI) before any frame and scan".into() });
            }
            _ => {}
        }
        let len = c.u16(i + 2, segment_name(m))? as usize;
        if len < 2 {
            if matches!(m, 0xE0..=0xEF | 0xFE) {
                // libjpeg skips an APPn/COM with a length below 2 without skipping anything,
                // then resyncs on the next 0xFF: do the same.
                i += 4;
                continue;
            }
            return Err(HeaderError::Invalid { at, message: format!("marker ff {m:02x} has length {len}, must be at least 2") });
        }
        let seg = c.slice(i + 4, len - 2, segment_name(m))?;
        let next = i + 2 + len;
        match m {
            0xC4 => match dht_check(seg) {
                Some(dc) => max_dc_symbol = max_dc_symbol.max(dc),
                None => bad_huffman = true,
            },
            0xC0..=0xCF if frame.is_none() => {
                if let Some(coding) = Coding::from_sof(m) {
                    let f = parse_frame(seg, at, &format!("SOF{}", m - 0xC0))?;
                    frame = Some((f, m, coding));
                }
            }
            0xDE if dhp.is_none() => dhp = Some(parse_frame(seg, at, "DHP")?),
            0xDD => {
                if seg.len() < 2 {
                    return Err(HeaderError::Invalid { at, message: format!("DRI segment length {len}, must be 4") });
                }
                restart_interval = u16::from_be_bytes([seg[0], seg[1]]);
            }
            0xE0 if seg.starts_with(b"JFIF\0") => jfif = true,
            0xE1 if seg.starts_with(b"Exif\0") && orientation.is_none() => {
                // Always `Some`: only the first EXIF block counts, even when it has no tag.
                orientation = Some(seg.get(6..).and_then(exif_orientation).unwrap_or(1));
            }
            0xE2 if seg.starts_with(b"ICC_PROFILE\0") => icc = true,
            0xEE if seg.starts_with(b"Adobe") && seg.len() >= 12 => adobe_transform = Some(seg[11]),
            0xDA => {
                let Some((f, sof, coding)) = &frame else {
                    return Err(HeaderError::Invalid { at, message: "start of scan (SOS) before any frame header (SOF)".into() });
                };
                let coding = if dhp.is_some() { Coding::Hierarchical } else { *coding };
                let outer = dhp.as_ref().unwrap_or(f);
                let (width, mut height, mut dnl) = (outer.width as u32, outer.height as u32, false);
                if height == 0 {
                    height = find_dnl(b, next).map_err(|e| match e {
                        HeaderError::Invalid { .. } | HeaderError::NotJpeg(_) | HeaderError::UnknownFormat(_) => e,
                        HeaderError::Truncated { at, .. } => {
                            HeaderError::Truncated { at, context: "scan data: the SOF height is 0, looking for the DNL marker" }
                        }
                    })? as u32;
                    dnl = true;
                }
                return Ok(JpegInfo {
                    width,
                    height,
                    components: f.components,
                    precision: f.precision,
                    sof: *sof,
                    coding,
                    sampling: f.sampling,
                    subsampling: subsampling_of(f.components, &f.sampling),
                    adobe_transform,
                    orientation: orientation.unwrap_or(1),
                    jfif,
                    icc,
                    restart_interval,
                    dnl,
                    turbo_refuses: bad_huffman
                        || (max_dc_symbol > 15 && !matches!(coding, Coding::Lossless | Coding::ArithmeticLossless))
                        || !sos_ok(seg, &f.ids)
                        || width.max(height) > TURBO_MAX_DIMENSION,
                });
            }
            _ => {}
        }
        i = next;
    }
}

/// libjpeg-turbo's checks on one DHT segment's payload (after its length): `get_dht`'s on the
/// segment, then `jpeg_make_d_derived_tbl`'s on each table (a prefix code whose codes of each
/// length fit it, with the all-ones code of that length left unused). `None` when one fails,
/// else the largest DC symbol (the caller checks it against 15 for the lossy codings).
fn dht_check(mut seg: &[u8]) -> Option<u8> {
    let mut max_dc = 0u8;
    while seg.len() > 16 {
        let (class, index) = (seg[0] >> 4, seg[0] & !0x10);
        let counts = &seg[1..17];
        let count: usize = counts.iter().map(|&c| c as usize).sum();
        let rest = seg.len() - 17;
        if count > 256 || count > rest || index >= 4 {
            return None;
        }
        // Canonical codes: after the codes of length l, the next code must still be below 2^l.
        let mut code = 0u32;
        for (l, &c) in counts.iter().enumerate() {
            code += c as u32;
            if code >= 1 << (l + 1) {
                return None;
            }
            code <<= 1;
        }
        if class == 0 {
            max_dc = seg[17..17 + count].iter().fold(max_dc, |m, &sym| m.max(sym));
        }
        seg = &seg[17 + count..];
    }
    seg.is_empty().then_some(max_dc)
}

/// libjpeg-turbo's `get_sos` checks on the first scan header's payload: 1 to 4 components, a
/// length that matches them, each one a component of the frame (`ids`), none twice.
fn sos_ok(seg: &[u8], ids: &[u8]) -> bool {
    let Some(&n) = seg.first() else { return false };
    let n = n as usize;
    if !(1..=4).contains(&n) || seg.len() != 1 + 2 * n + 3 {
        return false;
    }
    let named: Vec<u8> = (0..n).map(|k| seg[1 + 2 * k]).collect();
    named.iter().enumerate().all(|(k, id)| ids.contains(id) && !named[..k].contains(id))
}

#[cfg(test)]
mod huffman_tests {
    use super::parse;

    /// A baseline JPEG header (16 × 16, three components) with one DHT segment holding one
    /// table of `counts` (and as many symbols), plus `extra` bytes at the segment's end.
    fn with_dht(class_index: u8, counts: [u8; 16], symbols: usize, extra: usize) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x11, 8, 0, 16, 0, 16, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1];
        let payload = 1 + 16 + symbols + extra;
        b.extend_from_slice(&[0xFF, 0xC4]);
        b.extend_from_slice(&((payload + 2) as u16).to_be_bytes());
        b.push(class_index);
        b.extend_from_slice(&counts);
        b.extend(std::iter::repeat_n(0u8, symbols + extra));
        b.extend_from_slice(&SOS);
        b.extend_from_slice(&[0x12, 0x34, 0xFF, 0xD9]);
        b
    }

    /// A scan header naming the frame's three components (1, 2, 3), then Ss, Se, Ah/Al.
    const SOS: [u8; 14] = [0xFF, 0xDA, 0x00, 0x0C, 3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0];

    fn bad(b: &[u8]) -> bool {
        parse(b).unwrap().turbo_refuses
    }

    #[test]
    fn huffman_tables_are_checked_as_libjpeg_turbo_checks_them() {
        // Three codes of 2 bits (00, 01, 10), one of 3 (110): 111 stays unused, as JPEG asks.
        let mut counts = [0u8; 16];
        counts[1] = 3;
        counts[2] = 1;
        assert!(!bad(&with_dht(0x00, counts, 4, 0)), "a DC table");
        assert!(!bad(&with_dht(0x13, counts, 4, 0)), "AC table 3");
        assert!(bad(&with_dht(0x04, counts, 4, 0)), "DC table 4");
        assert!(bad(&with_dht(0x20, counts, 4, 0)), "class 2");
        assert!(bad(&with_dht(0x00, counts, 3, 0)), "fewer symbols than codes");
        assert!(bad(&with_dht(0x00, counts, 4, 3)), "bytes left over");
        assert!(bad(&with_dht(0x10, [17; 16], 260, 0)), "more than 256 codes");
        // jpeg_make_d_derived_tbl: codes that do not fit their length, the all-ones code used.
        let mut over = counts;
        over[2] = 2;
        assert!(bad(&with_dht(0x10, over, 5, 0)), "111 used");
        let mut two_of_one = [0u8; 16];
        two_of_one[0] = 2;
        assert!(bad(&with_dht(0x10, two_of_one, 2, 0)), "two 1-bit codes");
        let mut last = [0u8; 16];
        last[15] = 255;
        assert!(!bad(&with_dht(0x10, last, 255, 0)), "255 codes of 16 bits fit");
        // A DC symbol is a bit count, 0..=15; an AC symbol is any byte.
        let mut dc16 = with_dht(0x00, counts, 4, 0);
        let sym = 21 + 4 + 17;
        dc16[sym + 3] = 16;
        assert!(bad(&dc16), "DC symbol 16");
        dc16[21 + 4] = 0x10;
        assert!(!bad(&dc16), "AC symbol 16");
        // Two tables in one segment (after the 21-byte SOI + SOF, the DHT's 4 bytes of marker
        // and length, then its first table of 21 bytes).
        let mut two = with_dht(0x00, counts, 4, 0);
        let mut table = vec![0x11];
        table.extend_from_slice(&counts);
        table.extend([0u8; 4]);
        two.splice(21 + 4 + 21..21 + 4 + 21, table);
        let len = (u16::from_be_bytes([two[23], two[24]]) + 21).to_be_bytes();
        two[23..25].copy_from_slice(&len);
        assert!(!bad(&two));
    }

    /// `get_sos`: every component the first scan names is one of the frame's, none twice, and
    /// the length matches the count; and `JPEG_MAX_DIMENSION`.
    #[test]
    fn scan_headers_and_sides_are_checked_as_libjpeg_turbo_checks_them() {
        let mut counts = [0u8; 16];
        counts[0] = 1;
        let good = with_dht(0x00, counts, 1, 0);
        assert!(!bad(&good));
        let sos = good.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
        let with = |at: usize, v: u8| {
            let mut b = good.clone();
            b[sos + at] = v;
            b
        };
        assert!(bad(&with(4 + 2 * 2 + 1, 4)), "component 4 is not in the frame");
        assert!(bad(&with(4 + 2 * 2 + 1, 1)), "component 1 twice");
        assert!(bad(&with(4, 2)), "two components in a segment sized for three");
        assert!(bad(&with(4, 0)), "no components");
        // The SOF's height and width (bytes 5..9 of the file, after SOI and the SOF's length).
        let side = |w: u16, h: u16| {
            let mut b = good.clone();
            b[7..9].copy_from_slice(&h.to_be_bytes());
            b[9..11].copy_from_slice(&w.to_be_bytes());
            b
        };
        assert!(!bad(&side(65500, 16)));
        assert!(bad(&side(65501, 16)));
        assert!(bad(&side(16, 65535)));
        assert_eq!(parse(&side(65535, 16)).unwrap().width, 65535);
    }

    #[test]
    fn the_generators_jpegs_pass() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = crate::gen::GenConfig::new(40);
        cfg.seed = 3;
        crate::gen::generate(dir.path(), &cfg, &|_| {}).unwrap();
        let mut n = 0;
        for f in walk(dir.path()) {
            let b = std::fs::read(&f).unwrap();
            if b.starts_with(&[0xFF, 0xD8]) {
                assert!(!bad(&b), "{}", f.display());
                n += 1;
            }
        }
        assert!(n >= 30, "{n} JPEGs");
    }

    fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                v.extend(walk(&e.path()));
            } else {
                v.push(e.path());
            }
        }
        v
    }
}
