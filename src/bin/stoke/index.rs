//! `stoke index DATASET [--json]`: index a dataset (or reuse its saved index) and report what
//! it holds: counts per class, size and resolution histograms, subsampling / coding / CMYK /
//! gray counts, files ignored, and the samples whose headers are not decodable JPEG (by key).
//!
//! For shards in a store, the index is also written beside them (`.stoke-index`, unless
//! `--no-publish`): every node that opens the same shards then reads that one object instead of
//! every shard.

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use stoke::source::{Dataset, IndexOptions};

/// Options of `stoke index`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder (ImageFolder), file list, tar pattern (`train-{0000..0127}.tar`) or folder of tars.
    pub dataset: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Rebuild the index even if the saved one is current.
    #[arg(long)]
    pub rebuild: bool,
    /// Indexing threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Check that every label is below this.
    #[arg(long)]
    pub num_classes: Option<usize>,
    /// Shards in a store: do not write the index beside them (it is kept in the local cache
    /// folder either way).
    #[arg(long)]
    pub no_publish: bool,
    /// Parquet data sets: the image and label columns.
    #[command(flatten)]
    pub columns: crate::pipeline_args::ColumnArgs,
}

#[derive(Serialize)]
struct Class {
    label: usize,
    name: String,
    count: u64,
}

#[derive(Serialize)]
struct BadHeader {
    key: String,
    location: String,
    reason: String,
}

#[derive(Serialize)]
struct Report {
    dataset: String,
    kind: stoke::source::SourceKind,
    samples: usize,
    shards: usize,
    index: Option<String>,
    index_reused: bool,
    ignored_files: u64,
    classes: Vec<Class>,
    unlabeled: u64,
    compressed_bytes: u64,
    /// Compressed size buckets: "<16KiB", "16-32KiB", ... → count.
    size_histogram: Vec<(String, u64)>,
    /// Shorter-side buckets of the stored resolution → count.
    shorter_side_histogram: Vec<(String, u64)>,
    /// The most common stored resolutions "WxH" → count (top 10).
    top_resolutions: Vec<(String, u64)>,
    max_pixels: u64,
    /// Sniffed format ("jpeg", "png") → count.
    formats: BTreeMap<String, u64>,
    subsampling: BTreeMap<String, u64>,
    coding: BTreeMap<String, u64>,
    precision: BTreeMap<u8, u64>,
    cmyk: u64,
    gray: u64,
    exif_rotated: u64,
    hw_decodable: u64,
    not_decodable: Vec<BadHeader>,
}

fn size_bucket(n: u64) -> (u32, String) {
    // Powers of two from 16 KiB to 4 MiB.
    let kib = n / 1024;
    if kib < 16 {
        return (0, "<16KiB".into());
    }
    let k = (63 - kib.leading_zeros()).min(12); // floor(log2(kib)), 4..=12
    if k >= 12 {
        return (12, ">=4MiB".into());
    }
    let fmt = |v: u64| if v >= 1024 { format!("{}MiB", v / 1024) } else { format!("{v}KiB") };
    (k, format!("{}-{}", fmt(1 << k), fmt(1 << (k + 1))))
}

fn side_bucket(s: u32) -> (u32, String) {
    const EDGES: [u32; 6] = [64, 128, 256, 512, 1024, 2048];
    match EDGES.iter().position(|&e| s < e) {
        Some(0) => (0, "<64".into()),
        Some(i) => (i as u32, format!("{}-{}", EDGES[i - 1], EDGES[i] - 1)),
        None => (6, ">=2048".into()),
    }
}

fn report(d: &Dataset) -> Report {
    let mut per_class = vec![0u64; d.classes().len()];
    let mut unlabeled = 0;
    let mut sizes: BTreeMap<u32, (String, u64)> = BTreeMap::new();
    let mut sides: BTreeMap<u32, (String, u64)> = BTreeMap::new();
    let mut res: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let mut r = Report {
        dataset: d.path().display().to_string(),
        kind: d.kind(),
        samples: d.len(),
        shards: d.shards().len(),
        index: d.index_path().map(|p| p.display().to_string()),
        index_reused: d.index_reused(),
        ignored_files: d.ignored(),
        classes: Vec::new(),
        unlabeled: 0,
        compressed_bytes: 0,
        size_histogram: Vec::new(),
        shorter_side_histogram: Vec::new(),
        top_resolutions: Vec::new(),
        max_pixels: 0,
        formats: BTreeMap::new(),
        subsampling: BTreeMap::new(),
        coding: BTreeMap::new(),
        precision: BTreeMap::new(),
        cmyk: 0,
        gray: 0,
        exif_rotated: 0,
        hw_decodable: 0,
        not_decodable: Vec::new(),
    };
    for (i, s) in d.samples().iter().enumerate() {
        match usize::try_from(s.label).ok().filter(|&l| l < per_class.len()) {
            Some(l) => per_class[l] += 1,
            None => unlabeled += 1,
        }
        r.compressed_bytes += s.len;
        let (k, name) = size_bucket(s.len);
        sizes.entry(k).or_insert((name, 0)).1 += 1;
        match &s.info {
            Some(info) => {
                let (k, name) = side_bucket(info.width.min(info.height));
                sides.entry(k).or_insert((name, 0)).1 += 1;
                *res.entry((info.width, info.height)).or_default() += 1;
                r.max_pixels = r.max_pixels.max(info.pixels());
                *r.formats.entry(info.format.name().to_string()).or_default() += 1;
                r.gray += info.is_gray() as u64;
                r.exif_rotated += (info.orientation != 1) as u64;
                if let Some(j) = &info.jpeg {
                    *r.subsampling.entry(j.subsampling.name().to_string()).or_default() += 1;
                    *r.coding.entry(j.coding.name().to_string()).or_default() += 1;
                    *r.precision.entry(j.precision).or_default() += 1;
                    r.cmyk += j.is_cmyk() as u64;
                    // What nvJPEG's hardware engine takes: baseline 8-bit, 1 or 3 components.
                    r.hw_decodable +=
                        (j.coding == stoke::source::Coding::Baseline && j.precision == 8 && matches!(j.components, 1 | 3)) as u64;
                }
            }
            None => r.not_decodable.push(BadHeader {
                key: s.key.clone(),
                location: d.location(i),
                reason: s.header_error.as_deref().unwrap_or("no header").to_string(),
            }),
        }
    }
    r.unlabeled = unlabeled;
    r.classes =
        d.classes().iter().zip(per_class).enumerate().map(|(label, (name, count))| Class { label, name: name.clone(), count }).collect();
    r.size_histogram = sizes.into_values().collect();
    r.shorter_side_histogram = sides.into_values().collect();
    let mut top: Vec<((u32, u32), u64)> = res.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    r.top_resolutions = top.into_iter().take(10).map(|((w, h), c)| (format!("{w}x{h}"), c)).collect();
    r
}

fn print_text(r: &Report, w: &mut impl Write) -> std::io::Result<()> {
    let pct = |n: u64| if r.samples == 0 { 0.0 } else { 100.0 * n as f64 / r.samples as f64 };
    writeln!(
        w,
        "dataset      {} ({:?}{})",
        r.dataset,
        r.kind,
        if r.shards > 0 { format!(", {} shards", r.shards) } else { String::new() }
    )?;
    writeln!(w, "samples      {}  ({:.1} MiB compressed)", r.samples, r.compressed_bytes as f64 / (1 << 20) as f64)?;
    writeln!(w, "ignored      {} files that are not images (.jpg/.jpeg/.png)", r.ignored_files)?;
    match &r.index {
        Some(p) => writeln!(w, "index        {} ({})", p, if r.index_reused { "reused" } else { "built" })?,
        None => writeln!(w, "index        not saved (no writable location)")?,
    }
    writeln!(
        w,
        "classes      {}{}",
        r.classes.len(),
        if r.unlabeled > 0 { format!(" ({} samples unlabeled)", r.unlabeled) } else { String::new() }
    )?;
    const SHOWN: usize = 20;
    for c in r.classes.iter().take(SHOWN) {
        writeln!(w, "  {:>5}  {:<30} {}", c.label, c.name, c.count)?;
    }
    if r.classes.len() > SHOWN {
        let counts: Vec<u64> = r.classes.iter().map(|c| c.count).collect();
        writeln!(
            w,
            "  ... {} more classes (per class: min {}, max {})",
            r.classes.len() - SHOWN,
            counts.iter().min().unwrap_or(&0),
            counts.iter().max().unwrap_or(&0)
        )?;
    }
    writeln!(w, "compressed size")?;
    for (b, n) in &r.size_histogram {
        writeln!(w, "  {b:<14} {n:>9}  {:5.1}%", pct(*n))?;
    }
    writeln!(w, "shorter side")?;
    for (b, n) in &r.shorter_side_histogram {
        writeln!(w, "  {b:<14} {n:>9}  {:5.1}%", pct(*n))?;
    }
    writeln!(w, "top resolutions")?;
    for (b, n) in &r.top_resolutions {
        writeln!(w, "  {b:<14} {n:>9}  {:5.1}%", pct(*n))?;
    }
    writeln!(w, "largest      {} pixels", r.max_pixels)?;
    writeln!(w, "formats      {}", r.formats.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", "))?;
    writeln!(w, "subsampling  {}", r.subsampling.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", "))?;
    writeln!(w, "coding       {}", r.coding.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", "))?;
    writeln!(w, "precision    {}", r.precision.iter().map(|(k, v)| format!("{k}-bit: {v}")).collect::<Vec<_>>().join(", "))?;
    writeln!(w, "cmyk {}  gray {}  exif-rotated {}  hw-decodable (baseline 8-bit) {}", r.cmyk, r.gray, r.exif_rotated, r.hw_decodable)?;
    writeln!(w, "not decodable headers: {}", r.not_decodable.len())?;
    const BAD_SHOWN: usize = 50;
    for b in r.not_decodable.iter().take(BAD_SHOWN) {
        writeln!(w, "  {} ({}): {}", b.key, b.location, b.reason)?;
    }
    if r.not_decodable.len() > BAD_SHOWN {
        writeln!(w, "  ... and {} more (--json lists all)", r.not_decodable.len() - BAD_SHOWN)?;
    }
    Ok(())
}

pub fn run(args: Args) -> stoke::Result<()> {
    let opts = IndexOptions {
        threads: args.threads,
        progress: true,
        rebuild: args.rebuild,
        num_classes: args.num_classes,
        columns: args.columns.columns(),
        ..IndexOptions::default()
    };
    let d = Dataset::open(&args.dataset, &opts)?;
    #[cfg(feature = "remote")]
    if d.store().is_some() && !args.no_publish {
        if d.index_origin() == stoke::source::IndexOrigin::Store {
            eprintln!("the index beside the shards ({}) is current", stoke::source::STORE_INDEX);
        } else {
            let url = d.publish_index()?;
            eprintln!("index written to {url}: other nodes read it instead of every shard");
        }
    }
    let r = report(&d);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &r).map_err(std::io::Error::from).and_then(|()| writeln!(out))
    } else {
        print_text(&r, &mut out)
    };
    match written.and_then(|()| out.flush()) {
        // `stoke index ... | head` is normal use, not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(stoke::Error::io("<stdout>", e)),
        Ok(()) => Ok(()),
    }
}
