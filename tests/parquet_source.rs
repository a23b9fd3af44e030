//! Hugging Face Parquet data sets (`stoke::source::parquet`), against independent references:
//! files written here with the parquet crate's own writer, as HF lays them out (an
//! `image: struct<bytes, path>` column, an int64 `label` whose class names are in the
//! `huggingface` metadata), snappy and zstd. A sample's bytes must be the JPEG written; the
//! batches of stream mode and of per-sample mode must be those of the same images in tar shards
//! of the same sizes; bad input is named.

mod parquet_common;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet_common::{clean, config, jpeg, sample, tempdir, write_both, write_hf, RowIn, COUNTS, NAMES};
use std::path::Path;
use std::sync::Arc;
use stoke::config::{OnError, StreamSpec};
use stoke::pipeline::Pipeline;
use stoke::source::{Dataset, IndexOptions};

/// One delivered sample: position, dataset index, label, pixels.
type Got = (u64, usize, i64, Vec<u8>);

fn epoch(p: &mut Pipeline, e: u64) -> (Vec<Got>, usize) {
    p.start_epoch(e, 0);
    let (mut out, mut subs) = (Vec::new(), 0);
    while let Some(b) = p.next_batch() {
        let b = b.unwrap();
        subs += b.substitutes.len();
        let bytes = b.host_bytes().unwrap();
        let per = bytes.len() / b.positions.len();
        for k in 0..b.positions.len() {
            out.push((b.positions[k], b.indices[k], b.labels[k], bytes[k * per..(k + 1) * per].to_vec()));
        }
    }
    (out, subs)
}

#[test]
fn stream_mode_over_parquet_delivers_the_batches_of_the_same_images_in_tar_shards() {
    let dir = tempdir("stream");
    write_both(&dir, clean());
    let mut pq = Pipeline::new(config(&dir.join("data"), true)).unwrap();
    let mut tar = Pipeline::new(config(&dir.join("tar"), true)).unwrap();
    let set = &pq.stream_source().unwrap().set;
    assert_eq!(set.counts(), COUNTS.map(|c| c as u64).to_vec(), "one shard per row group");
    assert_eq!(set.parquet.as_ref().unwrap().classes, NAMES.map(String::from).to_vec(), "class names from the ClassLabel");
    assert_eq!(pq.stream_source().unwrap().classes(), 5);
    // What the CUDA backend sizes its buffers by: each row group's largest image, measured.
    let largest = set.parquet.as_ref().unwrap().largest(2);
    let mut k = 0;
    for (g, &n) in COUNTS.iter().enumerate() {
        let dims: Vec<(u64, u32, u32)> =
            (k..k + n).map(|k| (jpeg(k).len() as u64, 24 + (k % 4) as u32 * 8, 20 + (k % 3) as u32 * 8)).collect();
        let l = largest[g];
        assert_eq!(l.bytes, dims.iter().map(|d| d.0).max().unwrap(), "row group {g}");
        assert_eq!((l.width, l.height), (dims.iter().map(|d| d.1).max().unwrap(), dims.iter().map(|d| d.2).max().unwrap()));
        assert_eq!((l.pixels, l.headerless), (dims.iter().map(|d| d.1 as u64 * d.2 as u64).max().unwrap(), 0));
        k += n;
    }
    // Other thread counts: the same batches.
    let mut c = config(&dir.join("data"), true);
    (c.reader_threads, c.cpu_threads) = (3, 2);
    let mut threads = Pipeline::new(c).unwrap();
    for e in 0..3 {
        let (a, sa) = epoch(&mut pq, e);
        let (b, sb) = epoch(&mut tar, e);
        assert_eq!((sa, sb), (0, 0));
        assert_eq!(a.len(), 58, "epoch {e}: every sample once");
        let mut idx: Vec<usize> = a.iter().map(|g| g.1).collect();
        idx.sort();
        assert_eq!(idx, (0..58).collect::<Vec<_>>(), "epoch {e}: each sample exactly once");
        assert!(a == b, "epoch {e}: the Parquet batches are the tar batches, pixel for pixel");
        assert!(epoch(&mut threads, e).0 == a, "epoch {e}: 3 readers and 2 workers give the same batches");
    }
    assert!(pq.stats().shards_read_ahead > 0, "the next epoch's first row groups were read ahead");
}

#[test]
fn per_sample_mode_reads_each_rows_own_jpeg_and_matches_the_tar_batches() {
    let dir = tempdir("index");
    write_both(&dir, clean());
    // The repository folder: its data/ subfolder holds the files.
    let d = Dataset::open(&dir, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap();
    assert_eq!(d.len(), 58);
    assert_eq!(d.classes(), NAMES.map(String::from).as_slice());
    assert_eq!(d.shards().len(), 3);
    let mut buf = Vec::new();
    for i in 0..d.len() {
        d.read_bytes(i, &mut buf).unwrap();
        assert!(buf == jpeg(i), "sample {i} ({}) is the JPEG written", d.location(i));
        assert_eq!(d.sample(i).label, (i % 5) as i64);
        assert!(d.sample(i).info.is_some(), "its header was parsed");
    }
    assert_eq!(d.sample(20).key, "train-00001-of-00003/2");
    assert!(d.location(20).ends_with("train-00001-of-00003.parquet row group 0 row 2"), "{}", d.location(20));
    // Saved and loaded again: the same samples.
    let idx = IndexOptions { cache_dir: Some(dir.join("cache")), ..IndexOptions::default() };
    let first = Dataset::open(&dir.join("data"), &idx).unwrap();
    let again = Dataset::open(&dir.join("data"), &idx).unwrap();
    assert!(!first.index_reused() && again.index_reused());
    again.read_bytes(57, &mut buf).unwrap();
    assert!(buf == jpeg(57));
    let mut pq = Pipeline::new(config(&dir.join("data"), false)).unwrap();
    let mut tar = Pipeline::new(config(&dir.join("tar"), false)).unwrap();
    for e in 0..2 {
        let (a, _) = epoch(&mut pq, e);
        let (b, _) = epoch(&mut tar, e);
        assert!(a.len() >= 58 && a == b, "epoch {e}: per-sample batches equal the tar ones");
    }
}

#[test]
fn a_split_is_chosen_by_its_file_prefix() {
    let dir = tempdir("split");
    write_both(&dir, clean());
    let test_rows = vec![(0..3).map(|k| sample(100 + k)).collect::<Vec<_>>()];
    write_hf(&dir.join("data/test-00000-of-00001.parquet"), &test_rows, Compression::SNAPPY, &NAMES);
    let o = IndexOptions { save: false, ..IndexOptions::default() };
    assert_eq!(Dataset::open(&dir.join("data/train-"), &o).unwrap().len(), 58);
    let test = Dataset::open(&dir.join("data/test-"), &o).unwrap();
    assert_eq!(test.len(), 3);
    let mut buf = Vec::new();
    test.read_bytes(2, &mut buf).unwrap();
    assert!(buf == jpeg(102));
    assert_eq!(Dataset::open(&dir.join("data"), &o).unwrap().len(), 61, "the folder: every split");
    let one = dir.join("data/test-00000-of-00001.parquet");
    assert_eq!(Dataset::open(&one, &o).unwrap().len(), 3, "one file");
    let s = stoke::source::shards::ShardSet::open(&dir.join("data/test-"), 0).unwrap();
    assert_eq!(s.total(), 3);
}

/// A file without HF metadata: a plain binary `jpg` column and an int64 `cls`.
fn write_plain(path: &Path, rows: &[(Vec<u8>, i64)]) {
    let schema = parse_message_type("message schema { required binary jpg; required int64 cls; }").unwrap();
    let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
    let mut w = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), Arc::new(schema), Arc::new(props)).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let vals: Vec<ByteArray> = rows.iter().map(|r| ByteArray::from(r.0.clone())).collect();
    let mut c = rg.next_column().unwrap().unwrap();
    c.typed::<ByteArrayType>().write_batch(&vals, None, None).unwrap();
    c.close().unwrap();
    let labels: Vec<i64> = rows.iter().map(|r| r.1).collect();
    let mut c = rg.next_column().unwrap().unwrap();
    c.typed::<Int64Type>().write_batch(&labels, None, None).unwrap();
    c.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
}

#[test]
fn named_columns_read_a_plain_binary_image_column_and_an_unnamed_one_is_refused_by_name() {
    let dir = tempdir("named");
    let rows: Vec<(Vec<u8>, i64)> = (0..6).map(|k| (jpeg(k), (k % 3) as i64)).collect();
    let f = dir.join("plain.parquet");
    write_plain(&f, &rows);
    let e = Dataset::open(&f, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap_err().to_string();
    assert!(e.contains("plain.parquet") && e.contains("no image column") && e.contains("jpg, cls"), "{e}");
    let columns = stoke::source::parquet::Columns { image: Some("jpg".into()), label: Some("cls".into()) };
    let d = Dataset::open(&f, &IndexOptions { save: false, columns: columns.clone(), ..IndexOptions::default() }).unwrap();
    let mut buf = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        d.read_bytes(i, &mut buf).unwrap();
        assert!(buf == r.0);
        assert_eq!(d.sample(i).label, r.1);
    }
    assert_eq!(d.classes(), ["0", "1", "2"], "no names: the label numbers");
    let mut c = config(&f, true);
    (c.image_column, c.label_column) = (columns.image.clone(), columns.label.clone());
    let mut p = Pipeline::new(c).unwrap();
    let (got, _) = epoch(&mut p, 0);
    assert_eq!(got.len(), 6);
    let bad = stoke::source::parquet::Columns { image: Some("nope".into()), label: None };
    let e = Dataset::open(&f, &IndexOptions { save: false, columns: bad, ..IndexOptions::default() }).unwrap_err().to_string();
    assert!(e.contains("no column \"nope\""), "{e}");
}

#[test]
fn every_encoding_of_the_image_column_reads_each_rows_own_jpeg() {
    use parquet::basic::{Compression, Encoding};
    let dir = tempdir("encodings");
    let rows: Vec<stoke::fuzzing::HfRow> =
        (0..30).map(|k| (if k % 11 == 4 { None } else { Some(jpeg(k)) }, Some((k % 5) as i64))).collect();
    // PLAIN with a dictionary (HF's, the crate writer's default), and the DELTA encodings
    // other writers use for binary columns (Spark's v2 writer: DELTA_BYTE_ARRAY).
    for encoding in [None, Some(Encoding::PLAIN), Some(Encoding::DELTA_LENGTH_BYTE_ARRAY), Some(Encoding::DELTA_BYTE_ARRAY)] {
        let f = dir.join(format!("{encoding:?}.parquet"));
        let groups = [rows[..17].to_vec(), rows[17..].to_vec()];
        let bytes = stoke::fuzzing::hf_parquet_encoded(&groups, Compression::SNAPPY, &NAMES, encoding);
        if let Some(e) = encoding {
            use parquet::file::reader::FileReader;
            let r = parquet::file::reader::SerializedFileReader::new(bytes::Bytes::from(bytes.clone())).unwrap();
            let used: Vec<Encoding> = r.metadata().row_group(0).column(0).encodings().collect();
            assert!(used.contains(&e), "{e}: written as {used:?}");
        }
        std::fs::write(&f, bytes).unwrap();
        let d = Dataset::open(&f, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap();
        let mut buf = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            match &r.0 {
                Some(b) => {
                    d.read_bytes(i, &mut buf).unwrap_or_else(|e| panic!("{encoding:?}: row {i}: {e}"));
                    assert!(&buf == b, "{encoding:?}: row {i} is the JPEG written");
                }
                None => assert!(d.read_bytes(i, &mut buf).is_err(), "{encoding:?}: row {i} is null"),
            }
        }
    }
}

fn open_err(path: &Path) -> String {
    Dataset::open(path, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap_err().to_string()
}

#[test]
fn a_file_that_is_not_parquet_or_is_truncated_is_named() {
    let dir = tempdir("bad");
    let f = dir.join("x.parquet");
    std::fs::write(&f, jpeg(1)).unwrap();
    let e = open_err(&f);
    assert!(e.contains("x.parquet") && e.contains("not a Parquet file"), "{e}");
    std::fs::write(&f, b"PAR1").unwrap();
    let e = open_err(&f);
    assert!(e.contains("x.parquet") && e.contains("not a Parquet file: 4 bytes"), "{e}");
    // A whole file, then cut short.
    let good = dir.join("good.parquet");
    write_hf(&good, &[(0..4).map(sample).collect()], Compression::SNAPPY, &NAMES);
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() - 100]).unwrap();
    let e = open_err(&f);
    assert!(e.contains("x.parquet") && e.contains("truncated Parquet file"), "{e}");
    // A footer whose length says more than the file holds.
    let mut b = bytes.clone();
    let n = b.len();
    b[n - 8..n - 4].copy_from_slice(&(n as u32).to_le_bytes());
    std::fs::write(&f, &b).unwrap();
    let e = open_err(&f);
    assert!(e.contains("x.parquet") && e.contains("truncated Parquet footer"), "{e}");
    // A footer that is not metadata.
    let mut b = bytes.clone();
    let len = u32::from_le_bytes(b[n - 8..n - 4].try_into().unwrap()) as usize;
    b[n - 8 - len..n - 8].fill(0xEE);
    std::fs::write(&f, &b).unwrap();
    let e = open_err(&f);
    assert!(e.contains("x.parquet") && e.contains("damaged Parquet footer"), "{e}");
    // The data truncated under an intact footer: the column chunk is past the end.
    let mut b = bytes[..4].to_vec();
    b.extend_from_slice(&bytes[n - 8 - len..]);
    std::fs::write(&f, &b).unwrap();
    let e = open_err(&f);
    assert!(e.contains("x.parquet") && e.contains("truncated Parquet file") && e.contains("column chunk"), "{e}");
}

/// Stream and per-sample epochs of the set with sample `bad` edited: under skip, that sample
/// alone is substituted, and the substitute names its row and why; under fail, the error names
/// it. Per-sample mode opens the set all the same (the bad row fails when read).
fn one_bad_row(name: &str, bad: usize, edit: impl Fn(&mut RowIn), why: &str) {
    let dir = tempdir(name);
    write_both(&dir, |k, r| {
        if k == bad {
            edit(r)
        }
    });
    let data = dir.join("data");
    let row = bad - 18; // row group 0 of file 1 starts at sample 18
    let at = format!("train-00001-of-00003.parquet row group 0 row {row}");
    for stream in [true, false] {
        let mode = if stream { "stream" } else { "per-sample" };
        let mut p = Pipeline::new(config(&data, stream)).unwrap_or_else(|e| panic!("{name}, {mode}: the set opens: {e}"));
        p.start_epoch(0, 0);
        let (mut got, mut subs) = (0, Vec::new());
        while let Some(b) = p.next_batch() {
            let b = b.unwrap();
            got += b.positions.len();
            subs.extend(b.substitutes);
        }
        assert_eq!((got, subs.len()), (58, 1), "{name}, {mode}: skip substitutes the one sample, nothing else is lost");
        let s = &subs[0];
        assert_eq!(s.index, bad, "{name}, {mode}: the substitute is the bad row");
        assert!(s.location.contains(&at) && s.reason.contains(why), "{name}, {mode}: {} / {}", s.location, s.reason);
        let mut c = config(&data, stream);
        c.on_error = OnError::Fail;
        let mut p = Pipeline::new(c).unwrap();
        p.start_epoch(0, 0);
        let mut err = None;
        while let Some(b) = p.next_batch() {
            if let Err(e) = b {
                err = Some(e.to_string());
                break;
            }
        }
        let e = err.unwrap_or_else(|| panic!("{name}, {mode}: fail names the sample"));
        assert!(e.contains(&at) && e.contains(why), "{name}, {mode}: {e}");
    }
}

#[test]
fn a_null_image_fails_its_sample_alone() {
    one_bad_row("null", 20, |r| r.image = None, "null image (column image.bytes)");
    let dir = std::env::temp_dir().join(format!("stoke-parquet-null-{}", std::process::id()));
    let d = Dataset::open(&dir.join("data"), &IndexOptions { save: false, ..IndexOptions::default() }).unwrap();
    let e = d.read_bytes(20, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("null image") && e.contains("row group 0 row 2"), "{e}");
}

#[test]
fn a_label_outside_the_names_fails_its_sample_alone_in_both_modes() {
    one_bad_row("label", 21, |r| r.label = Some(9), "label 9 is outside the 5 class names");
    // The per-sample index keeps no label outside the names: the classes are the 5 names.
    let dir = std::env::temp_dir().join(format!("stoke-parquet-label-{}", std::process::id()));
    let d = Dataset::open(&dir.join("data"), &IndexOptions { save: false, ..IndexOptions::default() }).unwrap();
    assert_eq!(d.classes(), NAMES, "no class made up for label 9");
    let e = d.read_bytes(21, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("train-00001-of-00003.parquet row group 0 row 3") && e.contains("label 9 is outside"), "{e}");
}

#[test]
fn a_null_label_fails_its_sample_alone() {
    one_bad_row("nolabel", 19, |r| r.label = None, "null label");
}

#[test]
fn per_sample_mode_refuses_a_row_group_larger_than_its_cache_saying_to_use_stream_mode() {
    let dir = tempdir("cache");
    write_both(&dir, clean());
    let o = |bytes| IndexOptions { save: false, parquet_cache_bytes: bytes, ..IndexOptions::default() };
    // The index is built first (each row group decoded once, not cached), then reads go through
    // the cache: room for about one row group of the first file.
    let d = Dataset::open(&dir.join("data"), &o(20_000)).unwrap();
    let mut buf = Vec::new();
    d.read_bytes(0, &mut buf).unwrap();
    assert!(buf == jpeg(0));
    d.read_bytes(40, &mut buf).unwrap();
    assert!(buf == jpeg(40), "a row group evicted another and was read");
    let d = Dataset::open(&dir.join("data"), &o(4000)).unwrap();
    let e = d.read_bytes(0, &mut buf).unwrap_err().to_string();
    assert!(
        e.contains("train-00000-of-00003") && e.contains("more than per-sample mode's cache of 4000") && e.contains("stream mode"),
        "{e}"
    );
}

#[test]
fn a_row_group_larger_than_the_read_ahead_budget_is_refused_by_name() {
    let dir = tempdir("budget");
    write_both(&dir, clean());
    let mut c = config(&dir.join("data"), true);
    c.stream = Some(StreamSpec { group: 2, read_ahead_bytes: 4000, ..Default::default() });
    let e = Pipeline::new(c).err().expect("refused").to_string();
    assert!(e.contains("train-00000-of-00003.parquet") && e.contains("read_ahead_bytes (4000)"), "{e}");
}

fn stoke(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stoke")).args(args).output().unwrap();
    assert!(out.status.success(), "stoke {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_command_line_indexes_plans_and_benches_a_split() {
    let dir = tempdir("cli");
    write_both(&dir, clean());
    let split = dir.join("data/train-");
    let split = split.to_str().unwrap();
    let index: serde_json::Value = serde_json::from_str(&stoke(&["index", split, "--json"])).unwrap();
    assert_eq!((index["kind"].as_str(), index["samples"].as_u64()), (Some("parquet"), Some(58)));
    let names: Vec<&str> = index["classes"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, NAMES, "the ClassLabel names, where class names are reported");
    let plan = stoke(&["plan", split, "--stream"]);
    assert_eq!(plan.lines().count(), 58, "{plan}");
    let bench = stoke(&["bench", split, "--backend", "cpu", "--stream", "--epochs", "1", "--batch-size", "8", "--size", "16", "--json"]);
    let b: serde_json::Value = serde_json::from_str(&bench).unwrap();
    assert!(b["errors"] == 0 && b["images"].as_u64().unwrap() > 0, "{bench}");
}

#[test]
fn stream_mode_resumes_at_another_world_size_delivering_every_row_once() {
    let dir = tempdir("elastic");
    write_both(&dir, clean());
    let data = dir.join("data");
    let ranked = |rank, world, batch| {
        let mut c = config(&data, true);
        (c.rank, c.world_size, c.batch_size) = (rank, world, batch);
        Pipeline::new(c).unwrap()
    };
    // Two ranks deliver two batches of 3 each of epoch 1, then three ranks finish it.
    let mut got = Vec::new();
    let mut state = None;
    for r in 0..2 {
        let mut p = ranked(r, 2, 3);
        p.start_epoch(1, 0);
        for _ in 0..2 {
            let b = p.next_batch().unwrap().unwrap();
            got.extend(b.positions.iter().copied().zip(b.indices.iter().copied()));
        }
        state = Some(p.state());
    }
    let state = stoke::ResumeState::from_json(&state.unwrap().to_json()).unwrap();
    for r in 0..3 {
        let mut p = ranked(r, 3, 4);
        p.resume(&state).unwrap();
        while let Some(b) = p.next_batch() {
            let b = b.unwrap();
            got.extend(b.positions.iter().copied().zip(b.indices.iter().copied()));
        }
    }
    let mut real: Vec<usize> = got.iter().filter(|g| g.0 < 58).map(|g| g.1).collect();
    real.sort();
    assert_eq!(real, (0..58).collect::<Vec<_>>(), "every row exactly once across the two worlds");
    assert!(got.len() - 58 <= 3, "{} padded", got.len() - 58);
}

#[test]
fn only_the_image_and_label_column_chunks_are_read() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let dir = tempdir("ranges");
    write_both(&dir, clean());
    // Overwrite every `image.path` column chunk with garbage: reading must not touch it.
    for f in 0..3 {
        let path = dir.join(format!("data/train-{f:05}-of-00003.parquet"));
        let meta = SerializedFileReader::new(std::fs::File::open(&path).unwrap()).unwrap().metadata().clone();
        let mut bytes = std::fs::read(&path).unwrap();
        for rg in meta.row_groups() {
            let c = rg.column(1);
            assert_eq!(c.column_path().string(), "image.path");
            let (start, len) = c.byte_range();
            bytes[start as usize..(start + len) as usize].fill(0xFF);
        }
        std::fs::write(&path, bytes).unwrap();
    }
    let d = Dataset::open(&dir.join("data"), &IndexOptions { save: false, ..IndexOptions::default() }).unwrap();
    let mut buf = Vec::new();
    for i in 0..d.len() {
        d.read_bytes(i, &mut buf).unwrap();
        assert!(buf == jpeg(i));
    }
    let (got, subs) = epoch(&mut Pipeline::new(config(&dir.join("data"), true)).unwrap(), 0);
    assert_eq!((got.len(), subs), (58, 0));
}

#[test]
fn the_row_groups_largest_images_are_measured_once_per_set_and_saved_for_the_next_start() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use stoke::source::parquet::{open_if_parquet, Columns};
    let dir = tempdir("largest");
    write_both(&dir, clean());
    let (data, cache) = (dir.join("data"), dir.join("cache"));
    let open = || open_if_parquet(&data, &Columns::default(), 2).unwrap().unwrap();
    let measured = open().largest(2);
    assert_eq!(open().largest_saved(2, Some(&cache)), measured, "the first start measures");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "and saves one file");
    // Every image column chunk overwritten, each file's size and modification time kept: a
    // start that read a row group would find no image in it.
    let files: Vec<_> = (0..3).map(|f| data.join(format!("train-{f:05}-of-00003.parquet"))).collect();
    for path in &files {
        let modified = std::fs::metadata(path).unwrap().modified().unwrap();
        let meta = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap().metadata().clone();
        let mut bytes = std::fs::read(path).unwrap();
        for rg in meta.row_groups() {
            let (start, len) = rg.column(0).byte_range();
            bytes[start as usize..(start + len) as usize].fill(0xFF);
        }
        std::fs::write(path, bytes).unwrap();
        std::fs::File::options().write(true).open(path).unwrap().set_modified(modified).unwrap();
    }
    assert_ne!(open().largest(2), measured, "measuring now finds no image");
    assert_eq!(open().largest_saved(2, Some(&cache)), measured, "the next start reads no row group");
    // A file changed since (here: its modification time): the set is measured again.
    let later = std::fs::metadata(&files[1]).unwrap().modified().unwrap() + std::time::Duration::from_secs(1);
    std::fs::File::options().write(true).open(&files[1]).unwrap().set_modified(later).unwrap();
    let again = open().largest_saved(2, Some(&cache));
    assert_ne!(again, measured, "a changed file is measured again");
    assert!(again.iter().all(|l| l.headerless > 0), "every row group unreadable now: sized at the decode guard");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1, "measures with unreadable row groups are not saved");
}

/// Stream mode counts each row group it holds at its listed size (its image column's, more than
/// its images' bytes) when read, when carried into the next epoch read ahead, and when released:
/// once an epoch that began with row groups read ahead is over and the next one's are all read
/// ahead, the bytes held are exactly the listed sizes of every row group. (Carried row groups
/// were counted at their images' bytes and released at their listed size: the count fell below
/// what was held, past zero — a panic in a build with overflow checks.)
#[test]
fn stream_mode_counts_row_groups_read_ahead_at_their_listed_size() {
    use stoke::reader::stream::{StreamReader, StreamSource};
    use stoke::reader::ReaderConfig;
    use stoke::sampler::shards::ShardOrderConfig;
    let dir = tempdir("stream-held");
    write_both(&dir, clean());
    let source = Arc::new(StreamSource::open(&dir.join("data"), 1).unwrap());
    let listed: u64 = source.set.facts.iter().map(|f| f.bytes).sum();
    // The defaults' reader settings (2 batches read ahead, no cache, no rewrites) but these.
    let reader_cfg = ReaderConfig {
        specs: vec![stoke::config::AugmentSpec::train(16)],
        seed: 5,
        batch_size: 4,
        on_error: OnError::Fail,
        threads: 2,
        ..ReaderConfig::from_pipeline(&stoke::PipelineConfig::new("unused"))
    };
    let order_cfg = ShardOrderConfig { seed: 5, group: 2, ..ShardOrderConfig::default() };
    let mut r = StreamReader::new(source.clone(), order_cfg, &reader_cfg, listed).unwrap();
    let all = source.set.facts.len();
    for e in 0..3 {
        r.start_epoch(e, 0).unwrap();
        while let Some(b) = r.next_batch() {
            r.recycle(b.unwrap());
        }
        let t = std::time::Instant::now();
        while r.next_epoch_ready() < all && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(r.next_epoch_ready(), all, "epoch {e}: the next epoch's row groups are all read ahead");
        assert_eq!(r.held(), listed, "epoch {e} (carried {} row groups in): held at their listed sizes", r.shards_read_ahead());
    }
    assert!(r.shards_read_ahead() > 0);
}
