//! `stoke dump` on a small generated set, for the recipe tests' command-line checks.

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
