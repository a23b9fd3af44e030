//! Reading a row group's column chunks: one ranged read each, decoded in memory by the parquet
//! crate's page and column readers; and the cache of decoded row groups of per-sample mode.

use super::{Fetch, ParquetFile};
use crate::error::{Error, Result};
use bytes::{Buf, Bytes};
use parquet::basic::Type as PhysicalType;
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
    let chunk = Arc::new(Chunk { start, bytes });
    let rows = rg.num_rows().max(0) as usize;
    let pages = SerializedPageReader::new(chunk, cm, rows, None).map_err(|e| bad(e.to_string()))?;
    let descr = cm.column_descr_ptr();
    let max_def = descr.max_def_level();
    let mut reader = ColumnReaderImpl::<T>::new(descr, Box::new(pages));
    let (mut defs, mut values) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
    let mut got = 0;
    while got < rows {
        let (n, _, _) =
            reader.read_records(rows - got, (max_def > 0).then_some(&mut defs), None, &mut values).map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let present = if max_def > 0 { defs.iter().filter(|&&d| d == max_def).count() } else { got };
    if got != rows || present != values.len() {
        return Err(bad(format!("the column chunk holds {got} rows ({} values), but its row group says {rows}", values.len())));
    }
    Ok((defs, values, max_def))
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
