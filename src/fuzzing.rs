//! Entries for the fuzz targets in `fuzz/` (cargo-fuzz, run by `scripts/fuzz.sh`): every reader
//! of untrusted bytes that is otherwise reached only through a file or a store, callable on
//! bytes alone, and the seeds each target starts from where no corpus is at hand. The image
//! decoders need no entry here: [`crate::backend::cpu::decode`], [`crate::codec`] and
//! [`crate::ResumeState::from_json`] take bytes already. Hidden from the docs; not a stable API.

use crate::codec::ImageInfo;
use crate::error::Result;
use crate::source::index;
use crate::source::shards::{self, ShardFacts};
use crate::source::tar;
use std::path::Path;

/// The name the shard entries report errors under.
const SHARD: &str = "fuzz.tar";

/// One image sample of a shard, as the tar reader lists it.
#[derive(Clone, Debug)]
pub struct TarSample {
    /// Key inside the shard (member name without the extension).
    pub key: String,
    /// Label from its `.cls` member, −1 without one.
    pub label: i64,
    /// Byte offset of the image's data in the shard.
    pub offset: u64,
    /// Length of the image's data.
    pub len: u64,
    /// Its parsed header, or why it did not parse.
    pub header: std::result::Result<ImageInfo, Box<str>>,
}

/// The tar reader on a shard held in memory (as a shard read whole from a store is, headers
/// parsed): its image samples and the count of members it ignored.
pub fn tar_shard(bytes: &[u8]) -> Result<(Vec<TarSample>, u64)> {
    let (entries, ignored) = tar::scan_members(Path::new(SHARD), bytes, bytes.len() as u64, true)?;
    let samples = entries
        .into_iter()
        .map(|e| {
            let offset = match e.location {
                crate::source::Location::Tar { offset, .. } => offset,
                crate::source::Location::File | crate::source::Location::Parquet { .. } => u64::MAX,
            };
            TarSample { key: e.key, label: e.label, offset, len: e.len, header: e.header.unwrap_or_else(|| Err("no header".into())) }
        })
        .collect();
    Ok((samples, ignored))
}

/// The streaming index's facts of a shard held in memory (what `stoke pack` writes into the
/// sidecar).
pub fn shard_facts(bytes: &[u8]) -> Result<ShardFacts> {
    shards::facts_of(Path::new(SHARD), bytes, bytes.len() as u64)
}

/// Whether the sidecar reader would accept `f` as true of a shard (it refuses facts no shard of
/// `f.bytes` bytes could have).
pub fn plausible(f: &ShardFacts) -> bool {
    shards::plausible(f)
}

/// The sidecar reader on `text` against the shards the text itself lists (names and sizes), as
/// if exactly those were found: the facts it accepts.
pub fn sidecar(text: &[u8]) -> Option<Vec<ShardFacts>> {
    #[derive(serde::Deserialize)]
    struct Listed {
        shards: Vec<Named>,
    }
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
        bytes: u64,
    }
    let listed: Listed = serde_json::from_slice(text).ok()?;
    let listed: Vec<(String, u64)> = listed.shards.into_iter().map(|s| (s.name, s.bytes)).collect();
    shards::matching(text, &listed)
}

/// The saved-index reader on `body` (an index file without its last 8 bytes) with the right
/// checksum appended and the fingerprint it holds: the index encoded again when it reads.
pub fn index(body: &[u8]) -> Option<Vec<u8>> {
    index_file(&index::with_checksum(body))
}

/// The saved-index reader on a whole file (checksum included), under the fingerprint it holds:
/// the index encoded again when it reads.
pub fn index_file(file: &[u8]) -> Option<Vec<u8>> {
    let fingerprint = index::fingerprint_field(file);
    index::decode(file, fingerprint).map(|saved| index::encode(fingerprint, &saved))
}

/// Write the seeds of fuzz target `target` into `dir` (created); returns how many. Decoder
/// targets get small images the crate makes (JPEG only with the `gen` feature, which has the
/// encoder) and the PNG and WebP fixtures of `tests/golden`; reader targets get files the crate
/// itself writes.
pub fn write_seeds(target: &str, dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let seeds = seeds(target);
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
    }
    Ok(seeds.len())
}

/// What `STOKE_FUZZ_SEEDS` asks of a target at start: write its seeds into that folder (the
/// targets call this from libFuzzer's initialisation, which runs before the corpus folders are
/// read, so the folder can be one of them).
pub fn seeds_from_env(target: &str) {
    if let Some(dir) = std::env::var_os("STOKE_FUZZ_SEEDS") {
        if let Err(e) = write_seeds(target, Path::new(&dir)) {
            eprintln!("stoke fuzz: cannot write the seeds of {target} into {}: {e}", Path::new(&dir).display());
            std::process::exit(2);
        }
    }
}

/// The Parquet reader (src/source/parquet) on a file's bytes: the footer, the columns found
/// from the HF metadata, every row group's image and label column chunks decoded. Written to a
/// file of this thread's own first (the reader reads files and stores, not memory). Returns the
/// rows per row group, each row's byte range checked to lie inside its group's data.
pub fn parquet_file(bytes: &[u8]) -> Result<Vec<usize>> {
    use crate::source::parquet::{Columns, ParquetSet};
    thread_local! {
        static DIR: std::cell::OnceCell<std::path::PathBuf> = const { std::cell::OnceCell::new() };
    }
    let dir = DIR.with(|d| {
        d.get_or_init(|| {
            let p = std::env::temp_dir().join(format!("stoke-fuzz-parquet-{}-{:?}", std::process::id(), std::thread::current().id()));
            let _ = std::fs::create_dir_all(&p);
            p
        })
        .clone()
    });
    let file = dir.join("fuzz.parquet");
    std::fs::write(&file, bytes).map_err(|e| crate::Error::io(&file, e))?;
    let set = ParquetSet::open_local(&dir, std::slice::from_ref(&file), &Columns::default(), 1)?;
    let mut rows = Vec::with_capacity(set.groups.len());
    for g in 0..set.groups.len() {
        let d = set.read_group(g)?;
        assert_eq!(d.rows.len() as u64, set.groups[g].rows, "row group {g}: rows decoded vs listed");
        for r in &d.rows {
            assert!(r.bytes.start <= r.bytes.end && r.bytes.end <= d.data.len(), "row bytes {:?} past {}", r.bytes, d.data.len());
        }
        rows.push(d.rows.len());
    }
    Ok(rows)
}

/// One row of [`hf_parquet`]: the image's bytes (None: a null image) and its label (None: null).
pub type HfRow = (Option<Vec<u8>>, Option<i64>);

/// An HF-style Parquet file (the `image` column `struct<bytes, path>`, the `label` an int64
/// ClassLabel named `names` in the `huggingface` metadata), one row group per element of
/// `groups`, each row `(image bytes or null, label or null)`: the fuzz seeds and the tests'
/// files.
pub fn hf_parquet(groups: &[Vec<HfRow>], compression: parquet::basic::Compression, names: &[&str]) -> Vec<u8> {
    hf_parquet_encoded(groups, compression, names, None)
}

/// As [`hf_parquet`], the `image.bytes` column written in `encoding` (no dictionary) when given:
/// `DELTA_LENGTH_BYTE_ARRAY` or `DELTA_BYTE_ARRAY`, as other writers than HF's may.
pub fn hf_parquet_encoded(
    groups: &[Vec<HfRow>],
    compression: parquet::basic::Compression,
    names: &[&str],
    encoding: Option<parquet::basic::Encoding>,
) -> Vec<u8> {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use std::sync::Arc;
    let schema = parquet::schema::parser::parse_message_type(
        "message schema { optional group image { optional binary bytes; optional binary path (STRING); } optional int64 label; }",
    )
    .expect("a valid schema");
    let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    let meta = format!(
        r#"{{"info": {{"features": {{"image": {{"_type": "Image"}}, "label": {{"names": [{}], "_type": "ClassLabel"}}}}}}}}"#,
        names.join(", ")
    );
    let mut props = WriterProperties::builder()
        .set_compression(compression)
        .set_key_value_metadata(Some(vec![KeyValue::new("huggingface".into(), meta)]));
    if let Some(e) = encoding {
        let bytes = parquet::schema::types::ColumnPath::from(vec!["image".to_string(), "bytes".to_string()]);
        props = props.set_column_dictionary_enabled(bytes.clone(), false).set_column_encoding(bytes, e);
    }
    let props = props.build();
    let mut w = SerializedFileWriter::new(Vec::new(), Arc::new(schema), Arc::new(props)).expect("a writer into memory");
    for (g, rows) in groups.iter().enumerate() {
        let mut rg = w.next_row_group().expect("a row group");
        // image.bytes and image.path: definition level 2 present, 0 a null struct.
        let defs: Vec<i16> = rows.iter().map(|r| if r.0.is_some() { 2 } else { 0 }).collect();
        let vals: Vec<ByteArray> = rows.iter().filter_map(|r| r.0.clone().map(ByteArray::from)).collect();
        let paths: Vec<ByteArray> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.0.is_some())
            .map(|(i, _)| ByteArray::from(format!("g{g}-{i}.jpg").as_str()))
            .collect();
        for values in [&vals, &paths] {
            let mut c = rg.next_column().expect("a column").expect("the image columns");
            c.typed::<ByteArrayType>().write_batch(values, Some(&defs), None).expect("image values");
            c.close().expect("a closed column");
        }
        let labels: Vec<i64> = rows.iter().filter_map(|r| r.1).collect();
        let ldefs: Vec<i16> = rows.iter().map(|r| r.1.is_some() as i16).collect();
        let mut c = rg.next_column().expect("a column").expect("the label column");
        c.typed::<Int64Type>().write_batch(&labels, Some(&ldefs), None).expect("labels");
        c.close().expect("a closed column");
        rg.close().expect("a closed row group");
    }
    w.into_inner().expect("the file's bytes")
}

/// Small HF-style Parquet files: snappy and zstd, a null image and label, two row groups.
fn parquets() -> Vec<(String, Vec<u8>)> {
    use parquet::basic::{Compression, ZstdLevel};
    let imgs: Vec<Vec<u8>> = jpegs().into_iter().take(3).map(|(_, b)| b).collect();
    let row = |k: usize| (Some(imgs[k % imgs.len()].clone()), Some((k % 3) as i64));
    let names = ["a", "b", "c"];
    vec![
        ("snappy.parquet".into(), hf_parquet(&[vec![row(0), row(1)], vec![row(2)]], Compression::SNAPPY, &names)),
        (
            "zstd-nulls.parquet".into(),
            hf_parquet(&[vec![row(0), (None, Some(1)), (Some(imgs[1].clone()), None)]], Compression::ZSTD(ZstdLevel::default()), &names),
        ),
        ("plain.parquet".into(), hf_parquet(&[vec![row(1)]], Compression::UNCOMPRESSED, &names)),
        (
            "delta-length.parquet".into(),
            hf_parquet_encoded(
                &[vec![row(0), (None, Some(1)), row(2)]],
                Compression::UNCOMPRESSED,
                &names,
                Some(parquet::basic::Encoding::DELTA_LENGTH_BYTE_ARRAY),
            ),
        ),
        (
            "delta-byte-array.parquet".into(),
            hf_parquet_encoded(&[vec![row(1), row(2)]], Compression::SNAPPY, &names, Some(parquet::basic::Encoding::DELTA_BYTE_ARRAY)),
        ),
    ]
}

/// The seeds of one target, named.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "jpeg_header" | "jpeg_decode" | "jpeg_rewrite" => jpegs(),
        "png" => pngs(),
        "webp" => webps(),
        "tar" => shards(),
        "index" => indexes(),
        "resume_state" => states(),
        "sidecar" => sidecars(),
        "parquet" => parquets(),
        _ => Vec::new(),
    }
}

/// Every small image: what a shard holds.
fn images() -> Vec<(String, Vec<u8>)> {
    let mut all = jpegs();
    all.truncate(3);
    all.extend(pngs().into_iter().take(2));
    all.extend(webps().into_iter().take(1));
    all
}

#[cfg(feature = "gen")]
fn rgb(w: usize, h: usize) -> Vec<u8> {
    (0..w * h).flat_map(|i| [(i * 7 % 256) as u8, (i / w * 13 % 256) as u8, ((i % w) * 29 % 256) as u8]).collect()
}

#[cfg(feature = "gen")]
fn jpegs() -> Vec<(String, Vec<u8>)> {
    use crate::gen::Kind;
    let kinds = [
        Kind::Baseline420,
        Kind::Baseline444,
        Kind::Baseline422,
        Kind::Restart420,
        Kind::Progressive420,
        Kind::Gray,
        Kind::AdobeCmyk,
        Kind::AdobeYcck,
    ];
    let mut out = Vec::new();
    for (k, kind) in kinds.into_iter().enumerate() {
        for (w, h) in [(33u16, 17u16), (8, 8), (1, 1), (40, 48)] {
            if let Ok(b) = crate::gen::encode(&rgb(w as usize, h as usize), w, h, kind, 80) {
                if (w, h) == (33, 17) {
                    // A stream cut inside its scan, and one cut inside its headers.
                    out.push((format!("{kind:?}-{w}x{h}-cut-scan.jpg"), b[..b.len() * 3 / 4].to_vec()));
                    out.push((format!("{kind:?}-{w}x{h}-cut-header.jpg"), b[..b.len().min(100 + k)].to_vec()));
                }
                out.push((format!("{kind:?}-{w}x{h}.jpg"), b));
            }
        }
    }
    out
}

#[cfg(not(feature = "gen"))]
fn jpegs() -> Vec<(String, Vec<u8>)> {
    Vec::new()
}

fn pngs() -> Vec<(String, Vec<u8>)> {
    use png::{BitDepth, ColorType};
    let mut out: Vec<(String, Vec<u8>)> = [
        ("gray16.png", &include_bytes!("../tests/golden/png/gray16.png")[..]),
        ("la8.png", &include_bytes!("../tests/golden/png/la8.png")[..]),
        ("palette_trns.png", &include_bytes!("../tests/golden/png/palette_trns.png")[..]),
        ("rgba8.png", &include_bytes!("../tests/golden/png/rgba8.png")[..]),
    ]
    .into_iter()
    .map(|(n, b)| (n.to_string(), b.to_vec()))
    .collect();
    let (w, h) = (13u32, 7u32);
    for (name, color, depth) in [
        ("rgb8", ColorType::Rgb, BitDepth::Eight),
        ("gray1", ColorType::Grayscale, BitDepth::One),
        ("rgb16", ColorType::Rgb, BitDepth::Sixteen),
        ("palette4", ColorType::Indexed, BitDepth::Four),
    ] {
        let samples = match color {
            ColorType::Rgb => 3,
            _ => 1,
        };
        let bits = samples * depth as usize;
        let row = (w as usize * bits).div_ceil(8);
        let data: Vec<u8> = (0..row * h as usize).map(|i| (i * 37 % 251) as u8).collect();
        let mut v = Vec::new();
        {
            let mut e = png::Encoder::new(&mut v, w, h);
            e.set_color(color);
            e.set_depth(depth);
            if color == ColorType::Indexed {
                e.set_palette((0..48u8).collect::<Vec<u8>>());
            }
            let Ok(mut wr) = e.write_header() else { continue };
            if wr.write_image_data(&data).is_err() {
                continue;
            }
        }
        out.push((format!("{name}.png"), v));
    }
    out
}

fn webps() -> Vec<(String, Vec<u8>)> {
    [
        ("lossless_rgb.webp", &include_bytes!("../tests/golden/webp/lossless_rgb.webp")[..]),
        ("lossless_rgba.webp", &include_bytes!("../tests/golden/webp/lossless_rgba.webp")[..]),
        ("lossy_rgb.webp", &include_bytes!("../tests/golden/webp/lossy_rgb.webp")[..]),
        ("lossy_rgba.webp", &include_bytes!("../tests/golden/webp/lossy_rgba.webp")[..]),
    ]
    .into_iter()
    .map(|(n, b)| (n.to_string(), b.to_vec()))
    .collect()
}

fn shards() -> Vec<(String, Vec<u8>)> {
    let images = images();
    let mut out = Vec::new();
    // Labelled samples, an ignored member, a long name, the end-of-archive blocks.
    let mut w = tar::TarWriter::new(Vec::new());
    for (i, (name, bytes)) in images.iter().enumerate() {
        let ext = name.rsplit('.').next().unwrap_or("jpg");
        let _ = w.append(&format!("s{i:03}.{ext}"), bytes);
        let _ = w.append(&format!("s{i:03}.cls"), format!("{}\n", i % 3).as_bytes());
    }
    let _ = w.append("meta.json", b"{}");
    let _ = w.append(&format!("{}/long.jpg", "d".repeat(120)), &images[0].1);
    if let Ok(full) = w.finish() {
        // The same without its end-of-archive blocks, and cut inside a member.
        out.push(("no-marker.tar".into(), full[..full.len() - 1024].to_vec()));
        out.push(("cut.tar".into(), full[..full.len() / 2].to_vec()));
        out.push(("labelled.tar".into(), full));
    }
    // A pax header naming the next member, unlabelled samples.
    let mut w = tar::TarWriter::new(Vec::new());
    let rec = "path=pax/named.png\n";
    let rec = format!("{} {rec}", rec.len() + 3);
    let _ = w.append_kind("pax", rec.as_bytes(), b'x');
    let _ = w.append("short.png", &images[images.len() / 2].1);
    let _ = w.append("b.webp", &images[images.len() - 1].1);
    if let Ok(v) = w.finish() {
        out.push(("pax.tar".into(), v));
    }
    out
}

fn indexes() -> Vec<(String, Vec<u8>)> {
    use crate::source::{Location, SampleMeta, SourceKind};
    let infos: Vec<Option<ImageInfo>> = images().iter().map(|(_, b)| crate::codec::parse_info(b).ok()).collect();
    let sample = |i: usize, location: Location, label: i64| SampleMeta {
        key: format!("k{i}"),
        label,
        len: 1000 + i as u64,
        location,
        info: infos[i % infos.len()],
        header_error: if infos[i % infos.len()].is_none() { Some("truncated".into()) } else { None },
    };
    let tar = index::Saved {
        kind: SourceKind::Tar,
        classes: vec!["a".into(), "b".into()],
        ignored: 2,
        shards: vec!["/d/s0.tar".into(), "/d/s1.tar".into()],
        samples: (0..infos.len())
            .map(|i| sample(i, Location::Tar { shard: (i % 2) as u32, offset: 512 * i as u64 }, i as i64 % 2))
            .collect(),
    };
    let folder = index::Saved {
        kind: SourceKind::Folder,
        classes: vec!["c".into()],
        ignored: 0,
        shards: Vec::new(),
        samples: (0..infos.len()).map(|i| sample(i, Location::File, 0)).collect(),
    };
    [("tar.stoke-index", tar), ("folder.stoke-index", folder)]
        .into_iter()
        .map(|(n, s)| {
            let mut b = index::encode(0x0123_4567_89ab_cdef, &s);
            b.truncate(b.len() - 8); // the target appends the checksum
            (n.to_string(), b)
        })
        .collect()
}

fn states() -> Vec<(String, Vec<u8>)> {
    [
        r#"{"version":2,"epoch":3,"seed":7,"shuffle":true,"sampling":"permutation","stream_group":0,"samples":100,"dataset":"fnv1a64:0123456789abcdef","remaining":[[40,100],[120,130]],"next_pad":130,"world_size":4,"batch_size":8,"step":2}"#,
        r#"{"version":2,"epoch":0,"seed":0,"shuffle":false,"sampling":"shards","stream_group":4,"samples":1281167,"dataset":"fnv1a64:4c0e000000000000","remaining":[[196608,1281168]],"next_pad":1281168,"world_size":8,"batch_size":256,"step":96}"#,
        r#"{"version":2,"epoch":1,"seed":1,"shuffle":true,"sampling":"weighted","stream_group":0,"samples":5,"dataset":"fnv1a64:1","remaining":[],"next_pad":5,"world_size":1,"batch_size":1,"step":5}"#,
        r#"{"version":1,"epoch":0,"step":2}"#,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, s)| (format!("state{i}.json"), s.as_bytes().to_vec()))
    .collect()
}

fn sidecars() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let facts: Vec<ShardFacts> = shards().iter().filter_map(|(_, b)| shard_facts(b).ok()).collect();
    out.push(("v2.json".to_string(), shards::sidecar_json(&facts).into_bytes()));
    let v1: Vec<ShardFacts> = facts.iter().cloned().map(|f| ShardFacts { largest: None, ..f }).collect();
    out.push(("v1.json".to_string(), shards::sidecar_json(&v1).into_bytes()));
    out
}
