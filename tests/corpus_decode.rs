//! Opt-in: the CPU decoder against Pillow's decode on every file of the development corpus.
//!
//! `STOKE_CORPUS=/path/to/corpus/dev cargo test --test corpus_decode -- --nocapture`
//! (needs `python3` with Pillow and numpy; the Pillow pixels are produced by
//! scripts/golden.py, run from the working directory).

use std::path::{Path, PathBuf};
use stoke::backend::cpu::decode::{decode_rgb, decode_rgb_region, DecodedImage};

fn corpus() -> Option<PathBuf> {
    std::env::var_os("STOKE_CORPUS").map(PathBuf::from)
}

/// Run scripts/golden.py SUB CORPUS --out DIR and return DIR's list.tsv rows.
pub fn pillow_reference(sub: &str, corpus: &Path, out: &Path) -> Vec<Vec<String>> {
    let st = std::process::Command::new("python3")
        .arg("scripts/golden.py")
        .arg(sub)
        .arg(corpus)
        .arg("--out")
        .arg(out)
        .status()
        .expect("running python3 scripts/golden.py (run cargo test from the repository root)");
    assert!(st.success(), "scripts/golden.py {sub} failed: {st}");
    std::fs::read_to_string(out.join("list.tsv")).unwrap().lines().map(|l| l.split('\t').map(String::from).collect()).collect()
}

#[test]
fn decode_matches_pillow_on_the_corpus() {
    let Some(corpus) = corpus() else {
        eprintln!("STOKE_CORPUS not set: skipped");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rows = pillow_reference("decode-corpus", &corpus, tmp.path());
    let mut out = DecodedImage::default();
    let (mut exact, mut compared, mut worst) = (0, 0, (0.0f64, String::new()));
    let mut only_stoke = Vec::new();
    let mut failures = Vec::new();
    for r in &rows {
        let bytes = std::fs::read(corpus.join(&r[0])).unwrap();
        let supported = stoke::codec::sniff(&bytes).is_some();
        let ours = decode_rgb(&bytes, 100_000_000, &mut out);
        match (r[1].as_str(), ours) {
            ("ok", Ok(())) => {
                let want = std::fs::read(tmp.path().join(&r[4])).unwrap();
                let (w, h): (u32, u32) = (r[2].parse().unwrap(), r[3].parse().unwrap());
                assert_eq!((out.width, out.height), (w, h), "{}", r[0]);
                compared += 1;
                let diff: u64 = want.iter().zip(&out.rgb).map(|(a, b)| a.abs_diff(*b) as u64).sum();
                let mean = diff as f64 / want.len() as f64;
                if diff == 0 {
                    exact += 1;
                } else if mean > worst.0 {
                    worst = (mean, r[0].clone());
                }
            }
            ("ok", Err(e)) if supported => failures.push(format!("{}: pillow decodes it, stoke says: {e}", r[0])),
            ("ok", Err(_)) => {} // a format stoke does not decode (GIF, WebP...): refusing it is right
            (_, Ok(())) => only_stoke.push(r[0].clone()),
            (_, Err(e)) => eprintln!("both refuse {}: stoke: {e}; pillow: {}", r[0], r[4]),
        }
    }
    eprintln!("{compared} compared, {exact} bit-exact, worst mean abs diff {:.4} ({})", worst.0, worst.1);
    eprintln!("decoded by stoke but not by Pillow: {only_stoke:?}");
    assert!(failures.is_empty(), "{failures:#?}");
    // libjpeg-turbo with Pillow's settings and Pillow's CMYK formula: identical pixels.
    assert_eq!(exact, compared, "worst {worst:?}");
}

/// The CPU backend decodes only the region holding the crop: on every corpus file, regions
/// give exactly the pixels of the full decode (every chroma layout, progressive, restarts,
/// CMYK, odd sizes).
#[test]
fn region_decodes_equal_the_full_decode_on_the_corpus() {
    let Some(corpus) = corpus() else {
        eprintln!("STOKE_CORPUS not set: skipped");
        return;
    };
    let (mut full, mut part) = (DecodedImage::default(), DecodedImage::default());
    let mut checked = 0;
    for top in ["imagenet_like", "conformance", "generated"] {
        let mut stack = vec![corpus.join(top)];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let bytes = std::fs::read(&p).unwrap();
                if decode_rgb(&bytes, 100_000_000, &mut full).is_err() {
                    continue;
                }
                let (w, h) = (full.width, full.height);
                let regions = [(w / 3, h / 4, w / 2, h / 2), (w - w / 5 - 1, 0, w / 5 + 1, h / 3 + 1), (1, h / 2, w / 4 + 1, h - h / 2)];
                for (x, y, rw, rh) in regions {
                    if rw == 0 || rh == 0 || x + rw > w || y + rh > h {
                        continue;
                    }
                    decode_rgb_region(&bytes, 100_000_000, Some((x, y, rw, rh)), &mut part).unwrap();
                    for yy in y..y + rh {
                        let a = ((yy * w + x) * 3) as usize;
                        let b = (((yy - part.region_y) * part.region_w + x - part.region_x) * 3) as usize;
                        assert_eq!(
                            &full.rgb[a..a + rw as usize * 3],
                            &part.rgb[b..b + rw as usize * 3],
                            "{} region ({x},{y},{rw},{rh}) row {yy}",
                            p.display()
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    eprintln!("{checked} files: region decodes equal the full decode");
    assert!(checked > 400);
}
