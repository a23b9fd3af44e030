//! Opt-in: every file of the corpus's conformance/ and generated/ folders goes through
//! `stoke dump --on-error skip`: no panic, no hang, and every file is either delivered (in
//! samples.jsonl) or named in errors.jsonl.
//!
//! `STOKE_CORPUS=/path/to/corpus/dev cargo test --release --test corpus_dump -- --nocapture`

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// An ImageFolder view of `src` under `dst`: one class per subfolder (files directly in `src`
/// go to class "all"), symlinks named so the folder source takes them (`.jpg` appended to
/// names without a JPEG extension, e.g. `.mpo`). Returns the number of files.
fn image_folder(src: &Path, dst: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            n += image_folder_class(&p, &dst.join(p.file_name().unwrap()));
        }
    }
    n + image_folder_class(src, &dst.join("all"))
}

fn image_folder_class(src: &Path, dst: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        if !p.is_file() {
            continue;
        }
        std::fs::create_dir_all(dst).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let lower = name.to_lowercase();
        let name = if lower.ends_with(".jpg") || lower.ends_with(".jpeg") { name } else { format!("{name}.jpg") };
        std::os::unix::fs::symlink(&p, dst.join(name)).unwrap();
        n += 1;
    }
    n
}

fn keys(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_conformance_and_generated_file_is_delivered_or_named() {
    let Some(corpus) = std::env::var_os("STOKE_CORPUS").map(PathBuf::from) else {
        eprintln!("STOKE_CORPUS not set: skipped");
        return;
    };
    for top in ["conformance", "generated"] {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        let files = image_folder(&corpus.join(top), &ds);
        let out = tmp.path().join("out");
        let start = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_stoke"))
            .args(["dump"])
            .arg(&ds)
            .arg("--out")
            .arg(&out)
            .args(["--backend", "cpu", "--on-error", "skip", "--batches", "0", "--batch-size", "32", "--size", "64"])
            .spawn()
            .unwrap();
        // No hang: the whole folder must be through in well under a minute.
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(120) {
                child.kill().unwrap();
                panic!("{top}: stoke dump still running after 120 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(status.success(), "{top}: stoke dump failed: {status}");
        let delivered: Vec<String> = keys(&out.join("samples.jsonl"));
        let errors: Vec<String> = keys(&out.join("errors.jsonl"));
        let replaced: BTreeSet<String> = std::fs::read_to_string(out.join("samples.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["replaces"].as_str().map(String::from))
            .collect();
        let errors_set: BTreeSet<&String> = errors.iter().collect();
        let delivered_own: BTreeSet<&String> = delivered.iter().collect();
        let mut missing = Vec::new();
        for class in std::fs::read_dir(&ds).unwrap() {
            let class = class.unwrap().path();
            if !class.is_dir() {
                continue; // the saved index
            }
            for f in std::fs::read_dir(&class).unwrap() {
                let f = f.unwrap().path();
                let key = format!("{}/{}", class.file_name().unwrap().to_string_lossy(), f.file_name().unwrap().to_string_lossy());
                if !delivered_own.contains(&key) && !errors_set.contains(&key) {
                    missing.push(key);
                }
            }
        }
        eprintln!(
            "{top}: {files} files, {} delivered slots, {} errors ({} substituted slots) in {:.1} s",
            delivered.len(),
            errors.len(),
            replaced.len(),
            start.elapsed().as_secs_f64()
        );
        for e in std::fs::read_to_string(out.join("errors.jsonl")).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(e).unwrap();
            eprintln!("  skipped {}: {}", v["key"].as_str().unwrap(), v["reason"].as_str().unwrap());
        }
        assert!(missing.is_empty(), "{top}: neither delivered nor in errors.jsonl: {missing:?}");
        assert_eq!(delivered.len(), files, "{top}: one delivered slot per file in the epoch");
    }
}
