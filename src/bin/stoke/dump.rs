//! `stoke dump DATASET --out DIR`: write augmented batches as NumPy `.npy` files, with the
//! parameters drawn for every sample, for people who want to look at (or export) what the
//! model sees and for checks against other libraries.
//!
//! Files written in DIR:
//! - `batch_00000.npy` …: the batch tensor, standard NumPy format 1.0, little-endian: `<f4`
//!   (f32) or `<f2` (f16); bf16 has no NumPy dtype and is written as its raw bits, `<u2`
//!   (`torch.from_numpy(a).view(torch.bfloat16)` reads it back);
//!   With `views` (several views per sample), one file per group instead:
//!   `batch_00000.group_0.npy` … of shape `[views of the group, N, C, H, W]` (or NHWC), the
//!   group's views in order (the batch's own memory layout);
//! - `batch_00000.labels.npy`: the labels, `<i8`;
//! - `samples.jsonl`: one line per delivered sample: `batch`, `slot`, `index`, `key`,
//!   `label`, `position`, the drawn `params` (the first view's), `views` (every view's params,
//!   with `views`), and `replaces` (the key it stands in for) when the slot holds a substitute;
//! - `errors.jsonl`: one line per skipped sample: `key`, `reason`, `location`, `batch`,
//!   `position`, `replaced_by`;
//! - `dump.json`: the shape, dtype, layout, mean/std and how the `.npy` files are typed.

use crate::pipeline_args::PipelineArgs;
use serde_json::json;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use stoke::augment::params::{SampleRng, STREAM_AFFINE};
use stoke::config::DType;
use stoke::pipeline::Pipeline;

/// Options of `stoke dump`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder (ImageFolder), file list, tar pattern or folder of tars.
    pub dataset: PathBuf,
    /// Output folder (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Batches to write (0 = the whole epoch).
    #[arg(long, default_value_t = 1)]
    pub batches: u64,
    /// Shared pipeline options.
    #[command(flatten)]
    pub pipeline: PipelineArgs,
}

/// Write a NumPy format 1.0 `.npy` file: magic, version, header length, the header dict
/// padded with spaces to a multiple of 64 bytes (newline-terminated), then the raw data.
pub fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) -> stoke::Result<()> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut f = BufWriter::new(std::fs::File::create(path).map_err(|e| stoke::Error::io(path, e))?);
    let mut w = || -> std::io::Result<()> {
        f.write_all(b"\x93NUMPY\x01\x00")?;
        f.write_all(&(header.len() as u16).to_le_bytes())?;
        f.write_all(header.as_bytes())?;
        f.write_all(data)?;
        f.flush()
    };
    w().map_err(|e| stoke::Error::io(path, e))
}

/// The `.npy` descr of a dtype.
pub fn npy_descr(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F16 => "<f2",
        DType::Bf16 => "<u2",
        DType::U8 => "|u1",
    }
}

/// f32 values as the shortest decimals that read back to them (0.485, not 0.48500001430511475).
fn short_f32(v: &[f32]) -> Vec<serde_json::Value> {
    v.iter().map(|x| x.to_string().parse::<f64>().map(serde_json::Value::from).unwrap_or_default()).collect()
}

fn jsonl(path: &Path) -> stoke::Result<BufWriter<std::fs::File>> {
    Ok(BufWriter::new(std::fs::File::create(path).map_err(|e| stoke::Error::io(path, e))?))
}

pub fn run(args: Args) -> stoke::Result<()> {
    let config = args.pipeline.to_config(args.dataset.clone())?;
    if config.decode_only {
        return Err(stoke::Error::config(
            "--decode-only makes batches without images (stoke bench's decoder-only measurement): nothing to dump",
        ));
    }
    std::fs::create_dir_all(&args.out).map_err(|e| stoke::Error::io(&args.out, e))?;
    let mut pipeline = Pipeline::new(config.clone())?;
    let samples_path = args.out.join("samples.jsonl");
    let errors_path = args.out.join("errors.jsonl");
    let mut samples = jsonl(&samples_path)?;
    let mut errors = jsonl(&errors_path)?;
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| stoke::Error::io(&p, e)
    };
    pipeline.start_epoch(args.pipeline.epoch, 0);
    let mut written = 0u64;
    let mut shape = [0usize; 4];
    let (mut delivered, mut skipped) = (0u64, 0u64);
    while args.batches == 0 || written < args.batches {
        let Some(batch) = pipeline.next_batch() else { break };
        let mut batch = batch?;
        batch.make_host()?; // a CUDA batch is copied to the host (and its ring slot returned)
        let b = written;
        shape = batch.shape;
        let bytes = batch.host_bytes().ok_or_else(|| stoke::Error::config("dump needs host batches"))?;
        if config.views.is_empty() {
            write_npy(&args.out.join(format!("batch_{b:05}.npy")), npy_descr(batch.dtype), &batch.shape, bytes)?;
        } else {
            let places = batch.view_places();
            for (g, group) in batch.groups.iter().enumerate() {
                let first = places.iter().find(|p| p.group == g).expect("a group has a view");
                let view = batch.shape_of(batch.len(), first.width, first.height);
                let shape = [group.count, view[0], view[1], view[2], view[3]];
                let len = group.count * batch.len() * first.sample_bytes;
                let path = args.out.join(format!("batch_{b:05}.group_{g}.npy"));
                write_npy(&path, npy_descr(batch.dtype), &shape, &bytes[first.offset..first.offset + len])?;
            }
        }
        let labels: Vec<u8> = batch.labels.iter().flat_map(|l| l.to_le_bytes()).collect();
        write_npy(&args.out.join(format!("batch_{b:05}.labels.npy")), "<i8", &[batch.len()], &labels)?;
        if batch.num_classes > 0 {
            // Mixup/CutMix soft targets [N, classes].
            let t: Vec<u8> = batch.targets.iter().flat_map(|v| v.to_le_bytes()).collect();
            write_npy(&args.out.join(format!("batch_{b:05}.targets.npy")), "<f4", &[batch.len(), batch.num_classes], &t)?;
        }
        for slot in 0..batch.len() {
            let index = batch.indices[slot];
            let mut line = json!({
                "batch": b,
                "slot": slot,
                "index": index,
                "key": pipeline.key(&batch, slot),
                "label": batch.labels[slot],
                "position": batch.positions[slot],
                "params": batch.params[slot * batch.views()],
            });
            if batch.views() > 1 {
                // Every view's params, in view order (`params` is the first view's).
                line["views"] = json!(batch.params[slot * batch.views()..(slot + 1) * batch.views()]);
            }
            if let Some(s) = batch.substitutes.iter().find(|s| s.slot == slot) {
                line["replaces"] = json!(s.key);
            }
            if let Some(a) = &config.augment.affine {
                // RandomAffine's draw by name (the params hold only its matrix): drawn again
                // from the sample's key, written when it gives this slot's matrix (a
                // substitute carries its source's).
                let p = &batch.params[slot * batch.views()];
                let mut rng = SampleRng::new(config.seed, args.pipeline.epoch, batch.positions[slot], STREAM_AFFINE);
                let d = a.draw(&mut rng, p.out_w, p.out_h);
                if d.inverse_matrix() == p.affine_m {
                    line["params"]["affine_draw"] = json!({"angle": d.angle, "translate": [d.translate.0, d.translate.1], "scale": d.scale, "shear": [d.shear.0, d.shear.1]});
                }
            }
            writeln!(samples, "{line}").map_err(io(&samples_path))?;
            delivered += 1;
        }
        for s in &batch.substitutes {
            let line = json!({
                "key": s.key,
                "reason": s.reason,
                "kind": s.error.kind(),
                "location": s.location,
                "batch": b,
                "position": s.position,
                "replaced_by": s.replaced_by_key,
            });
            writeln!(errors, "{line}").map_err(io(&errors_path))?;
            skipped += 1;
        }
        written += 1;
        pipeline.recycle(batch);
    }
    samples.flush().map_err(io(&samples_path))?;
    errors.flush().map_err(io(&errors_path))?;
    let meta = json!({
        "batches": written,
        "batch_shape": shape,
        "groups": config.view_groups().iter().map(|g| json!({"count": g.count(), "size": [g.size().0, g.size().1]})).collect::<Vec<_>>(),
        "dtype": format!("{:?}", config.output.dtype).to_lowercase(),
        "npy_descr": npy_descr(config.output.dtype),
        "layout": format!("{:?}", config.output.layout).to_lowercase(),
        "mean": short_f32(&config.output.mean),
        "std": short_f32(&config.output.std),
        "note": if config.output.dtype == DType::Bf16 {
            "bfloat16 has no NumPy dtype: the .npy files hold its raw bits as uint16; \
             torch.from_numpy(a).view(torch.bfloat16) or (a.astype(np.uint32) << 16).view(np.float32) reads them"
        } else {
            "values are (x/255 - mean)/std"
        },
        "epoch": args.pipeline.epoch,
        "seed": config.seed,
        "samples": delivered,
        "skipped": skipped,
    });
    let meta_path = args.out.join("dump.json");
    std::fs::write(&meta_path, serde_json::to_string_pretty(&meta).unwrap_or_default()).map_err(io(&meta_path))?;
    eprintln!("stoke dump: {written} batches, {delivered} samples ({skipped} skipped, see errors.jsonl) in {}", args.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format as NumPy documents it (format.rst, version 1.0).
    #[test]
    fn npy_header_follows_format_1_0() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.npy");
        let data: Vec<u8> = (0..2 * 3 * 4 * 5 * 4).map(|i| i as u8).collect();
        write_npy(&p, "<f4", &[2, 3, 4, 5], &data).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0, "data starts 64-byte aligned");
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(header.ends_with('\n'));
        assert_eq!(header.trim_end(), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4, 5), }");
        assert_eq!(&b[10 + hlen..], &data[..]);
        write_npy(&p, "<i8", &[7], &[0u8; 56]).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert!(std::str::from_utf8(&b[10..]).unwrap().contains("'shape': (7,), }"), "1-d shapes have a trailing comma");
    }
}
