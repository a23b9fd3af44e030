//! `stoke index`, `stoke plan`, `stoke pack` end to end, and every bad input's message.

mod dataset_common;

use dataset_common::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn stoke(args: &[&str], env: &[(&str, &str)], cache: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stoke"));
    c.args(args).env_remove("RANK").env_remove("WORLD_SIZE").env("XDG_CACHE_HOME", cache);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn fails(o: Output) -> String {
    assert!(!o.status.success(), "expected failure, stdout: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8(o.stderr).unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn index_json_report() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["cat", "dog"], &[3, 2]);
    let mut prog = Jpeg::new(640, 480);
    prog.sof = 0xC2;
    write(&root.join("dog/prog.jpg"), &prog.bytes());
    let mut cmyk = Jpeg::new(100, 100);
    cmyk.comps = vec![(1, 1, 1), (2, 1, 1), (3, 1, 1), (4, 1, 1)];
    cmyk.adobe = Some(2);
    write(&root.join("dog/cmyk.jpg"), &cmyk.bytes());
    write(&root.join("dog/gray.jpg"), &Jpeg::new(50, 60).gray().bytes());
    write(&root.join("cat/fake.jpg"), b"GIF89a nope");
    write(&root.join("cat/info.csv"), b"a,b");
    let out = ok(stoke(&["index", p(&root), "--json"], &[], t.path()));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["samples"], 9);
    assert_eq!(v["ignored_files"], 1);
    assert_eq!(v["classes"][0]["name"], "cat");
    assert_eq!(v["classes"][0]["count"], 4);
    assert_eq!(v["classes"][1]["count"], 5);
    assert_eq!(v["coding"]["progressive"], 1);
    assert_eq!(v["coding"]["baseline"], 7);
    assert_eq!(v["cmyk"], 1);
    assert_eq!(v["gray"], 1);
    assert_eq!(v["subsampling"]["4:2:0"], 6);
    assert_eq!(v["not_decodable"][0]["key"], "cat/fake.jpg");
    assert!(v["not_decodable"][0]["reason"].as_str().unwrap().contains("a GIF file"));
    assert_eq!(v["index_reused"], false);
    // Text report, second run: reused.
    let text = ok(stoke(&["index", p(&root)], &[], t.path()));
    assert!(
        text.contains("(reused)") && text.contains("cat/fake.jpg") && text.contains("1 files that are not images (.jpg/.jpeg/.png)"),
        "{text}"
    );
}

#[test]
fn plan_ranks_and_env_defaults() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b", "c"], &[4, 3, 3]);
    let all: Vec<String> = ok(stoke(&["plan", p(&root), "--seed", "7"], &[], t.path())).lines().map(str::to_owned).collect();
    assert_eq!(all.len(), 10);
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 10);
    // Rank slices via flags and via torchrun's environment agree; together they cover all.
    let mut union = Vec::new();
    for r in 0..4 {
        let flags = ok(stoke(&["plan", p(&root), "--seed", "7", "--rank", &r.to_string(), "--world-size", "4"], &[], t.path()));
        let env = ok(stoke(&["plan", p(&root), "--seed", "7"], &[("RANK", &r.to_string()), ("WORLD_SIZE", "4")], t.path()));
        assert_eq!(flags, env);
        let keys: Vec<&str> = flags.lines().collect();
        assert_eq!(keys.len(), 3); // ceil(10/4)
                                   // PyTorch striding over the single-rank order, padded by wrapping.
        let want: Vec<&str> = (0..3).map(|i| all[(r + 4 * i) % 10].as_str()).collect();
        assert_eq!(keys, want);
        union.extend(keys.iter().map(|s| s.to_string()));
    }
    union.sort();
    union.dedup();
    assert_eq!(union.len(), 10);
    let dl = ok(stoke(&["plan", p(&root), "--rank", "1", "--world-size", "4", "--drop-last"], &[], t.path()));
    assert_eq!(dl.lines().count(), 2);
    // Epochs differ; no-shuffle is dataset order.
    let e1 = ok(stoke(&["plan", p(&root), "--seed", "7", "--epoch", "1"], &[], t.path()));
    assert_ne!(e1.lines().collect::<Vec<_>>(), all);
    let ordered = ok(stoke(&["plan", p(&root), "--no-shuffle"], &[], t.path()));
    assert_eq!(ordered.lines().next(), Some("a/img_0000.jpg"));
    // Class-balanced: with replacement, any length; class "a" (4 of 10 samples) drawn about a third.
    let bal = ok(stoke(&["plan", p(&root), "--class-balanced", "--epoch-length", "3000"], &[], t.path()));
    assert_eq!(bal.lines().count(), 3000);
    let a = bal.lines().filter(|k| k.starts_with("a/")).count();
    assert!((850..1150).contains(&a), "{a} of 3000 from class a");
    // World larger than the dataset, bad env.
    let e = fails(stoke(&["plan", p(&root), "--world-size", "11"], &[], t.path()));
    assert!(e.contains(p(&root)) && e.contains("world size 11 is larger than the epoch (10 samples)"), "{e}");
    let e = fails(stoke(&["plan", p(&root)], &[("WORLD_SIZE", "four")], t.path()));
    assert!(e.contains("$WORLD_SIZE") && e.contains("\"four\""), "{e}");
}

#[test]
fn pack_then_plan_lists_the_same_samples_with_labels_kept() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b", "c"], &[9, 7, 8]);
    write(&root.join("b/name.with.dots.jpg"), &jpeg(31, 32));
    // A PNG under a .JPEG name: packed as a `.png` member (the sniffed format), facts kept.
    write(&root.join("c/png_named.JPEG"), include_bytes!("golden/png/rgba8.png"));
    let out = t.path().join("packed");
    let msg = ok(stoke(&["pack", p(&root), p(&out), "--shard-size", "4KiB"], &[], t.path()));
    assert!(msg.contains("packed 26 samples"), "{msg}");
    let shards = fs::read_dir(&out).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "tar")).count();
    assert!(shards > 3, "{shards} shards");
    // Same number of samples, same label counts, same index facts.
    let a = ok(stoke(&["plan", p(&root), "--positions"], &[], t.path()));
    let b = ok(stoke(&["plan", p(&out), "--positions"], &[], t.path()));
    assert_eq!(a.lines().count(), 26);
    assert_eq!(b.lines().count(), 26);
    let labels = |s: &str| {
        let mut m = BTreeMap::new();
        for l in s.lines() {
            *m.entry(l.split('\t').nth(1).unwrap().to_string()).or_insert(0) += 1;
        }
        m
    };
    assert_eq!(labels(&a), labels(&b));
    let ia: serde_json::Value = serde_json::from_str(&ok(stoke(&["index", p(&root), "--json"], &[], t.path()))).unwrap();
    let ib: serde_json::Value = serde_json::from_str(&ok(stoke(&["index", p(&out), "--json"], &[], t.path()))).unwrap();
    assert_eq!(ib["classes"], ia["classes"]); // names from classes.txt
    assert_eq!(ib["top_resolutions"], ia["top_resolutions"]);
    assert_eq!(ib["index_reused"], true); // pack built the shards' index
                                          // Byte for byte: every folder sample is in the shards under its tar key.
    let o = stoke::source::IndexOptions { cache_dir: Some(t.path().to_path_buf()), ..Default::default() };
    let src = stoke::source::Dataset::open(&root, &o).unwrap();
    let packed = stoke::source::Dataset::open(&out, &o).unwrap();
    let by_key: BTreeMap<String, usize> =
        packed.samples().iter().enumerate().map(|(i, s)| (s.key.split_once('/').unwrap().1.to_string(), i)).collect();
    let (mut a_buf, mut b_buf) = (Vec::new(), Vec::new());
    for (i, s) in src.samples().iter().enumerate() {
        let stem = s.key.rsplit_once('.').unwrap().0.replace("name.with", "name_with").replace("with.dots", "with_dots");
        let j = by_key[&stem];
        src.read_bytes(i, &mut a_buf).unwrap();
        packed.read_bytes(j, &mut b_buf).unwrap();
        assert_eq!(a_buf, b_buf, "{}", s.key);
        assert_eq!(s.label, packed.sample(j).label);
        assert_eq!(s.info, packed.sample(j).info);
    }
    let png = src.samples().iter().find(|s| s.key == "c/png_named.JPEG").unwrap();
    assert_eq!(png.info.map(|i| (i.format, i.width, i.height)), Some((stoke::codec::ImageFormat::Png, 32, 24)));
    let shard_bytes: Vec<u8> = fs::read_dir(&out).unwrap().flat_map(|e| fs::read(e.unwrap().path()).unwrap()).collect();
    assert!(shard_bytes.windows(15).any(|w| w == b"c/png_named.png"), "the PNG member is named .png");
    // Packing into a folder that already holds shards is refused; a file list packs too.
    let e = fails(stoke(&["pack", p(&root), p(&out)], &[], t.path()));
    assert!(e.contains(p(&out)) && e.contains("already holds .tar files"), "{e}");
    fs::write(root.join("list.txt"), "a/img_0000.jpg 5\nb/img_0001.jpg 2\n").unwrap();
    let out2 = t.path().join("packed2");
    ok(stoke(&["pack", p(&root.join("list.txt")), p(&out2)], &[], t.path()));
    let b = ok(stoke(&["plan", p(&out2), "--positions", "--no-shuffle"], &[], t.path()));
    let got: Vec<(&str, &str)> = b
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1], f[2])
        })
        .collect();
    assert_eq!(got, [("5", "shard-000000/a/img_0000"), ("2", "shard-000000/b/img_0001")]);
}

/// Every bad input from the issue, through each command that reads a dataset.
#[test]
fn bad_inputs_name_the_path_and_the_problem() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let check = |path: &Path, extra: &[&str], want: &[&str]| {
        for cmd in ["index", "plan", "pack"] {
            let out = d.join(format!("out-{cmd}-{}", path.file_name().unwrap().to_string_lossy()));
            let mut args = vec![cmd, p(path)];
            if cmd == "pack" {
                args.push(p(&out));
            }
            args.extend_from_slice(extra);
            let e = fails(stoke(&args, &[], d));
            for w in want {
                assert!(e.contains(w), "stoke {cmd}: {e:?} lacks {w:?}");
            }
        }
    };
    // Missing path.
    let missing = d.join("missing");
    check(&missing, &[], &[p(&missing), "no such file or folder"]);
    // No class folders.
    let flat = d.join("flat");
    write(&flat.join("x.jpg"), &jpeg(2, 2));
    check(&flat, &[], &[p(&flat), "no class folders"]);
    // Empty class folder.
    let ec = d.join("emptyclass");
    folder(&ec, &["a"], &[1]);
    fs::create_dir_all(ec.join("b")).unwrap();
    check(&ec, &[], &[p(&ec.join("b")), "holds no image files"]);
    // Empty dataset: an empty list.
    let el = d.join("empty.txt");
    fs::write(&el, "\n").unwrap();
    check(&el, &[], &[p(&el), "empty dataset"]);
    // Unreadable file (a dangling link).
    let ur = d.join("unreadable");
    folder(&ur, &["a"], &[1]);
    std::os::unix::fs::symlink(d.join("nowhere.jpg"), ur.join("a/gone.jpg")).unwrap();
    check(&ur, &[], &[p(&ur.join("a/gone.jpg")), "cannot read"]);
    // Truncated tar.
    let tt = d.join("trunc.tar");
    let mut b = Vec::new();
    tar_member(&mut b, "a.jpg", &jpeg(3, 3), b'0');
    tar_member(&mut b, "b.jpg", &vec![9u8; 4000], b'0');
    b.truncate(b.len() - 2000);
    fs::write(&tt, &b).unwrap();
    check(&tt, &[], &[p(&tt), "truncated tar", "\"b.jpg\" at byte"]);
    // Duplicate keys (file list).
    let dl = d.join("dup.txt");
    write(&d.join("x.jpg"), &jpeg(2, 2));
    fs::write(&dl, "x.jpg 0\nx.jpg 1\n").unwrap();
    check(&dl, &[], &[p(&dl), "line 2", "duplicate key \"x.jpg\""]);
    // Bad list line.
    let bl = d.join("bad.txt");
    fs::write(&bl, "x.jpg 0\nx.jpg one\n").unwrap();
    check(&bl, &[], &[p(&bl), "line 2", "\"one\" is not an integer"]);
    // Label out of range (declared class count).
    let lr = d.join("range.txt");
    fs::write(&lr, "x.jpg 12\n").unwrap();
    check(&lr, &["--num-classes", "10"], &[p(&lr), "x.jpg", "label 12 is out of range for 10 classes"]);
}
