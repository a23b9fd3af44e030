//! Reading a row group's column chunks: one ranged read each, decoded in memory by the parquet
//! crate's page and column readers; and the cache of decoded row groups of per-sample mode.

use super::{Fetch, ParquetFile};
use crate::error::{Error, Result};
use bytes::{Buf, Bytes};
use parquet::basic::{Encoding, Type as PhysicalType};
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::column::reader::ColumnReaderImpl;
use parquet::data_type::{DataType, Int32Type, Int64Type};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

pub(super) fn column_name(file: &ParquetFile, col: usize) -> String {
    file.meta.file_metadata().schema_descr().column(col).path().string()
}

/// Read label column `col` of row group `r`: whether each row has a label, and the labels present.
pub(super) fn read_labels(fetch: &Fetch, file: &ParquetFile, r: u32, col: usize) -> Result<(Vec<bool>, Vec<i64>)> {
    let (defs, values, max_def) = if file.meta.row_group(r as usize).column(col).column_type() == PhysicalType::INT32 {
        let (d, v, m) = read_column::<Int32Type>(fetch, file, r, col)?;
        (d, v.into_iter().map(i64::from).collect(), m)
    } else {
        read_column::<Int64Type>(fetch, file, r, col)?
    };
    let rows = file.meta.row_group(r as usize).num_rows().max(0) as usize;
    let present = (0..rows).map(|i| max_def == 0 || defs[i] == max_def).collect();
    Ok((present, values))
}

/// A column chunk's byte range, or None when the footer gives it a negative start or length
/// (the parquet crate's `byte_range` asserts on those: a damaged footer must be an error
/// naming the file, not a panic; found by the `parquet` fuzz target).
pub(super) fn chunk_range(cm: &parquet::file::metadata::ColumnChunkMetaData) -> Option<(u64, u64)> {
    let start = cm.dictionary_page_offset().unwrap_or_else(|| cm.data_page_offset());
    let len = cm.compressed_size();
    (start >= 0 && len >= 0).then_some((start as u64, len as u64))
}

/// A column chunk's pages, each checked for what the parquet crate's column reader assumes
/// and panics on otherwise (found by the `parquet` fuzz target; a damaged file must be an error
/// naming it, not a panic): a dictionary-encoded data page only after the dictionary page;
/// version 1 bit-packed levels, and version 2 level lengths, inside the page's bytes; a binary
/// column's plain values (a 4-byte length, then the bytes) inside their page.
struct CheckedPages<P> {
    inner: P,
    check: PageCheck,
}

/// What [`CheckedPages`] checks, page by page.
struct PageCheck {
    dictionary: bool,
    max_rep: i16,
    max_def: i16,
    binary: bool,
}

/// The length marking a value missing from a binary column's plain page: longer than any page,
/// so the parquet crate's decoder, meeting it, returns its "not enough bytes" error.
const MISSING: [u8; 4] = u32::MAX.to_le_bytes();

/// How many of `want` plain binary values (each a little-endian u32 length and its bytes) lie
/// whole in `buf` from byte `at`.
fn plain_binaries(buf: &[u8], mut at: usize, want: usize) -> usize {
    let mut n = 0;
    while n < want {
        let Some(len) = buf.get(at..at.saturating_add(4)) else { break };
        let end = (at + 4).saturating_add(u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize);
        if end > buf.len() {
            break;
        }
        (at, n) = (end, n + 1);
    }
    n
}

/// The value count a DELTA_BINARY_PACKED header at the start of `b` declares (its third
/// ULEB128: after the block size and the miniblocks per block); None when it does not parse.
fn delta_count(b: &[u8]) -> Option<u64> {
    let mut at = 0;
    super::header::uleb128(b, &mut at)?;
    super::header::uleb128(b, &mut at)?;
    super::header::uleb128(b, &mut at)
}

impl PageCheck {
    fn new(descr: &parquet::schema::types::ColumnDescriptor) -> Self {
        Self {
            dictionary: false,
            max_rep: descr.max_rep_level(),
            max_def: descr.max_def_level(),
            binary: descr.physical_type() == PhysicalType::BYTE_ARRAY,
        }
    }

    /// Check `page`; a binary plain page with fewer whole values than level slots (which nulls
    /// allow) gets [`MISSING`] after them, so that a value the levels ask for and the page
    /// lacks is the decoder's error, not its panic (it reads a length without checking that 4
    /// bytes are left). That copies the page: only such pages, rare in image columns.
    fn check(&mut self, page: &mut Page) -> parquet::errors::Result<()> {
        let bad = |m: String| Err(parquet::errors::ParquetError::General(m));
        #[allow(deprecated)]
        if let (true, Page::DictionaryPage { buf, num_values, encoding: Encoding::PLAIN | Encoding::PLAIN_DICTIONARY, .. }) =
            (self.binary, &*page)
        {
            let whole = plain_binaries(buf, 0, *num_values as usize);
            if whole < *num_values as usize {
                return bad(format!("the dictionary page declares {num_values} values; {whole} lie whole in its {} bytes", buf.len()));
            }
        }
        if page.is_dictionary_page() {
            self.dictionary = true;
            return Ok(());
        }
        if matches!(page.encoding(), Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY) && !self.dictionary {
            return bad(format!("a {} data page before any dictionary page", page.encoding()));
        }
        let values_at = match *page {
            Page::DataPage { ref buf, num_values, def_level_encoding, rep_level_encoding, .. } => {
                // Where each level run ends, as the column reader will slice them; None where
                // the column reader finds the levels bad itself.
                let mut at = Some(0usize);
                for (max, encoding) in [(self.max_rep, rep_level_encoding), (self.max_def, def_level_encoding)] {
                    let Some(from) = at.filter(|_| max > 0) else { continue };
                    #[allow(deprecated)]
                    let len = match encoding {
                        // A length prefix; the column reader checks the run against the page.
                        Encoding::RLE => {
                            buf.get(from..from + 4).map(|b| 4 + i32::from_le_bytes(b.try_into().expect("4 bytes")).max(0) as usize)
                        }
                        Encoding::BIT_PACKED => Some((num_values as usize * (16 - max.leading_zeros()) as usize).div_ceil(8)),
                        _ => None,
                    };
                    at = len.map(|len| from.saturating_add(len));
                    if let Some(end) = at.filter(|&end| end > buf.len()) {
                        return bad(format!("the levels need {end} bytes of a {}-byte data page", buf.len()));
                    }
                }
                at
            }
            Page::DataPageV2 { ref buf, def_levels_byte_len, rep_levels_byte_len, .. } => {
                let levels = def_levels_byte_len as u64 + rep_levels_byte_len as u64;
                if levels > buf.len() as u64 {
                    return bad(format!("the levels take {levels} bytes of a {}-byte data page", buf.len()));
                }
                Some(levels as usize)
            }
            Page::DictionaryPage { .. } => None,
        };
        if let (Some(at), true, Encoding::DELTA_LENGTH_BYTE_ARRAY | Encoding::DELTA_BYTE_ARRAY) = (values_at, self.binary, page.encoding())
        {
            // The crate makes room for as many lengths as the first DELTA_BINARY_PACKED header
            // declares, before it decodes one: more than the page's slots is damage, and would
            // be an allocation of up to 2^64 lengths (an abort, not a panic).
            let slots = page.num_values() as u64;
            if let Some(declared) = delta_count(page.buffer().get(at..).unwrap_or_default()).filter(|&n| n > slots) {
                return bad(format!("the {} page declares {declared} lengths for its {slots} values", page.encoding()));
            }
        }
        if let (Some(at), true, Encoding::PLAIN) = (values_at, self.binary, page.encoding()) {
            let slots = page.num_values() as usize;
            if let Page::DataPage { buf, .. } | Page::DataPageV2 { buf, .. } = page {
                if plain_binaries(buf, at, slots) < slots {
                    *buf = [&buf[..], &MISSING[..]].concat().into();
                }
            }
        }
        Ok(())
    }
}

impl<P: PageReader> Iterator for CheckedPages<P> {
    type Item = parquet::errors::Result<Page>;
    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<P: PageReader> PageReader for CheckedPages<P> {
    fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
        let mut page = self.inner.get_next_page()?;
        if let Some(p) = &mut page {
            self.check.check(p)?;
        }
        Ok(page)
    }
    fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
        self.inner.peek_next_page()
    }
    fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
        self.inner.skip_next_page()
    }
    fn at_record_boundary(&mut self) -> parquet::errors::Result<bool> {
        self.inner.at_record_boundary()
    }
}

/// Read column chunk `col` of row group `rg` (one ranged read) and decode every row:
/// definition levels (empty when the column is required), non-null values, and the
/// definition level of a present value.
pub(super) fn read_column<T: DataType>(fetch: &Fetch, file: &ParquetFile, r: u32, col: usize) -> Result<(Vec<i16>, Vec<T::T>, i16)> {
    let rg = file.meta.row_group(r as usize);
    let cm = rg.column(col);
    let name = column_name(file, col);
    let bad = |m: String| Error::dataset(&file.path, format!("row group {r}, column {name}: {m}"));
    let (start, len) = chunk_range(cm).ok_or_else(|| bad("damaged footer: a negative column chunk offset or length".into()))?;
    if start.checked_add(len).is_none_or(|end| end > file.size) {
        return Err(bad(format!(
            "truncated Parquet file: the column chunk spans bytes {start}..{} but the file has {} bytes",
            start.saturating_add(len),
            file.size
        )));
    }
    let bytes = fetch.range(&file.path, start..start + len)?;
    super::header::check_page_sizes(&bytes, cm.compression() != parquet::basic::Compression::UNCOMPRESSED).map_err(bad)?;
    let chunk = Arc::new(Chunk { start, bytes });
    let rows = rg.num_rows().max(0) as usize;
    let pages = SerializedPageReader::new(chunk, cm, rows, None).map_err(|e| bad(e.to_string()))?;
    let descr = cm.column_descr_ptr();
    let max_def = descr.max_def_level();
    let pages = CheckedPages { inner: pages, check: PageCheck::new(&descr) };
    let mut reader = ColumnReaderImpl::<T>::new(descr, Box::new(pages));
    let (mut defs, mut values) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
    let got = read_rows(&mut reader, rows, max_def, &mut defs, &mut values).map_err(bad)?;
    let present = if max_def > 0 { defs.iter().filter(|&&d| d == max_def).count() } else { got };
    if got != rows || present != values.len() {
        return Err(bad(format!("the column chunk holds {got} rows ({} values), but its row group says {rows}", values.len())));
    }
    Ok((defs, values, max_def))
}

/// Up to `rows` rows of `reader` into `defs` (when `max_def > 0`) and `values`: the rows read.
/// The parquet crate's decoders trust parts of a page that [`CheckedPages`] does not check (a
/// `DELTA_LENGTH_BYTE_ARRAY` page's lengths slice its bytes unchecked; a varint longer than 10
/// bytes asserts): a panic in them is this column chunk's error, not the reader thread's, and the
/// other row groups still read.
fn read_rows<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    rows: usize,
    max_def: i16,
    defs: &mut Vec<i16>,
    values: &mut Vec<T::T>,
) -> std::result::Result<usize, String> {
    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut got = 0;
        while got < rows {
            let (n, _, _) = reader.read_records(rows - got, (max_def > 0).then_some(&mut *defs), None, &mut *values)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }));
    match read {
        Ok(r) => r.map_err(|e: parquet::errors::ParquetError| e.to_string()),
        Err(p) => Err(format!("the parquet crate panicked decoding the column chunk: {}", crate::error::panic_message(&*p))),
    }
}

/// A column chunk in memory, read by the parquet crate at its offsets in the file.
struct Chunk {
    start: u64,
    bytes: Bytes,
}

impl Chunk {
    fn slice(&self, start: u64, len: Option<usize>) -> parquet::errors::Result<Bytes> {
        let at = start.checked_sub(self.start).map(|a| a as usize).filter(|&a| a <= self.bytes.len());
        let at = at.ok_or_else(|| parquet::errors::ParquetError::EOF(format!("byte {start} is outside the column chunk read")))?;
        let end = len.map_or(Some(self.bytes.len()), |l| at.checked_add(l)).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| parquet::errors::ParquetError::EOF(format!("the page at byte {start} runs past its column chunk")))?;
        Ok(self.bytes.slice(at..end))
    }
}

impl Length for Chunk {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for Chunk {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(self.slice(start, None)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.slice(start, Some(length))
    }
}

/// Decoded row groups kept for per-sample reads, least recently used dropped first, at most
/// `limit` bytes of images.
#[derive(Debug)]
pub(super) struct GroupCache {
    pub(super) limit: u64,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    groups: HashMap<usize, (Arc<super::Decoded>, u64)>,
    order: VecDeque<usize>,
    bytes: u64,
}

impl std::fmt::Debug for CacheInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} row groups, {} bytes", self.groups.len(), self.bytes)
    }
}

impl GroupCache {
    pub(super) fn new(limit: u64) -> Self {
        Self { limit, inner: Mutex::default() }
    }

    pub(super) fn get(&self, g: usize) -> Option<Arc<super::Decoded>> {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let d = c.groups.get(&g)?.0.clone();
        if let Some(at) = c.order.iter().position(|&x| x == g) {
            c.order.remove(at);
        }
        c.order.push_back(g);
        Some(d)
    }

    pub(super) fn put(&self, g: usize, d: Arc<super::Decoded>, bytes: u64) {
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if c.groups.contains_key(&g) {
            return; // another reader decoded it meanwhile
        }
        while c.bytes + bytes > self.limit {
            let Some(old) = c.order.pop_front() else { break };
            if let Some((_, b)) = c.groups.remove(&old) {
                c.bytes -= b;
            }
        }
        c.groups.insert(g, (d, bytes));
        c.order.push_back(g);
        c.bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::data_type::ByteArrayType;
    use parquet::schema::types::SchemaDescriptor;

    /// Pages handed over as they are.
    struct VecPages(VecDeque<Page>);

    impl Iterator for VecPages {
        type Item = parquet::errors::Result<Page>;
        fn next(&mut self) -> Option<Self::Item> {
            self.0.pop_front().map(Ok)
        }
    }

    impl PageReader for VecPages {
        fn get_next_page(&mut self) -> parquet::errors::Result<Option<Page>> {
            Ok(self.0.pop_front())
        }
        fn peek_next_page(&mut self) -> parquet::errors::Result<Option<PageMetadata>> {
            Ok(None)
        }
        fn skip_next_page(&mut self) -> parquet::errors::Result<()> {
            self.0.pop_front();
            Ok(())
        }
    }

    fn image_column() -> Arc<parquet::schema::types::ColumnDescriptor> {
        let schema = parquet::schema::parser::parse_message_type("message m { optional binary image; }").unwrap();
        SchemaDescriptor::new(Arc::new(schema)).column(0)
    }

    fn v1(buf: &[u8], encoding: Encoding, def: Encoding) -> Page {
        Page::DataPage {
            buf: Bytes::copy_from_slice(buf),
            num_values: 40,
            encoding,
            def_level_encoding: def,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        }
    }

    fn v2(buf: &[u8], def_len: u32) -> Page {
        Page::DataPageV2 {
            buf: Bytes::copy_from_slice(buf),
            num_values: 4,
            encoding: Encoding::PLAIN,
            num_nulls: 0,
            num_rows: 4,
            def_levels_byte_len: def_len,
            rep_levels_byte_len: 0,
            is_compressed: false,
            statistics: None,
        }
    }

    /// A version 1 DELTA_LENGTH_BYTE_ARRAY page of one value, present by its RLE level: `values`
    /// after the levels.
    fn delta_length(values: &[u8]) -> Page {
        Page::DataPage {
            buf: [&[2u8, 0, 0, 0, 1 << 1, 1][..], values].concat().into(),
            num_values: 1,
            encoding: Encoding::DELTA_LENGTH_BYTE_ARRAY,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        }
    }

    fn dictionary(buf: &[u8], num_values: u32) -> Page {
        Page::DictionaryPage { buf: Bytes::copy_from_slice(buf), num_values, encoding: Encoding::PLAIN, is_sorted: false }
    }

    /// Plain binary values of these lengths (each a u32 length and that many bytes), then `tail`.
    fn values(lens: &[u32], tail: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        for &n in lens {
            b.extend(n.to_le_bytes());
            b.extend((0..n).map(|i| i as u8 + 7));
        }
        b.extend(tail);
        b
    }

    /// A page of `slots` values, all present by their RLE levels (version 1: a length prefix;
    /// 2: the levels' length in the header), holding `values`.
    fn plain(version: u8, slots: u8, values: Vec<u8>) -> Page {
        let levels = [slots << 1, 1];
        match version {
            1 => Page::DataPage {
                buf: [&[2, 0, 0, 0][..], &levels, &values].concat().into(),
                num_values: slots as u32,
                encoding: Encoding::PLAIN,
                def_level_encoding: Encoding::RLE,
                rep_level_encoding: Encoding::RLE,
                statistics: None,
            },
            _ => Page::DataPageV2 {
                buf: [&levels[..], &values].concat().into(),
                num_values: slots as u32,
                encoding: Encoding::PLAIN,
                num_nulls: 0,
                num_rows: slots as u32,
                def_levels_byte_len: 2,
                rep_levels_byte_len: 0,
                is_compressed: false,
                statistics: None,
            },
        }
    }

    /// Records read and the values' bytes.
    type Read = parquet::errors::Result<(usize, Vec<Vec<u8>>)>;

    /// The column reader over `pages`: checked or not; `Err` with the panic's text when it panicked.
    fn read(pages: Vec<Page>, checked: bool) -> std::result::Result<Read, String> {
        let descr = image_column();
        let pages = VecPages(pages.into());
        let reader: Box<dyn PageReader> = match checked {
            true => Box::new(CheckedPages { inner: pages, check: PageCheck::new(&descr) }),
            false => Box::new(pages),
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut r = ColumnReaderImpl::<ByteArrayType>::new(descr, reader);
            let (mut defs, mut values) = (Vec::new(), Vec::new());
            let n = r.read_records(40, Some(&mut defs), None, &mut values).map(|(n, _, _)| n);
            n.map(|n| (n, values.iter().map(|v| v.data().to_vec()).collect()))
        }))
        .map_err(|p| p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
    }

    #[test]
    fn pages_the_column_reader_would_panic_on_are_errors() {
        #[allow(deprecated)]
        let bit_packed = Encoding::BIT_PACKED;
        let cases = [
            // A dictionary-encoded data page with no dictionary page before it (the fuzz
            // target's input).
            (vec![v1(&[2, 0, 0, 0, 0x50, 1], Encoding::RLE_DICTIONARY, Encoding::RLE)], "before any dictionary page"),
            // Forty bit-packed definition levels need 5 bytes; the page has 3.
            (vec![v1(&[0xff, 0xff, 0xff], Encoding::PLAIN, bit_packed)], "the levels need 5 bytes of a 3-byte data page"),
            // Version 2 levels longer than the page.
            (vec![v2(&[1, 2, 3], 9)], "the levels take 9 bytes of a 3-byte data page"),
            // A dictionary page declaring two values and holding one (the fuzz target's input
            // in CI), then a data page using it.
            (
                vec![dictionary(&[1, 0, 0, 0, 9], 2), v1(&[2, 0, 0, 0, 0x50, 1], Encoding::RLE_DICTIONARY, Encoding::RLE)],
                "the dictionary page declares 2 values; 1 lie whole in its 5 bytes",
            ),
            // Four values present by their levels; the page holds three, then nothing, or
            // then two bytes of a fourth length; in either page version.
            (vec![plain(1, 4, values(&[1, 1, 1], &[]))], "Not enough bytes"),
            (vec![plain(1, 4, values(&[1, 1, 1], &[5, 0]))], "Not enough bytes"),
            (vec![plain(2, 4, values(&[1, 2, 3], &[]))], "Not enough bytes"),
        ];
        // A DELTA_LENGTH_BYTE_ARRAY page of one value declaring 2^40 lengths: the crate would
        // make room for them all (an abort past the allocator; under the test's 24 GiB, not
        // tried unchecked).
        let page = delta_length(&[0x80, 0x01, 0x04, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0xC8, 0x01, 7, 8, 9]);
        let e = read(vec![page], true).unwrap().unwrap_err().to_string();
        assert!(e.contains("the DELTA_LENGTH_BYTE_ARRAY page declares 1099511627776 lengths for its 1 values"), "{e}");
        for (pages, says) in cases {
            let what = format!("{:?}", pages.iter().map(|p| (p.page_type(), p.encoding())).collect::<Vec<_>>());
            assert!(read(pages.clone(), false).is_err(), "{what}: the parquet crate no longer panics on it; is the check still needed?");
            let e = read(pages, true).unwrap_or_else(|p| panic!("{what}: panicked through the check: {p}")).unwrap_err().to_string();
            assert!(e.contains(says), "{what}: {e}");
        }
    }

    #[test]
    fn a_panic_inside_the_parquet_crate_is_the_column_chunks_error() {
        // One value present; DELTA_LENGTH_BYTE_ARRAY: block of 128 in 4 miniblocks, 1 value,
        // the first length 100 (zigzag 200); then 3 bytes, where the crate slices 100 unchecked.
        let page = delta_length(&[0x80, 0x01, 0x04, 0x01, 0xC8, 0x01, 7, 8, 9]);
        assert!(read(vec![page.clone()], true).is_err(), "the parquet crate no longer panics on it; is the catch still needed?");
        let pages = CheckedPages { inner: VecPages(vec![page].into()), check: PageCheck::new(&image_column()) };
        let mut reader = ColumnReaderImpl::<ByteArrayType>::new(image_column(), Box::new(pages));
        let e = read_rows(&mut reader, 1, 1, &mut Vec::new(), &mut Vec::new()).unwrap_err();
        assert!(e.contains("the parquet crate panicked decoding the column chunk"), "{e}");
    }

    #[test]
    fn well_formed_pages_pass_the_check() {
        #[allow(deprecated)]
        let bit_packed = Encoding::BIT_PACKED;
        // Four values of 1 byte each after the levels: all present (level 1).
        let four = values(&[1, 1, 1, 1], &[]);
        let mut check = PageCheck::new(&image_column());
        // Forty bit-packed levels in 5 bytes, then the values.
        let mut page = vec![0xffu8; 5];
        page.extend(&four);
        assert!(check.check(&mut v1(&page, Encoding::PLAIN, bit_packed)).is_ok());
        assert!(check.check(&mut v2(&[0; 9], 9)).is_ok());
        // A dictionary page, then a dictionary-encoded data page.
        let dict =
            Page::DictionaryPage { buf: Bytes::from_static(&[0, 0, 0, 0]), num_values: 1, encoding: Encoding::PLAIN, is_sorted: false };
        assert!(check.check(&mut v1(&[2, 0, 0, 0, 0x50, 1], Encoding::RLE_DICTIONARY, Encoding::RLE)).is_err());
        assert!(check.check(&mut dict.clone()).is_ok());
        assert!(check.check(&mut v1(&[2, 0, 0, 0, 0x50, 1], Encoding::RLE_DICTIONARY, Encoding::RLE)).is_ok());
        // Four values present and whole: the page passes as it is (not copied), and reads.
        let mut page = plain(1, 4, values(&[1, 2, 0, 3], &[]));
        let at = page.buffer().as_ptr();
        check.check(&mut page).unwrap();
        assert_eq!(page.buffer().as_ptr(), at);
        let (n, got) = read(vec![page], true).unwrap().unwrap();
        assert_eq!((n, got.iter().map(Vec::len).collect::<Vec<_>>()), (4, vec![1, 2, 0, 3]));
        assert_eq!(got[1], [7, 8]);
        // Two of four null (levels 1, 1, 0, 0), two values: what a page with nulls holds. The
        // check adds its marker after them; they read as they would without it.
        let rle = |levels: &[u8]| -> Vec<u8> { [&(levels.len() as u32).to_le_bytes()[..], levels].concat() };
        let page = |tail: &[u8]| Page::DataPage {
            buf: [rle(&[2 << 1, 1, 2 << 1, 0]), values(&[2, 1], tail)].concat().into(),
            num_values: 4,
            encoding: Encoding::PLAIN,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let unchecked = read(vec![page(&[])], false).unwrap().unwrap();
        assert_eq!(unchecked.0, 4);
        assert_eq!(read(vec![page(&[])], true).unwrap().unwrap(), unchecked);
        let mut checked = page(&[]);
        check.check(&mut checked).unwrap();
        assert!(checked.buffer().ends_with(&MISSING));
    }
}
