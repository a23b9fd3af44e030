//! Folder, file-list and tar sources, the saved index, and every bad input's message.

mod dataset_common;

use dataset_common::*;
use std::fs;
use std::path::{Path, PathBuf};
use stoke::source::tar::TarWriter;
use stoke::source::{Dataset, ImageFormat, IndexOptions, Location, SourceKind};

fn opts(cache: &Path) -> IndexOptions {
    IndexOptions { threads: 2, cache_dir: Some(cache.to_path_buf()), ..IndexOptions::default() }
}

fn open_err(path: &Path, cache: &Path) -> String {
    Dataset::open(path, &opts(cache)).unwrap_err().to_string()
}

#[test]
fn folder_labels_keys_and_headers() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    // Classes created out of order; labels follow sorted names.
    folder(&root, &["zebra", "ant", "moth"], &[2, 3, 1]);
    write(&root.join("ant/deeper/x.JPEG"), &jpeg(99, 98));
    write(&root.join("ant/notes.txt"), b"not an image");
    write(&root.join("moth/thumbs.db"), b"junk");
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert_eq!(d.kind(), SourceKind::Folder);
    assert_eq!(d.classes(), ["ant", "moth", "zebra"]);
    assert_eq!(d.ignored(), 2);
    let keys: Vec<&str> = d.samples().iter().map(|s| s.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "ant/img_0000.jpg",
            "ant/img_0001.jpg",
            "ant/img_0002.jpg",
            "ant/deeper/x.JPEG",
            "moth/img_0000.jpg",
            "zebra/img_0000.jpg",
            "zebra/img_0001.jpg"
        ]
    );
    let labels: Vec<i64> = d.samples().iter().map(|s| s.label).collect();
    assert_eq!(labels, [0, 0, 0, 0, 1, 2, 2]);
    // Header facts: `folder()` encodes (class position, i) in the size.
    let s = d.sample(5);
    let info = s.info.unwrap();
    assert_eq!((info.width, info.height), (10, 20)); // "zebra" was created first: width 10 + 0
    assert_eq!(d.sample(4).info.unwrap().width, 12); // "moth" third
    let info = d.sample(3).info.unwrap();
    assert_eq!((info.width, info.height), (99, 98));
    // Bytes and location.
    let mut buf = vec![1, 2, 3];
    d.read_bytes(3, &mut buf).unwrap();
    assert_eq!(buf, fs::read(root.join("ant/deeper/x.JPEG")).unwrap());
    assert_eq!(d.location(3), root.join("ant/deeper/x.JPEG").display().to_string());
    assert_eq!(d.sample(3).len, buf.len() as u64);
}

#[test]
fn index_saved_reused_and_rebuilt_on_change() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b"], &[3, 3]);
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(!d.index_reused());
    assert_eq!(d.index_path(), Some(root.join(".stoke-index").as_path()));
    // The index file itself is not a sample nor counted as ignored.
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(d.index_reused());
    assert_eq!((d.len(), d.ignored()), (6, 0));
    // Replace one file with a different size: rebuilt and the new header is seen.
    write(&root.join("b/img_0001.jpg"), &jpeg(500, 400));
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(!d.index_reused());
    assert_eq!(d.sample(4).info.unwrap().width, 500);
    // Adding a file also rebuilds.
    write(&root.join("b/new.jpg"), &jpeg(7, 7));
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(!d.index_reused());
    assert_eq!(d.len(), 7);
    // A corrupt index file is ignored and rebuilt, never trusted.
    let idx = root.join(".stoke-index");
    let mut b = fs::read(&idx).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0xFF;
    fs::write(&idx, &b).unwrap();
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(!d.index_reused());
    assert_eq!(d.len(), 7);
}

/// FNV-1a 64, the saved index's checksum (over everything before the last 8 bytes).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

#[test]
fn an_index_saved_by_the_jpeg_only_version_is_rebuilt() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[2]);
    Dataset::open(&root, &opts(t.path())).unwrap();
    let idx = root.join(".stoke-index");
    let mut b = fs::read(&idx).unwrap();
    let body = b.len() - 8;
    // The file untouched but for a valid checksum is reused: the test's checksum is right.
    let sum = fnv1a(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    fs::write(&idx, &b).unwrap();
    assert!(Dataset::open(&root, &opts(t.path())).unwrap().index_reused());
    // Version 1 (JPEG facts only) after the magic: rebuilt.
    assert_eq!(&b[8..12], &2u32.to_le_bytes());
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    let sum = fnv1a(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    fs::write(&idx, &b).unwrap();
    assert!(!Dataset::open(&root, &opts(t.path())).unwrap().index_reused());
}

#[test]
fn png_samples_are_indexed_by_sniffing_and_their_facts_saved() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[1]);
    // A PNG under a .JPEG name (as in ImageNet's train set) and one under .png.
    write(&root.join("a/n02105855_2933.JPEG"), include_bytes!("golden/png/rgba8.png"));
    write(&root.join("a/gray.png"), include_bytes!("golden/png/gray16.png"));
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert_eq!((d.len(), d.ignored()), (3, 0));
    let by_key = |d: &Dataset, k: &str| d.samples().iter().find(|s| s.key == k).unwrap().clone();
    let i = by_key(&d, "a/n02105855_2933.JPEG").info.unwrap();
    assert_eq!((i.format, i.width, i.height, i.components, i.orientation, i.jpeg), (ImageFormat::Png, 32, 24, 4, 1, None));
    assert_eq!(by_key(&d, "a/gray.png").info.map(|i| (i.format, i.components)), Some((ImageFormat::Png, 1)));
    let d2 = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(d2.index_reused());
    for s in d.samples() {
        assert_eq!(by_key(&d2, &s.key).info, s.info, "{}", s.key);
    }
}

#[test]
fn index_falls_back_to_the_cache_folder() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("data");
    write(&dir.join("a.jpg"), &jpeg(5, 6));
    fs::write(dir.join("list.txt"), "a.jpg 0\n").unwrap();
    // Make the beside-the-dataset location unwritable: a folder sits where the file would go.
    fs::create_dir_all(dir.join("list.txt.stoke-index")).unwrap();
    let cache = t.path().join("cache");
    let o = opts(&cache);
    let d = Dataset::open(&dir.join("list.txt"), &o).unwrap();
    let p = d.index_path().unwrap().to_path_buf();
    assert!(p.starts_with(&cache), "{}", p.display());
    let d = Dataset::open(&dir.join("list.txt"), &o).unwrap();
    assert!(d.index_reused());
    assert_eq!(d.index_path(), Some(p.as_path()));
}

#[test]
fn headers_past_the_prefix_and_non_jpegs() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    let mut big = Jpeg::new(321, 123);
    big.padding = 200_000; // header longer than the 8 KiB first read
    write(&root.join("c/big.jpg"), &big.bytes());
    let mut huge = Jpeg::new(322, 124);
    huge.padding = 300_000; // and longer than the 256 KiB second read
    write(&root.join("c/huge.jpg"), &huge.bytes());
    let mut dnl = Jpeg::new(64, 77);
    dnl.dnl = Some(77);
    dnl.scan = 100_000;
    write(&root.join("c/dnl.jpg"), &dnl.bytes());
    write(&root.join("c/png.jpg"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    write(&root.join("c/empty.jpg"), b"");
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    let by_key = |k: &str| d.samples().iter().find(|s| s.key == k).unwrap();
    assert_eq!(by_key("c/big.jpg").info.map(|i| (i.width, i.height)), Some((321, 123)));
    assert_eq!(by_key("c/huge.jpg").info.map(|i| (i.width, i.height)), Some((322, 124)));
    let i = by_key("c/dnl.jpg").info.unwrap();
    assert_eq!((i.height, i.jpeg.unwrap().dnl), (77, true));
    let png = by_key("c/png.jpg");
    // A PNG cut inside its IHDR: the format is sniffed, the header is refused.
    assert!(png.info.is_none());
    assert!(png.header_error.as_deref().unwrap().contains("png IHDR"), "{:?}", png.header_error);
    assert!(by_key("c/empty.jpg").header_error.as_deref().unwrap().contains("empty"));
    // Reloaded from the saved index: the same facts.
    let d2 = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(d2.index_reused());
    for (a, b) in d.samples().iter().zip(d2.samples()) {
        assert_eq!(
            (&a.key, a.label, a.len, a.location, a.info, &a.header_error),
            (&b.key, b.label, b.len, b.location, b.info, &b.header_error)
        );
    }
}

#[test]
fn file_list() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    write(&dir.join("imgs/a b.jpg"), &jpeg(11, 12));
    write(&dir.join("imgs/c.jpeg"), &jpeg(13, 14));
    fs::write(dir.join("train.txt"), "# comment\n\nimgs/c.jpeg 4\nimgs/a b.jpg\t1\n").unwrap();
    let d = Dataset::open(&dir.join("train.txt"), &opts(t.path())).unwrap();
    assert_eq!(d.kind(), SourceKind::List);
    let got: Vec<(&str, i64)> = d.samples().iter().map(|s| (s.key.as_str(), s.label)).collect();
    assert_eq!(got, [("imgs/c.jpeg", 4), ("imgs/a b.jpg", 1)]);
    assert_eq!(d.classes().len(), 5);
    let mut buf = Vec::new();
    d.read_bytes(1, &mut buf).unwrap();
    assert_eq!(buf, jpeg(11, 12));
}

#[test]
fn file_list_errors_name_the_line() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("l");
    write(&dir.join("a.jpg"), &jpeg(1, 1));
    let case = |name: &str, text: &str| {
        let p = dir.join(name);
        fs::write(&p, text).unwrap();
        let e = open_err(&p, t.path());
        assert!(e.contains(&p.display().to_string()), "{e}");
        e
    };
    let e = case("bad.txt", "a.jpg 0\na.jpg\n");
    assert!(e.contains("line 2") && e.contains("no label"), "{e}");
    let e = case("nonint.txt", "a.jpg zero\n");
    assert!(e.contains("line 1") && e.contains("\"zero\" is not an integer"), "{e}");
    let e = case("neg.txt", "a.jpg -2\n");
    assert!(e.contains("line 1") && e.contains("label -2 is out of range"), "{e}");
    let e = case("dup.txt", "a.jpg 0\n\na.jpg 1\n");
    assert!(e.contains("line 3") && e.contains("duplicate key \"a.jpg\"") && e.contains("line 1"), "{e}");
    let e = case("missing.txt", "a.jpg 0\nnope.jpg 1\n");
    assert!(e.contains("line 2") && e.contains("nope.jpg"), "{e}");
    let e = case("empty.txt", "# nothing\n\n");
    assert!(e.contains("empty dataset"), "{e}");
    let e = case("escape.txt", "../x.jpg 0\n");
    assert!(e.contains("line 1") && e.contains("relative"), "{e}");
    // Out of range for a declared class count.
    let p = dir.join("ok.txt");
    fs::write(&p, "a.jpg 7\n").unwrap();
    let o = IndexOptions { num_classes: Some(5), ..opts(t.path()) };
    let e = Dataset::open(&p, &o).unwrap_err().to_string();
    assert!(e.contains("a.jpg") && e.contains("label 7 is out of range for 5 classes"), "{e}");
}

#[test]
fn folder_errors() {
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("nope");
    let e = open_err(&missing, t.path());
    assert!(e.contains(&missing.display().to_string()) && e.contains("no such file or folder"), "{e}");

    let flat = t.path().join("flat");
    write(&flat.join("a.jpg"), &jpeg(1, 1));
    let e = open_err(&flat, t.path());
    assert!(e.contains(&flat.display().to_string()) && e.contains("no class folders"), "{e}");

    let empty_class = t.path().join("ec");
    folder(&empty_class, &["a"], &[2]);
    write(&empty_class.join("b/readme.txt"), b"x");
    let e = open_err(&empty_class, t.path());
    assert!(e.contains(&empty_class.join("b").display().to_string()) && e.contains("holds no image files"), "{e}");

    // Unreadable: a dangling symlink (root can read anything, so permissions would not do).
    let unreadable = t.path().join("ur");
    folder(&unreadable, &["a"], &[1]);
    std::os::unix::fs::symlink(t.path().join("gone.jpg"), unreadable.join("a/link.jpg")).unwrap();
    let e = open_err(&unreadable, t.path());
    assert!(e.contains(&unreadable.join("a/link.jpg").display().to_string()) && e.contains("cannot read"), "{e}");
}

/// Shards written with the crate's writer: `{key}.jpg` + `{key}.cls`.
fn write_shard(path: &Path, samples: &[(&str, Vec<u8>, Option<i64>)]) {
    let f = fs::File::create(path).unwrap();
    let mut w = TarWriter::new(std::io::BufWriter::new(f));
    for (key, data, label) in samples {
        w.append(&format!("{key}.jpg"), data).unwrap();
        if let Some(l) = label {
            w.append(&format!("{key}.cls"), l.to_string().as_bytes()).unwrap();
        }
    }
    w.finish().unwrap();
}

#[test]
fn tar_shards_pattern_folder_and_reads() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("shards");
    fs::create_dir_all(&dir).unwrap();
    let long = format!("{}/deep_name", "d".repeat(120));
    write_shard(&dir.join("train-0000.tar"), &[("a", jpeg(10, 11), Some(3)), (&long, jpeg(12, 13), Some(0))]);
    write_shard(&dir.join("train-0001.tar"), &[("n01/b", jpeg(14, 15), Some(1))]);
    write_shard(&dir.join("train-0002.tar"), &[("c", jpeg(16, 17), Some(2))]);
    let pat = dir.join("train-{0000..0001}.tar");
    let d = Dataset::open(&pat, &opts(t.path())).unwrap();
    assert_eq!(d.kind(), SourceKind::Tar);
    let got: Vec<(String, i64, u32)> = d.samples().iter().map(|s| (s.key.clone(), s.label, s.info.unwrap().width)).collect();
    assert_eq!(got, [("train-0000/a".to_string(), 3, 10), (format!("train-0000/{long}"), 0, 12), ("train-0001/n01/b".to_string(), 1, 14)]);
    let mut buf = Vec::new();
    for (i, want) in [jpeg(10, 11), jpeg(12, 13), jpeg(14, 15)].iter().enumerate() {
        d.read_bytes(i, &mut buf).unwrap();
        assert_eq!(&buf, want);
    }
    // The first member's data starts after one 512-byte header.
    assert_eq!(d.sample(0).location, Location::Tar { shard: 0, offset: 512 });
    assert_eq!(d.location(0), format!("{} at byte 512", dir.join("train-0000.tar").display()));
    // Folder of tars: all three, in name order; the pattern's index does not count as a shard.
    let d = Dataset::open(&dir, &opts(t.path())).unwrap();
    assert_eq!(d.len(), 4);
    assert_eq!(d.shards().len(), 3);
    assert_eq!(d.sample(3).key, "train-0002/c");
    assert!(Dataset::open(&dir, &opts(t.path())).unwrap().index_reused());
    // A single .tar.
    let d = Dataset::open(&dir.join("train-0002.tar"), &opts(t.path())).unwrap();
    assert_eq!(d.len(), 1);
}

#[test]
fn tar_pax_and_gnu_headers_written_by_hand() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("raw.tar");
    let mut b = Vec::new();
    let pax_name = format!("{}/pax_key.jpg", "p".repeat(150));
    tar_member(&mut b, "PaxHeaders/x", pax_record("path", &pax_name).as_bytes(), b'x');
    tar_member(&mut b, "truncated-name-ignored.jpg", &jpeg(21, 22), b'0');
    tar_member(&mut b, "dir/", b"", b'5');
    let gnu_name = format!("{}/gnu_key.jpeg", "g".repeat(140));
    let mut long = gnu_name.clone().into_bytes();
    long.push(0);
    tar_member(&mut b, "././@LongLink", &long, b'L');
    tar_member(&mut b, "short", &jpeg(23, 24), b'0');
    tar_member(&mut b, "./dotted/x.jpg", &jpeg(25, 26), b'0');
    tar_member(&mut b, "readme.txt", b"hello", b'0');
    tar_member(&mut b, "orphan.cls", b"1", b'0');
    b.extend_from_slice(&[0u8; 1024]);
    fs::write(&p, &b).unwrap();
    let d = Dataset::open(&p, &opts(t.path())).unwrap();
    let keys: Vec<&str> = d.samples().iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, [format!("raw/{}/pax_key", "p".repeat(150)), format!("raw/{}/gnu_key", "g".repeat(140)), "raw/dotted/x".into()]);
    assert_eq!(d.sample(1).info.unwrap().width, 23);
    assert_eq!(d.ignored(), 2);
    assert!(d.samples().iter().all(|s| s.label == -1));
}

#[test]
fn tar_errors_name_the_shard_and_offset() {
    let t = tempfile::tempdir().unwrap();
    let make = |name: &str, f: &dyn Fn(&mut Vec<u8>)| -> (PathBuf, String) {
        let p = t.path().join(name);
        let mut b = Vec::new();
        f(&mut b);
        fs::write(&p, &b).unwrap();
        let e = open_err(&p, t.path());
        assert!(e.contains(&p.display().to_string()), "{e}");
        (p, e)
    };
    // Truncated inside a member's data.
    let (_, e) = make("trunc.tar", &|b| {
        tar_member(b, "a.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "b.jpg", &vec![7u8; 3000], b'0');
        let cut = b.len() - 1500;
        b.truncate(cut);
    });
    let first_len = jpeg(5, 5).len().div_ceil(512) * 512 + 512;
    assert!(e.contains("truncated tar") && e.contains(&format!("\"b.jpg\" at byte {first_len}")), "{e}");
    // Truncated inside a header.
    let (_, e) = make("trunc_hdr.tar", &|b| {
        tar_member(b, "a.jpg", &jpeg(5, 5), b'0');
        b.extend_from_slice(&[1u8; 100]);
    });
    assert!(e.contains("truncated tar") && e.contains(&format!("header at byte {}", first_len)), "{e}");
    // Not a tar at all.
    let (_, e) = make("junk.tar", &|b| b.extend_from_slice(&[b'x'; 2048]));
    assert!(e.contains("bad header checksum at byte 0"), "{e}");
    // Duplicate keys.
    let (_, e) = make("dup.tar", &|b| {
        tar_member(b, "k.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "k.jpeg", &jpeg(5, 5), b'0');
    });
    assert!(e.contains("duplicate keys") && e.contains("\"k\"") && e.contains("at byte 512"), "{e}");
    // Label not an integer / out of range.
    let (_, e) = make("lbl.tar", &|b| {
        tar_member(b, "k.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "k.cls", b"cat", b'0');
    });
    assert!(e.contains("k.cls at byte") && e.contains("\"cat\" is not an integer"), "{e}");
    let (_, e) = make("neg.tar", &|b| {
        tar_member(b, "k.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "k.cls", b"-4", b'0');
    });
    assert!(e.contains("label -4 is out of range"), "{e}");
    // Some labelled, some not (a complete shard: end-of-archive blocks written).
    let (_, e) = make("mixed.tar", &|b| {
        tar_member(b, "k.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "k.cls", b"1", b'0');
        tar_member(b, "m.jpg", &jpeg(5, 5), b'0');
        b.extend_from_slice(&[0u8; 1024]);
    });
    assert!(e.contains("mixed/m has no .cls label"), "{e}");
    // Cut at a member boundary (no end-of-archive blocks) between a sample's .cls and its
    // image: the sample would be lost without a word; it is named instead.
    let (_, e) = make("cut_cls.tar", &|b| {
        tar_member(b, "a.cls", b"0", b'0');
        tar_member(b, "a.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "b.cls", b"1", b'0');
    });
    let end = 5 * 512 + jpeg(5, 5).len().div_ceil(512) * 512;
    assert!(e.contains("truncated tar") && e.contains(&format!("ends at byte {end}")), "{e}");
    assert!(e.contains("\"b.cls\"") && e.contains("sample b lacks its image"), "{e}");
    // ... and between an image and its .cls: the label would be missing.
    let (_, e) = make("cut_jpg.tar", &|b| {
        tar_member(b, "a.jpg", &jpeg(5, 5), b'0');
        tar_member(b, "a.cls", b"0", b'0');
        tar_member(b, "b.jpg", &jpeg(5, 5), b'0');
    });
    assert!(e.contains("truncated tar") && e.contains("sample b lacks its .cls label"), "{e}");
    // No JPEG members: empty dataset.
    let (_, e) = make("empty.tar", &|b| tar_member(b, "x.txt", b"hi", b'0'));
    assert!(e.contains("empty dataset"), "{e}");
    // A brace pattern naming a shard that is missing.
    let e = open_err(&t.path().join("dup{,x}.tar"), t.path());
    assert!(e.contains("dupx.tar") && e.contains("does not exist"), "{e}");
    // Label out of range for a declared class count, named by key.
    let p = t.path().join("range.tar");
    let mut b = Vec::new();
    tar_member(&mut b, "k.jpg", &jpeg(5, 5), b'0');
    tar_member(&mut b, "k.cls", b"1000", b'0');
    fs::write(&p, &b).unwrap();
    let o = IndexOptions { num_classes: Some(1000), ..opts(t.path()) };
    let e = Dataset::open(&p, &o).unwrap_err().to_string();
    assert!(e.contains("range/k") && e.contains("label 1000 is out of range for 1000 classes"), "{e}");
}

#[test]
fn a_complete_shard_may_end_without_end_of_archive_blocks_or_hold_a_stray_label() {
    let t = tempfile::tempdir().unwrap();
    // Every sample whole, no end-of-archive blocks: accepted, as GNU tar and Python do.
    let p = t.path().join("noend.tar");
    let mut b = Vec::new();
    for k in ["a", "b"] {
        tar_member(&mut b, &format!("{k}.jpg"), &jpeg(5, 5), b'0');
        tar_member(&mut b, &format!("{k}.cls"), b"1", b'0');
    }
    fs::write(&p, &b).unwrap();
    let d = Dataset::open(&p, &opts(t.path())).unwrap();
    assert_eq!((d.len(), d.ignored()), (2, 0));
    // A .cls without an image inside a shard that ends properly is a stray member, counted
    // as ignored (not a cut: the end-of-archive blocks are there).
    let p = t.path().join("stray.tar");
    let mut b = Vec::new();
    tar_member(&mut b, "a.jpg", &jpeg(5, 5), b'0');
    tar_member(&mut b, "a.cls", b"0", b'0');
    tar_member(&mut b, "z.cls", b"1", b'0');
    b.extend_from_slice(&[0u8; 1024]);
    fs::write(&p, &b).unwrap();
    let d = Dataset::open(&p, &opts(t.path())).unwrap();
    assert_eq!((d.len(), d.ignored()), (1, 1));
}

#[test]
fn a_file_that_disappears_is_named_by_key() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[2]);
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    fs::remove_file(root.join("a/img_0001.jpg")).unwrap();
    let e = d.read_bytes(1, &mut Vec::new()).unwrap_err().to_string();
    assert!(e.contains("sample a/img_0001.jpg") && e.contains("cannot open"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Shards written with random member names and sizes list back exactly; any truncation is
    /// an error naming the shard (or, cut at a member boundary, a shorter listing), never a panic.
    #[test]
    fn tar_round_trip_and_truncation(
        members in proptest::collection::vec(("[a-z]{1,8}(/[a-z]{1,90}){0,2}", 0usize..3000), 1..6),
        cut in proptest::prelude::any::<proptest::sample::Index>(),
    ) {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("r.tar");
        let mut w = TarWriter::new(Vec::new());
        let mut want = Vec::new();
        for (i, (name, size)) in members.iter().enumerate() {
            let key = format!("{name}{i}");
            let data: Vec<u8> = (0..*size).map(|b| (b * 7 + i) as u8).collect();
            w.append(&format!("{key}.jpg"), &data).unwrap();
            want.push((format!("r/{key}"), data));
        }
        let bytes = w.finish().unwrap();
        fs::write(&p, &bytes).unwrap();
        let d = Dataset::open(&p, &IndexOptions { save: false, ..opts(t.path()) }).unwrap();
        proptest::prop_assert_eq!(d.len(), want.len());
        let mut buf = Vec::new();
        for (i, (key, data)) in want.iter().enumerate() {
            proptest::prop_assert_eq!(&d.sample(i).key, key);
            d.read_bytes(i, &mut buf).unwrap();
            proptest::prop_assert_eq!(&buf, data);
        }
        let n = cut.index(bytes.len());
        fs::write(&p, &bytes[..n]).unwrap();
        match Dataset::open(&p, &IndexOptions { save: false, ..opts(t.path()) }) {
            Ok(d) => proptest::prop_assert!(n % 512 == 0 && d.len() < want.len() || n >= bytes.len() - 1024),
            Err(e) => {
                let e = e.to_string();
                proptest::prop_assert!(e.contains(&p.display().to_string()), "{}", e);
                proptest::prop_assert!(e.contains("truncated tar") || e.contains("empty dataset"), "{}", e);
            }
        }
    }
}

#[test]
fn ranks_opening_together_build_the_index_once() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b"], &[40, 40]);
    let results: Vec<(bool, usize)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let d = Dataset::open(&root, &opts(t.path())).unwrap();
                    (d.index_reused(), d.len())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(results.iter().all(|r| r.1 == 80));
    // Exactly one built; the others waited for its lock and loaded its index.
    assert_eq!(results.iter().filter(|r| !r.0).count(), 1, "{results:?}");
    assert!(!root.join(".stoke-index.lock").exists());
}

#[test]
fn index_locks_stale_and_released() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[3]);
    // A lock left by a process that died long ago is taken over.
    let lock = root.join(".stoke-index.lock");
    fs::write(&lock, "12345\n").unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options().write(true).open(&lock).unwrap().set_modified(old).unwrap();
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert_eq!((d.len(), d.index_reused()), (3, false));
    assert!(!lock.exists());
    // A live lock: open waits until its holder lets go, then proceeds.
    fs::remove_file(root.join(".stoke-index")).unwrap();
    fs::write(&lock, "1\n").unwrap();
    let l2 = lock.clone();
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r2 = released.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(800));
        r2.store(true, std::sync::atomic::Ordering::SeqCst);
        fs::remove_file(l2).unwrap();
    });
    let d = Dataset::open(&root, &opts(t.path())).unwrap();
    assert!(released.load(std::sync::atomic::Ordering::SeqCst), "open returned while the lock was held");
    assert_eq!(d.len(), 3);
    releaser.join().unwrap();
}
