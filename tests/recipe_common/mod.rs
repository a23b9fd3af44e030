//! Shared by the recipe tests: `stoke dump` on a small generated set, an independent random
//! generator for the reference samplers, the two-sample Kolmogorov–Smirnov statistic, and the
//! parameters of an identity geometry (for goldens made on the image as stored).
#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;
use std::process::Output;

/// A generated set of `images` JPEGs in two classes and an output folder, in a temporary
/// directory that lives as long as this value.
pub struct DumpRun {
    _dir: tempfile::TempDir,
    /// The dataset folder.
    pub ds: PathBuf,
    /// `dump --out`.
    pub out: PathBuf,
}

impl DumpRun {
    pub fn new(images: usize) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ds = dir.path().join("ds");
        let mut cfg = stoke::gen::GenConfig::new(images);
        cfg.classes = 2;
        stoke::gen::generate(&ds, &cfg, &|_| {}).unwrap();
        let out = dir.path().join("out");
        DumpRun { _dir: dir, ds, out }
    }

    /// `stoke dump DS --out OUT --batch-size 4 --batches B --size 24 --backend cpu EXTRA…`.
    pub fn dump(&self, batches: u32, extra: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
            .arg("dump")
            .arg(&self.ds)
            .arg("--out")
            .arg(&self.out)
            .args(["--batch-size", "4", "--batches", &batches.to_string(), "--size", "24", "--backend", "cpu"])
            .args(extra)
            .output()
            .unwrap()
    }
}

/// xorshift64* — a generator unrelated to stoke's keyed SplitMix64 stream.
pub struct Xs(pub u64);
impl Xs {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn randint(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.uniform() * (hi - lo + 1) as f64) as i64
    }
    /// Python's `random.gauss(mu, sigma)` in distribution (Box–Muller).
    pub fn gauss(&mut self, mu: f64, sigma: f64) -> f64 {
        let (u1, u2) = (1.0 - self.uniform(), self.uniform());
        mu + sigma * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Two-sample Kolmogorov–Smirnov statistic.
pub fn ks(mut a: Vec<f64>, mut b: Vec<f64>) -> f64 {
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (mut i, mut j, mut d) = (0, 0, 0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / a.len() as f64 - j as f64 / b.len() as f64).abs());
    }
    d
}

/// Parameters that leave a `w × h` image as it is: whole-image crop, same-size resize, no flip
/// or rotation (the steps after the geometry then see the stored pixels).
pub fn identity(w: i32, h: i32) -> stoke::augment::params::AugParams {
    stoke::augment::params::AugParams {
        src_w: w,
        src_h: h,
        crop_w: w,
        crop_h: h,
        resize_w: w,
        resize_h: h,
        out_w: w,
        out_h: h,
        orientation: 1,
        antialias: 1,
        ..Default::default()
    }
}
