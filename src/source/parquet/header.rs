//! The sizes a column chunk's page headers declare, read before the parquet crate reads them:
//! it allocates a compressed page's declared uncompressed size (an i32, up to 2 GiB) before
//! decompressing, and its snappy codec fills that with zeros first, so a damaged header made a
//! reader thread hold ~2 GiB for one page of a few bytes (found by the `parquet` fuzz target: 1.9 GiB resident for a
//! 2 KiB file). A page may declare at most [`MAX_RATIO`] times its compressed bytes, or
//! [`MAX_SMALL`] whatever they are.
//!
//! A page header is a Thrift struct in the compact protocol (parquet.thrift `PageHeader`:
//! field 2 `uncompressed_page_size`, field 3 `compressed_page_size`, both i32); the rest of
//! each header is skipped field by field, by type, only to find where its page starts.

/// A page may decompress to this many times its compressed size...
pub(super) const MAX_RATIO: u64 = 64;
/// ...or to this many bytes, whichever is more (a small page of a very compressible column:
/// a million equal labels).
pub(super) const MAX_SMALL: u64 = 64 << 20;

/// Nesting deeper than this is damage (a page header nests two structs at most).
const MAX_DEPTH: usize = 16;

/// One page header: its length in bytes and the two sizes it declares.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct PageSizes {
    pub(super) header_len: usize,
    pub(super) uncompressed: i32,
    pub(super) compressed: i32,
}

/// Check every page header of a column chunk's bytes for a declared size past the bound, and
/// that each parses: `Err` names the page. (A header the walk cannot parse is refused here, not
/// left to the parquet crate, whose Thrift reader spent 20 s under the fuzz target's sanitizer
/// skipping through one damaged header of a 3 KiB file.)
pub(super) fn check_page_sizes(chunk: &[u8], compressed_codec: bool) -> Result<(), String> {
    let mut at = 0usize;
    let mut page = 0usize;
    while at < chunk.len() {
        let h = page_sizes(&chunk[at..]).filter(|h| h.uncompressed >= 0 && h.compressed >= 0);
        let Some(h) = h else { return Err(format!("page {page} at byte {at} of its column chunk: a damaged page header")) };
        let (u, c) = (h.uncompressed as u64, h.compressed as u64);
        if compressed_codec && u > (c * MAX_RATIO).max(MAX_SMALL) {
            return Err(format!(
                "page {page} at byte {at} of its column chunk declares {u} bytes uncompressed from {c} compressed: \
                 more than {MAX_RATIO} times its bytes (a damaged page header)"
            ));
        }
        at = at.saturating_add(h.header_len).saturating_add(c as usize);
        page += 1;
    }
    Ok(())
}

/// The sizes the page header at the start of `b` declares, and its length; `None` when it does
/// not parse as a compact-protocol struct holding both.
pub(super) fn page_sizes(b: &[u8]) -> Option<PageSizes> {
    let mut r = Compact { b, at: 0 };
    let (mut uncompressed, mut compressed) = (None, None);
    r.fields(0, |r, id, ty| {
        match (id, ty) {
            (2, I32) => uncompressed = Some(r.int()? as i32),
            (3, I32) => compressed = Some(r.int()? as i32),
            _ => r.skip(ty, 1)?,
        }
        Some(())
    })?;
    Some(PageSizes { header_len: r.at, uncompressed: uncompressed?, compressed: compressed? })
}

// Compact-protocol type ids (Thrift's TCompactProtocol).
const TRUE: u8 = 1;
const FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;

/// The ULEB128 varint at `b[*at..]` (Thrift's compact protocol and parquet's
/// DELTA_BINARY_PACKED headers both write them), `at` moved past it; `None` when `b` ends first
/// or the varint runs past 10 bytes or 64 bits.
pub(super) fn uleb128(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= ((byte & 0x7f) as u64).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

struct Compact<'a> {
    b: &'a [u8],
    at: usize,
}

impl Compact<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn varint(&mut self) -> Option<u64> {
        uleb128(self.b, &mut self.at)
    }

    /// A zigzag varint (i16, i32, i64 alike).
    fn int(&mut self) -> Option<i64> {
        let u = self.varint()?;
        Some((u >> 1) as i64 ^ -((u & 1) as i64))
    }

    fn advance(&mut self, n: u64) -> Option<()> {
        let end = self.at.checked_add(usize::try_from(n).ok()?)?;
        (end <= self.b.len()).then(|| self.at = end)
    }

    /// A struct's fields until its stop byte, each handed to `field(self, id, type)`, which
    /// must consume its value.
    fn fields(&mut self, depth: usize, mut field: impl FnMut(&mut Self, i16, u8) -> Option<()>) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut last = 0i16;
        loop {
            let head = self.byte()?;
            if head == 0 {
                return Some(());
            }
            let ty = head & 0x0f;
            let id = match head >> 4 {
                0 => i16::try_from(self.int()?).ok()?,
                delta => last.checked_add(delta as i16)?,
            };
            last = id;
            field(self, id, ty)?;
        }
    }

    /// Skip a value of type `ty`.
    fn skip(&mut self, ty: u8, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match ty {
            // A struct field's booleans are in its type; a list's take a byte each.
            TRUE | FALSE => Some(()),
            BYTE => self.advance(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.advance(8),
            BINARY => {
                let n = self.varint()?;
                self.advance(n)
            }
            LIST | SET => {
                let head = self.byte()?;
                let n = match head >> 4 {
                    15 => self.varint()?,
                    n => n as u64,
                };
                let elem = head & 0x0f;
                for _ in 0..n {
                    match elem {
                        TRUE | FALSE => self.advance(1)?,
                        _ => self.skip(elem, depth + 1)?,
                    }
                }
                Some(())
            }
            MAP => {
                let n = self.varint()?;
                if n == 0 {
                    return Some(());
                }
                let kinds = self.byte()?;
                for _ in 0..n {
                    for t in [kinds >> 4, kinds & 0x0f] {
                        match t {
                            TRUE | FALSE => self.advance(1)?,
                            _ => self.skip(t, depth + 1)?,
                        }
                    }
                }
                Some(())
            }
            STRUCT => self.fields(depth + 1, |r, _, t| r.skip(t, depth + 1)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use parquet::basic::{Compression, ZstdLevel};
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::{WriterProperties, WriterVersion};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::SerializedFileWriter;
    use std::sync::Arc;

    /// A file of two row groups written by the parquet crate: 40 binary values of 50–250 bytes
    /// in pages of about 1 KiB, with page statistics (binary min/max inside each header), and 40
    /// labels with nulls, dictionary-encoded.
    fn written(compression: Compression, version: WriterVersion) -> Bytes {
        let schema = parquet::schema::parser::parse_message_type("message m { required binary image; optional int64 label; }").unwrap();
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_writer_version(version)
            .set_data_page_size_limit(1024)
            .set_write_batch_size(4)
            .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Page)
            .build();
        let mut w = SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(props)).unwrap();
        for g in 0..2u8 {
            let mut rg = w.next_row_group().unwrap();
            let images: Vec<ByteArray> =
                (0..40u8).map(|i| ByteArray::from((0..50 + i as usize * 5).map(|k| (k as u8) ^ i ^ g).collect::<Vec<u8>>())).collect();
            let mut c = rg.next_column().unwrap().unwrap();
            c.typed::<ByteArrayType>().write_batch(&images, None, None).unwrap();
            c.close().unwrap();
            let defs: Vec<i16> = (0..40).map(|i| (i % 7 != 3) as i16).collect();
            let labels: Vec<i64> = (0..40).filter(|i| i % 7 != 3).map(|i| i % 5).collect();
            let mut c = rg.next_column().unwrap().unwrap();
            c.typed::<Int64Type>().write_batch(&labels, Some(&defs), None).unwrap();
            c.close().unwrap();
            rg.close().unwrap();
        }
        w.into_inner().unwrap().into()
    }

    #[test]
    fn the_walk_finds_every_page_the_parquet_crate_reads_with_its_sizes() {
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            for compression in [Compression::UNCOMPRESSED, Compression::SNAPPY, Compression::ZSTD(ZstdLevel::default())] {
                let file = written(compression, version);
                let reader = SerializedFileReader::new(file.clone()).unwrap();
                for g in 0..reader.num_row_groups() {
                    let rg = reader.get_row_group(g).unwrap();
                    for c in 0..2 {
                        let cm = rg.metadata().column(c);
                        let (start, len) = super::super::read::chunk_range(cm).unwrap();
                        let chunk = &file[start as usize..(start + len) as usize];
                        // The crate's pages, uncompressed: their sizes as the walk reads them.
                        let mut theirs = Vec::new();
                        let mut pages = rg.get_column_page_reader(c).unwrap();
                        while let Some(p) = pages.get_next_page().unwrap() {
                            theirs.push(p.buffer().len());
                        }
                        let mut ours = Vec::new();
                        let mut at = 0;
                        while at < chunk.len() {
                            let h = page_sizes(&chunk[at..]).unwrap_or_else(|| panic!("{version:?} {compression}: no header at {at}"));
                            ours.push(h.uncompressed as usize);
                            at += h.header_len + h.compressed as usize;
                        }
                        let what = format!("{version:?} {compression} row group {g} column {c}");
                        assert_eq!(at, chunk.len(), "{what}: the walk ends at the chunk's end");
                        assert!(theirs.len() >= 2, "{what}: {} pages", theirs.len());
                        assert_eq!(ours, theirs, "{what}: uncompressed sizes");
                        assert_eq!(check_page_sizes(chunk, compression != Compression::UNCOMPRESSED), Ok(()));
                    }
                }
            }
        }
    }

    /// A DATA_PAGE header (compact protocol): type 0, then the sizes, then a data page header
    /// struct (field 5: 12 values, encoding 0, 3, 3), stop.
    fn header(uncompressed: i64, compressed: i64) -> Vec<u8> {
        let zigzag = |v: i64| -> Vec<u8> {
            let mut u = ((v << 1) ^ (v >> 63)) as u64;
            let mut out = Vec::new();
            loop {
                let b = (u & 0x7f) as u8;
                u >>= 7;
                if u == 0 {
                    out.push(b);
                    return out;
                }
                out.push(b | 0x80);
            }
        };
        let mut h = vec![0x15, 0x00, 0x15];
        h.extend(zigzag(uncompressed));
        h.push(0x15);
        h.extend(zigzag(compressed));
        h.extend([0x2c, 0x15, 24, 0x15, 0, 0x15, 6, 0x15, 6, 0x00, 0x00]);
        h
    }

    #[test]
    fn a_page_declaring_far_more_than_its_bytes_is_refused_before_it_is_read() {
        let h = header(2_000_000_000, 100);
        let s = page_sizes(&h).unwrap();
        assert_eq!((s.header_len, s.uncompressed, s.compressed), (h.len(), 2_000_000_000, 100));
        let mut chunk = header(300, 100);
        chunk.extend([7; 100]);
        let ok_len = chunk.len();
        chunk.extend(&h);
        chunk.extend([7; 100]);
        let e = check_page_sizes(&chunk, true).unwrap_err();
        assert!(e.contains(&format!("page 1 at byte {ok_len} of its column chunk declares 2000000000 bytes uncompressed from 100")), "{e}");
        // Uncompressed chunks are never inflated: nothing to guard.
        assert_eq!(check_page_sizes(&chunk, false), Ok(()));
        // At the bound: 64 × 100 bytes is under the 64 MiB floor; 64 MiB passes, one more not.
        assert_eq!(check_page_sizes(&[header(MAX_SMALL as i64, 100), vec![0; 100]].concat(), true), Ok(()));
        assert!(check_page_sizes(&[header(MAX_SMALL as i64 + 1, 100), vec![0; 100]].concat(), true).is_err());
        let big = 2 << 20;
        assert_eq!(check_page_sizes(&[header(big * MAX_RATIO as i64, big), vec![0; big as usize]].concat(), true), Ok(()));
    }

    #[test]
    fn damaged_headers_end_the_walk_without_a_panic() {
        let h = header(300, 100);
        // Every prefix, and every byte changed to each of a few values: no panic; a prefix
        // that cuts the header parses to nothing and is refused.
        for n in 0..h.len() {
            assert_eq!(page_sizes(&h[..n]), None, "prefix {n}");
            if n > 0 {
                let e = check_page_sizes(&h[..n], true).unwrap_err();
                assert!(e.contains("page 0 at byte 0 of its column chunk: a damaged page header"), "{e}");
            }
        }
        for i in 0..h.len() {
            for v in [0x00, 0x0f, 0x19, 0x1c, 0x80, 0xff] {
                let mut d = h.clone();
                d[i] = v;
                let _ = page_sizes(&d);
                let _ = check_page_sizes(&d, true);
            }
        }
        // Nested structs past the depth limit; a varint past 10 bytes.
        assert_eq!(page_sizes(&[0x1c; 64]), None);
        assert_eq!(page_sizes(&[&[0x15, 0x00, 0x15][..], &[0x80; 11], &[0x01]].concat()), None);
    }
}
