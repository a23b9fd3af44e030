//! `stoke preview DATASET --out grid.png`: a PNG grid of augmented samples, denormalized back
//! to 0..255, each with its key written under it, so a person can see the augmentation at a
//! glance; each tile's drawn parameters are printed on standard output, one line per tile.

use crate::pipeline_args::PipelineArgs;
use std::path::PathBuf;
use stoke::pipeline::Pipeline;

/// Options of `stoke preview`.
#[derive(clap::Args)]
pub struct Args {
    /// Folder (ImageFolder), file list, tar pattern or folder of tars.
    pub dataset: PathBuf,
    /// PNG file to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Samples in the grid.
    #[arg(long, default_value_t = 16)]
    pub count: usize,
    /// Columns (default: a square-ish grid).
    #[arg(long)]
    pub cols: Option<usize>,
    /// Shared pipeline options (`--batch-size` is replaced by `--count`).
    #[command(flatten)]
    pub pipeline: PipelineArgs,
}

/// 3×5 glyphs, one row per 3 bits (top row in the high bits), for the characters keys are
/// made of. Upper- and lower-case letters share a glyph; anything else prints as '?'.
fn glyph(c: char) -> u16 {
    let rows: [u8; 5] = match c.to_ascii_lowercase() {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 2, 2, 2],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        'a' => [2, 5, 7, 5, 5],
        'b' => [6, 5, 6, 5, 6],
        'c' => [3, 4, 4, 4, 3],
        'd' => [6, 5, 5, 5, 6],
        'e' => [7, 4, 6, 4, 7],
        'f' => [7, 4, 6, 4, 4],
        'g' => [3, 4, 5, 5, 3],
        'h' => [5, 5, 7, 5, 5],
        'i' => [7, 2, 2, 2, 7],
        'j' => [1, 1, 1, 5, 2],
        'k' => [5, 5, 6, 5, 5],
        'l' => [4, 4, 4, 4, 7],
        'm' => [5, 7, 7, 5, 5],
        'n' => [6, 5, 5, 5, 5],
        'o' => [2, 5, 5, 5, 2],
        'p' => [6, 5, 6, 4, 4],
        'q' => [2, 5, 5, 6, 3],
        'r' => [6, 5, 6, 5, 5],
        's' => [3, 4, 2, 1, 6],
        't' => [7, 2, 2, 2, 2],
        'u' => [5, 5, 5, 5, 7],
        'v' => [5, 5, 5, 5, 2],
        'w' => [5, 5, 7, 7, 5],
        'x' => [5, 5, 2, 5, 5],
        'y' => [5, 5, 2, 2, 2],
        'z' => [7, 1, 2, 4, 7],
        '.' => [0, 0, 0, 0, 2],
        '_' => [0, 0, 0, 0, 7],
        '-' => [0, 0, 7, 0, 0],
        '/' => [1, 1, 2, 4, 4],
        ':' => [0, 2, 0, 2, 0],
        ' ' => [0, 0, 0, 0, 0],
        _ => [7, 1, 2, 0, 2],
    };
    rows.iter().fold(0u16, |acc, r| (acc << 3) | *r as u16)
}

/// Draws text into an RGB canvas.
struct Canvas {
    w: usize,
    h: usize,
    rgb: Vec<u8>,
}

impl Canvas {
    fn put(&mut self, x: usize, y: usize, v: [u8; 3]) {
        if x < self.w && y < self.h {
            let i = (y * self.w + x) * 3;
            self.rgb[i..i + 3].copy_from_slice(&v);
        }
    }

    /// Text at (x, y), each glyph pixel a `scale`×`scale` square, 1 column of spacing.
    fn text(&mut self, x: usize, y: usize, s: &str, scale: usize) {
        for (k, c) in s.chars().enumerate() {
            let g = glyph(c);
            for row in 0..5 {
                for col in 0..3 {
                    if g >> (14 - (row * 3 + col)) & 1 == 1 {
                        for dy in 0..scale {
                            for dx in 0..scale {
                                self.put(x + (k * 4 + col) * scale + dx, y + row * scale + dy, [255, 255, 255]);
                            }
                        }
                    }
                }
            }
        }
    }
}

pub fn run(args: Args) -> stoke::Result<()> {
    if args.count == 0 {
        return Err(stoke::Error::config("--count must be at least 1"));
    }
    let mut config = args.pipeline.to_config(args.dataset.clone())?;
    if config.decode_only {
        return Err(stoke::Error::config(
            "--decode-only makes batches without images (stoke bench's decoder-only measurement): nothing to preview",
        ));
    }
    config.batch_size = args.count;
    let mut pipeline = Pipeline::new(config.clone())?;
    pipeline.start_epoch(args.pipeline.epoch, 0);
    let mut batch = pipeline.next_batch().ok_or_else(|| stoke::Error::dataset(&args.dataset, "the dataset delivered no batch"))??;
    batch.make_host()?; // a CUDA batch is copied to the host

    let n = batch.len();
    let (th, tw) = batch.image_size();
    let cols = args.cols.unwrap_or_else(|| (n as f64).sqrt().ceil() as usize).clamp(1, n);
    let rows = n.div_ceil(cols);
    let scale = if tw >= 160 { 2 } else { 1 };
    let caption = 5 * scale + 4;
    let pad = 4;
    let (cw, ch) = (cols * (tw + pad) + pad, rows * (th + caption + pad) + pad);
    let mut canvas = Canvas { w: cw, h: ch, rgb: vec![32u8; cw * ch * 3] };
    let (mean, std) = (config.output.mean, config.output.std);
    for i in 0..n {
        let (ox, oy) = (pad + (i % cols) * (tw + pad), pad + (i / cols) * (th + caption + pad));
        for y in 0..th {
            for x in 0..tw {
                let mut px = [0u8; 3];
                for (c, p) in px.iter_mut().enumerate() {
                    let v = batch.value(i, c, y, x).unwrap_or(0.0);
                    *p = if config.output.dtype == stoke::config::DType::U8 {
                        v as u8 // already the 0..255 image
                    } else {
                        ((v * std[c] + mean[c]) * 255.0).round().clamp(0.0, 255.0) as u8
                    };
                }
                canvas.put(ox + x, oy + y, px);
            }
        }
        // The key's tail (its most specific part) as much as fits under the tile.
        let key = &pipeline.key(&batch, i);
        let fit = (tw / (4 * scale)).max(1);
        let chars: Vec<char> = key.chars().collect();
        let shown: String = chars[chars.len().saturating_sub(fit)..].iter().collect();
        canvas.text(ox, oy + th + 2, &shown, scale);
        // Every drawn parameter, one line per tile, on standard output.
        println!("tile {i} (row {}, column {}) {key}: {}", i / cols, i % cols, batch.params[i * batch.views()].summary());
    }
    let file = std::fs::File::create(&args.out).map_err(|e| stoke::Error::io(&args.out, e))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), cw as u32, ch as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let png_err = |e: png::EncodingError| stoke::Error::io(&args.out, std::io::Error::other(e.to_string()));
    let mut w = enc.write_header().map_err(png_err)?;
    w.write_image_data(&canvas.rgb).map_err(png_err)?;
    w.finish().map_err(png_err)?;
    eprintln!("stoke preview: {n} samples ({cols} columns) written to {}", args.out.display());
    Ok(())
}
