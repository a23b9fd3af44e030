//! `stoke pack SRC OUT [--shard-size 256MiB]`: a folder or file list → tar shards
//! (WebDataset layout: `key.jpg` or `key.png` by the sniffed format, + `key.cls`), labels kept, class names in `classes.txt`, and
//! the shards' index built beside them, and the streaming index's sidecar (`stoke-shards.json`:
//! per-shard sample counts, sizes, label ranges). OUT may be a store prefix (`s3://bucket/train`):
//! each shard is built in memory and written with one PUT (multipart when large), then
//! `classes.txt`, the sidecar and the per-sample index (`.stoke-index`, what every node reads
//! instead of every shard).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use stoke::source::shards::{sidecar_json, ShardSet, SIDECAR};
use stoke::source::tar::{TarWriter, CLASSES_FILE};
use stoke::source::{Dataset, IndexOptions};
use stoke::Error;

/// Options of `stoke pack`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder (ImageFolder) or file list to pack.
    pub src: PathBuf,
    /// Output folder for the shards (created; must not already hold .tar files).
    pub out: PathBuf,
    /// Target shard size: bytes, or with a unit (KiB, MiB, GiB, KB, MB, GB).
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    pub shard_size: u64,
    /// Check that every label is below this.
    #[arg(long)]
    pub num_classes: Option<usize>,
    /// Shard file name prefix: `PREFIX-000000.tar`, ...
    #[arg(long, default_value = "shard")]
    pub prefix: String,
}

/// "256MiB" → 268435456. Units are case-insensitive; a bare number is bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let v: f64 = num.parse().map_err(|_| format!("size {s:?} must be a number with an optional unit, like 256MiB"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(format!("unknown size unit {unit:?} in {s:?} (use B, KiB, MiB, GiB, KB, MB or GB)")),
    };
    let bytes = v * mult as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("size {s:?} must be at least 1 byte"));
    }
    Ok(bytes as u64)
}

/// A sample key → the tar member stem: extension dropped, dots in the file name replaced (a
/// WebDataset key ends at the first dot of the file name).
fn member_stem(key: &str) -> String {
    let base = key.rfind('/').map(|i| i + 1).unwrap_or(0);
    let name = &key[base..];
    let stem = match name.rfind('.') {
        Some(dot) if dot > 0 => &name[..dot],
        _ => name,
    };
    format!("{}{}", &key[..base], stem.replace('.', "_"))
}

fn shard_path(out: &Path, prefix: &str, n: usize) -> PathBuf {
    out_path(out, &format!("{prefix}-{n:06}.tar"))
}

/// `name` in the output folder or under the output prefix.
fn out_path(out: &Path, name: &str) -> PathBuf {
    match out.to_str() {
        Some(u) if stoke::source::is_remote(u) => PathBuf::from(format!("{}/{name}", u.trim_end_matches('/'))),
        _ => out.join(name),
    }
}

/// Where a shard goes: a local file, or memory until it is PUT to the store whole.
enum Sink {
    File(BufWriter<File>),
    Memory(Vec<u8>),
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::File(f) => f.write(b),
            Sink::Memory(v) => v.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            Sink::Memory(_) => Ok(()),
        }
    }
}

/// The output: a local folder, or a store prefix.
struct Out {
    #[cfg(feature = "remote")]
    store: Option<stoke::source::remote::Store>,
}

impl Out {
    fn new(out: &Path) -> stoke::Result<Out> {
        let remote = out.to_str().is_some_and(stoke::source::is_remote);
        if remote {
            #[cfg(feature = "remote")]
            {
                let url = out.to_string_lossy();
                let store = stoke::source::remote::Store::for_url(&url)?;
                let dir = format!("{}/", url.trim_end_matches('/'));
                if store.list(&dir)?.iter().any(|o| o.url.to_ascii_lowercase().ends_with(".tar")) {
                    return Err(Error::dataset(out, "the output prefix already holds .tar objects; pack into a new or empty prefix"));
                }
                return Ok(Out { store: Some(store) });
            }
            #[cfg(not(feature = "remote"))]
            return Err(Error::dataset(out, "a store URL, but this build of stoke has no remote sources (the `remote` feature)"));
        }
        if out.exists() {
            let holds_tars = fs::read_dir(out)
                .map_err(|e| Error::io(out, e))?
                .filter_map(|e| e.ok())
                .any(|e| e.path().extension().is_some_and(|x| x.eq_ignore_ascii_case("tar")));
            if holds_tars {
                return Err(Error::dataset(out, "output folder already holds .tar files; pack into a new or empty folder"));
            }
        }
        fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
        Ok(Out {
            #[cfg(feature = "remote")]
            store: None,
        })
    }

    fn is_remote(&self) -> bool {
        #[cfg(feature = "remote")]
        return self.store.is_some();
        #[cfg(not(feature = "remote"))]
        false
    }

    fn create(&self, p: &Path) -> stoke::Result<Sink> {
        if self.is_remote() {
            return Ok(Sink::Memory(Vec::new()));
        }
        let tmp = partial(p);
        let f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok(Sink::File(BufWriter::with_capacity(1 << 20, f)))
    }

    /// Finish a shard (and PUT it, for a store).
    fn finish(&self, w: TarWriter<Sink>, p: &Path) -> stoke::Result<()> {
        let sink = w.finish().map_err(|e| Error::io(p, e))?;
        match sink {
            Sink::File(f) => {
                let tmp = partial(p);
                let done = f.into_inner().map_err(|e| e.into_error()).and_then(|f| f.sync_all()).and_then(|()| fs::rename(&tmp, p));
                done.map_err(|e| {
                    let _ = fs::remove_file(&tmp);
                    Error::io(p, e)
                })
            }
            Sink::Memory(v) => self.write(p, v),
        }
    }

    /// Write a whole file or object.
    fn write(&self, p: &Path, data: Vec<u8>) -> stoke::Result<()> {
        #[cfg(feature = "remote")]
        if let Some(store) = &self.store {
            return store.put(&p.to_string_lossy(), data.into());
        }
        // A temporary name, then a rename: a full disk or a kill never leaves a partly written
        // shard, classes.txt or stoke-shards.json under its real name for the next reader.
        let tmp = partial(p);
        let done = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
            fs::rename(&tmp, p)
        })();
        done.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            Error::io(p, e)
        })
    }
}

/// Where `p` is written before it is renamed into place (hidden, not a `.tar`: no reader lists it).
fn partial(p: &Path) -> PathBuf {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!(".{name}.partial"))
}

pub fn run(args: Args) -> stoke::Result<()> {
    let src = Dataset::open(&args.src, &IndexOptions { progress: true, num_classes: args.num_classes, ..IndexOptions::default() })?;
    let out = Out::new(&args.out)?;
    let result = pack(&args, &src, &out);
    if result.is_err() && !out.is_remote() {
        // What a failed pack was writing (a full disk, a bad sample) is not left behind.
        if let Ok(rd) = fs::read_dir(&args.out) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().ends_with(".partial") {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }
    result
}

fn pack(args: &Args, src: &Dataset, out: &Out) -> stoke::Result<()> {
    let total: u64 = src.samples().iter().map(|s| s.len).sum();
    let pb = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "packing {wide_bar} {bytes}/{total_bytes} [{elapsed_precise} < {eta_precise}] {bytes_per_sec}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut shard_no = 0usize;
    let open_shard =
        |n: usize| -> stoke::Result<TarWriter<Sink>> { Ok(TarWriter::new(out.create(&shard_path(&args.out, &args.prefix, n))?)) };
    let mut w = open_shard(0)?;
    let mut in_shard = 0usize;
    let mut names: HashMap<String, String> = HashMap::new(); // member stem → source key, per shard
    let mut buf = Vec::new();
    for i in 0..src.len() {
        src.read_bytes(i, &mut buf)?;
        let m = src.sample(i);
        // Member headers and padding: about 3 blocks per sample with its label.
        let need = buf.len() as u64 + 3 * 512;
        if in_shard > 0 && w.written() + need + 1024 > args.shard_size {
            out.finish(w, &shard_path(&args.out, &args.prefix, shard_no))?;
            shard_no += 1;
            w = open_shard(shard_no)?;
            in_shard = 0;
            names.clear();
        }
        let stem = member_stem(&m.key);
        if let Some(other) = names.insert(stem.clone(), m.key.clone()) {
            return Err(Error::dataset(
                &args.src,
                format!("duplicate keys: samples {other:?} and {:?} both become tar key {stem:?}", m.key),
            ));
        }
        let p = shard_path(&args.out, &args.prefix, shard_no);
        // The member's extension says the sniffed format (a PNG named .JPEG becomes key.png);
        // bytes in no known format keep .jpg and are refused by the index as before.
        let ext = match stoke::codec::sniff(&buf) {
            Some(stoke::codec::ImageFormat::Png) => "png",
            Some(stoke::codec::ImageFormat::WebP) => "webp",
            _ => "jpg",
        };
        w.append(&format!("{stem}.{ext}"), &buf).map_err(|e| Error::io(&p, e))?;
        if m.label >= 0 {
            w.append(&format!("{stem}.cls"), m.label.to_string().as_bytes()).map_err(|e| Error::io(&p, e))?;
        }
        in_shard += 1;
        pb.inc(buf.len() as u64);
    }
    out.finish(w, &shard_path(&args.out, &args.prefix, shard_no))?;
    pb.finish_and_clear();
    let mut text = src.classes().join("\n");
    text.push('\n');
    out.write(&out_path(&args.out, CLASSES_FILE), text.into_bytes())?;
    // The streaming index's sidecar: one pass over the new shards' tar headers (local) or
    // over their bytes (store), then written beside them.
    let set = ShardSet::open(&args.out, 0)?;
    out.write(&out_path(&args.out, SIDECAR), sidecar_json(&set.facts).into_bytes())?;
    let packed = Dataset::open(&args.out, &IndexOptions { progress: true, ..IndexOptions::default() })?;
    if packed.len() != src.len() {
        return Err(Error::dataset(&args.out, format!("packed {} samples but the shards index {}", src.len(), packed.len())));
    }
    // In a store, the index beside the shards too: nodes read it instead of every shard.
    #[cfg(feature = "remote")]
    if out.is_remote() {
        packed.publish_index()?;
    }
    println!(
        "packed {} samples ({:.1} MiB) from {} into {} shard(s) in {}",
        src.len(),
        total as f64 / (1 << 20) as f64,
        args.src.display(),
        shard_no + 1,
        args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("10kb"), Ok(10_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12 parsecs").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("MiB").unwrap_err().contains("must be a number"));
        assert!(parse_size("0").unwrap_err().contains("at least 1 byte"));
    }

    #[test]
    fn stems() {
        assert_eq!(member_stem("n01/n01_10026.JPEG"), "n01/n01_10026");
        assert_eq!(member_stem("a/img.v2.jpg"), "a/img_v2");
        assert_eq!(member_stem("plain"), "plain");
    }
}
