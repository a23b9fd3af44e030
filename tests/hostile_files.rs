//! Hostile files: symlink loops and links out of a folder data set; tar members that name
//! `../x` or `/x`, hard links and device files; counts of 2^31 and 2^63 in a saved index, in
//! shard facts and in a resume state, and negative numbers in one; a full disk while the
//! index is written. Each gives a named error (or, for files stoke derived itself, a rebuild)
//! and never a hang, a panic or an allocation of the size a file claims. Anything that could
//! hang runs on a thread with a time limit.

mod dataset_common;

use dataset_common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use stoke::config::{AugmentSpec, BackendKind, PipelineConfig, StreamSpec};
use stoke::pipeline::Pipeline;
use stoke::source::shards::{sidecar_json, ShardSet, SIDECAR};
use stoke::source::tar::TarWriter;
use stoke::source::{Dataset, IndexOptions, IndexOrigin};
use stoke::ResumeState;

fn opts(cache: &Path) -> IndexOptions {
    IndexOptions { threads: 2, cache_dir: Some(cache.to_path_buf()), ..IndexOptions::default() }
}

/// `f`'s result, or a failure naming `what` when it takes longer than `secs` (a hang).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer within {secs} s (a hang)"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
    }
}

fn open(path: &Path, cache: &Path) -> stoke::Result<Dataset> {
    let (path, cache) = (path.to_path_buf(), cache.to_path_buf());
    within(20, "Dataset::open", move || Dataset::open(&path, &opts(&cache)))
}

#[test]
fn a_symlink_loop_in_a_folder_data_set_is_an_error_naming_the_link_not_a_hang() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b"], &[2, 2]);
    // Two links to the class folder: without loop detection the walk doubles at every level.
    std::os::unix::fs::symlink("..", root.join("a/up")).unwrap();
    std::os::unix::fs::symlink("../a", root.join("a/again")).unwrap();
    let e = open(&root, t.path()).unwrap_err().to_string();
    assert!(e.contains("symlink loop") && e.contains("a/again"), "{e}");
    // A link to the data set's root from deep inside is a loop too.
    let root2 = t.path().join("ds2");
    folder(&root2, &["a"], &[1]);
    fs::create_dir_all(root2.join("a/x/y")).unwrap();
    std::os::unix::fs::symlink(&root2, root2.join("a/x/y/home")).unwrap();
    let e = open(&root2, t.path()).unwrap_err().to_string();
    assert!(e.contains("symlink loop") && e.contains("a/x/y/home"), "{e}");
}

#[test]
fn a_symlink_out_of_the_tree_is_followed_and_keyed_by_its_path_inside() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[1]);
    let shared = t.path().join("shared/birds");
    write(&shared.join("one.jpg"), &jpeg(33, 22));
    write(&t.path().join("outside.jpg"), &jpeg(44, 11));
    std::os::unix::fs::symlink(&shared, root.join("b")).unwrap();
    std::os::unix::fs::symlink(t.path().join("outside.jpg"), root.join("a/linked.jpg")).unwrap();
    let d = open(&root, t.path()).unwrap();
    let keys: Vec<&str> = d.samples().iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys, ["a/img_0000.jpg", "a/linked.jpg", "b/one.jpg"]);
    assert_eq!(d.classes(), ["a", "b"]);
    assert_eq!(d.sample(1).info.as_ref().unwrap().width, 44);
}

/// A shard of a regular JPEG member followed by `extra` (name, kind, data).
fn shard_with(path: &Path, extra: &[(&str, u8, &[u8])]) {
    let mut t = Vec::new();
    tar_member(&mut t, "good.jpg", &jpeg(8, 8), b'0');
    for &(name, kind, data) in extra {
        tar_member(&mut t, name, data, kind);
    }
    t.extend_from_slice(&[0u8; 1024]);
    write(path, &t);
}

#[test]
fn tar_members_that_climb_out_or_are_absolute_are_refused_by_name() {
    let t = tempfile::tempdir().unwrap();
    for (i, name) in ["../x.jpg", "/x.jpg", "a/../../x.jpg", "/etc/passwd"].iter().enumerate() {
        let p = t.path().join(format!("s{i}.tar"));
        shard_with(&p, &[(name, b'0', &jpeg(8, 8))]);
        let e = open(&p, t.path()).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{name:?}")) && e.contains(&format!("s{i}.tar")) && e.contains("absolute path or one with `..`"),
            "{e}"
        );
    }
}

#[test]
fn tar_links_and_special_files_named_as_samples_are_refused_by_name_others_skipped() {
    let t = tempfile::tempdir().unwrap();
    for (kind, what) in
        [(b'1', "a hard link"), (b'2', "a symbolic link"), (b'3', "a character device"), (b'4', "a block device"), (b'6', "a FIFO")]
    {
        for name in ["linked.jpg", "linked.cls"] {
            let p = t.path().join(format!("k{}.tar", kind as char));
            shard_with(&p, &[(name, kind, b"")]);
            let _ = fs::remove_file(t.path().join(format!(".k{}.tar.stoke-index", kind as char)));
            let e = open(&p, t.path()).unwrap_err().to_string();
            assert!(e.contains(&format!("{name:?}")) && e.contains(what) && e.contains("not a regular file"), "{e}");
        }
    }
    // A link that is not a sample (a README beside the images) is no sample: skipped.
    let p = t.path().join("other.tar");
    shard_with(&p, &[("README", b'1', b""), ("dev/null", b'3', b"")]);
    let d = open(&p, t.path()).unwrap();
    assert_eq!(d.len(), 1);
}

// ---- the saved index --------------------------------------------------------------------

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Byte offsets in a saved index: (the sample count, the first sample's label, len, location
/// tag). Follows the private format of `src/source/index.rs`.
fn index_layout(b: &[u8]) -> (usize, usize, usize, usize) {
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
    let mut at = 8 + 4 + 8 + 1;
    let nc = u32_at(at);
    at += 4;
    for _ in 0..nc {
        at += 4 + u32_at(at);
    }
    at += 8;
    let ns = u32_at(at);
    at += 4;
    for _ in 0..ns {
        at += 4 + u32_at(at);
    }
    let count = at;
    at += 8;
    at += 4 + u32_at(at); // first key
    (count, at, at + 8, at + 16)
}

/// Overwrite 8 or 4 bytes at `at` with `v` and fix the checksum, as a careful forger would.
fn forge(index: &Path, at: usize, v: &[u8]) {
    let mut b = fs::read(index).unwrap();
    b[at..at + v.len()].copy_from_slice(v);
    let n = b.len() - 8;
    let sum = fnv(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
    fs::write(index, b).unwrap();
}

#[test]
fn huge_counts_in_a_saved_index_rebuild_it_without_allocating_or_panicking() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a", "b"], &[2, 1]);
    let d = open(&root, t.path()).unwrap();
    let index = d.index_path().unwrap().to_path_buf();
    let (count, label, len, _) = index_layout(&fs::read(&index).unwrap());
    for (at, v) in [(count, 1u64 << 31), (count, 1u64 << 63), (count, u64::MAX), (label, 1 << 31), (label, u64::MAX - 5)] {
        open(&root, t.path()).unwrap(); // a good index again
        forge(&index, at, &v.to_le_bytes());
        let d = open(&root, t.path()).unwrap();
        assert_eq!((d.len(), d.index_origin()), (3, IndexOrigin::Built), "field at byte {at} = {v}: rebuilt");
    }
    // A sample's length of 2^63 in an otherwise good index: the file is read for what it holds.
    open(&root, t.path()).unwrap();
    forge(&index, len, &(1u64 << 63).to_le_bytes());
    let d = open(&root, t.path()).unwrap();
    let mut buf = Vec::new();
    let got = within(10, "read_bytes", move || d.read_bytes(0, &mut buf).map(|_| buf.len()));
    assert_eq!(got.unwrap() as u64, fs::metadata(root.join("a/img_0000.jpg")).unwrap().len());
}

#[test]
fn a_tar_index_naming_a_shard_or_a_byte_range_that_cannot_be_is_rebuilt() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("one.tar");
    let mut w = TarWriter::new(fs::File::create(&p).unwrap());
    w.append("x.jpg", &jpeg(8, 8)).unwrap();
    w.append("y.jpg", &jpeg(9, 9)).unwrap();
    w.finish().unwrap();
    let d = open(&p, t.path()).unwrap();
    let index = d.index_path().unwrap().to_path_buf();
    let (_, _, len, loc) = index_layout(&fs::read(&index).unwrap());
    for (at, v) in
        [(loc + 1, 7u32.to_le_bytes().to_vec()), (len, u64::MAX.to_le_bytes().to_vec()), (loc + 5, u64::MAX.to_le_bytes().to_vec())]
    {
        open(&p, t.path()).unwrap();
        forge(&index, at, &v);
        let d = std::sync::Arc::new(open(&p, t.path()).unwrap());
        let d2 = d.clone();
        let mut buf = Vec::new();
        let n = within(10, "read_bytes", move || d2.read_bytes(0, &mut buf).map(|_| buf.len()));
        assert_eq!(n.unwrap(), jpeg(8, 8).len(), "field at byte {at}");
        assert_eq!(d.index_origin(), IndexOrigin::Built, "field at byte {at}: rebuilt");
    }
}

/// A tmpfs of `size` (e.g. "512k") mounted on `mnt` (created) for a disk-full case, unmounted
/// when the guard drops; None (the test says it skips) where mounting is not allowed.
fn small_disk(mnt: &Path, size: &str) -> Option<Unmount> {
    fs::create_dir_all(mnt).unwrap();
    let ok = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(mnt).status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("skipped: cannot mount a small tmpfs here (needs root); the disk-full case is not tested");
        return None;
    }
    Some(Unmount(mnt.to_path_buf()))
}

struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_while_the_index_is_written_leaves_no_file_and_the_next_open_builds_it() {
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("small");
    let Some(_disk) = small_disk(&mnt, "1m") else { return };
    let root = mnt.join("ds");
    let cache = mnt.join("cache");
    // Long names make an index of tens of KiB: it cannot fit in the space left below.
    for i in 0..120 {
        write(&root.join(format!("a/{i:03}-{}.jpg", "n".repeat(150))), &jpeg(8, 8));
    }
    // Fill the disk, then free 8 KiB: the index's write starts and fails half way.
    let filler = mnt.join("filler");
    {
        use std::io::Write;
        let mut f = fs::File::create(&filler).unwrap();
        while f.write_all(&[7u8; 4096]).is_ok() {}
    }
    let size = fs::metadata(&filler).unwrap().len();
    fs::OpenOptions::new().write(true).open(&filler).unwrap().set_len(size - 8192).unwrap();
    let d = open(&root, &cache).unwrap();
    assert_eq!((d.len(), d.index_path()), (120, None), "nowhere to save it");
    let left: Vec<String> = fs::read_dir(&root).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, ["a"], "no index, whole or partial, and no temp file beside the data set");
    let cached = fs::read_dir(&cache).map(|r| r.count()).unwrap_or(0);
    assert_eq!(cached, 0, "nothing in the cache folder either");
    fs::remove_file(&filler).unwrap();
    let d = open(&root, &cache).unwrap();
    assert_eq!((d.len(), d.index_origin()), (120, IndexOrigin::Built));
    assert_eq!(d.index_path(), Some(root.join(".stoke-index").as_path()));
    assert_eq!(open(&root, &cache).unwrap().index_origin(), IndexOrigin::Saved);
}

#[test]
fn stoke_pack_on_a_disk_that_fills_leaves_only_whole_files_under_their_names() {
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("small");
    let Some(_disk) = small_disk(&mnt, "512k") else { return };
    // Noise JPEGs of ~20 KiB each, 60 of them: more than the 512 KiB disk holds.
    let src = t.path().join("src");
    for i in 0..60 {
        let rgb: Vec<u8> = (0..96 * 96 * 3).map(|k| ((k * 7919 + i * 104729) % 251) as u8).collect();
        let mut b = Vec::new();
        jpeg_encoder::Encoder::new(&mut b, 95).encode(&rgb, 96, 96, jpeg_encoder::ColorType::Rgb).unwrap();
        write(&src.join(format!("c{}/{i:02}.jpg", i % 2)), &b);
    }
    let out = mnt.join("shards");
    let r = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
        .args(["pack", "--shard-size", "128KiB"])
        .arg(&src)
        .arg(&out)
        .env("XDG_CACHE_HOME", t.path().join("cache"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "pack fitted in 512 KiB? {err}");
    assert!(err.contains(&out.to_string_lossy().to_string()), "the error names the file: {err}");
    let names: Vec<String> = fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains("partial")), "a partial file was left: {names:?}");
    // Every shard under its name is whole: its members all read.
    for n in names.iter().filter(|n| n.ends_with(".tar")) {
        let d = Dataset::open(&out.join(n), &IndexOptions { cache_dir: Some(t.path().join("idx")), ..IndexOptions::default() });
        let d = d.unwrap_or_else(|e| panic!("{n} is not a whole shard: {e}"));
        assert!(!d.is_empty(), "{n}");
    }
}

#[cfg(feature = "remote")]
#[test]
fn a_node_cache_on_a_disk_that_fills_serves_the_object_and_leaves_no_partial_entry() {
    use stoke::source::cache::ObjectCache;
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("small");
    let Some(_disk) = small_disk(&mnt, "256k") else { return };
    // A limit far above the disk: the write fails half way, not the eviction.
    let c = ObjectCache::open(&mnt.join("cache"), 1 << 30).unwrap();
    let big = vec![9u8; 400 << 10];
    let got = c.get("s3://b/big.tar", "v1", big.len() as u64, || Ok((big.clone().into(), "v1".into()))).unwrap();
    assert_eq!(got.len(), big.len(), "served from the store all the same");
    let names: Vec<String> =
        fs::read_dir(mnt.join("cache")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.ends_with(".obj") && !n.contains(".tmp.")), "a partial entry was left: {names:?}");
    // It stepped aside: the next read goes to the store again, and still works.
    let mut fetched = false;
    c.get("s3://b/small.tar", "v1", 10, || {
        fetched = true;
        Ok((vec![1u8; 10].into(), "v1".into()))
    })
    .unwrap();
    assert!(fetched);
}

// ---- shard facts ------------------------------------------------------------------------

#[test]
fn shard_facts_claiming_2_to_the_31_or_63_samples_are_not_believed() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("shards");
    fs::create_dir_all(&dir).unwrap();
    let mut w = TarWriter::new(fs::File::create(dir.join("s-0.tar")).unwrap());
    for k in 0..3 {
        w.append(&format!("k{k}.jpg"), &jpeg(8, 8)).unwrap();
    }
    w.finish().unwrap();
    let set = ShardSet::open(&dir, 1).unwrap();
    assert!(!set.from_sidecar);
    for huge in [1u64 << 31, 1 << 63, u64::MAX] {
        let mut facts = set.facts.clone();
        facts[0].samples = huge;
        fs::write(dir.join(SIDECAR), sidecar_json(&facts)).unwrap();
        let d = dir.clone();
        let got = within(10, "ShardSet::open", move || ShardSet::open(&d, 1).unwrap());
        assert_eq!((got.total(), got.from_sidecar), (3, false), "a sidecar claiming {huge} samples is ignored");
        // And an epoch over it in stream mode is the 3 samples, not 2^63 of them.
        let mut c = PipelineConfig::new(dir.join("s-{0..0}.tar"));
        c.augment = AugmentSpec::train(8);
        (c.batch_size, c.backend, c.cpu_threads, c.reader_threads) = (2, BackendKind::Cpu, 1, 1);
        c.stream = Some(StreamSpec { group: 1, read_ahead_bytes: 1 << 20, ..Default::default() });
        let steps = within(20, "a stream epoch", move || {
            let mut p = Pipeline::new(c).unwrap();
            p.start_epoch(0, 0);
            let mut n = 0;
            while let Some(b) = p.next_batch() {
                n += b.unwrap().positions.len();
            }
            n
        });
        assert_eq!(steps, 3);
    }
}

// ---- resume states ----------------------------------------------------------------------

fn small_pipeline(root: &Path) -> Pipeline {
    let mut c = PipelineConfig::new(root);
    c.augment = AugmentSpec::train(8);
    (c.batch_size, c.backend, c.cpu_threads, c.reader_threads) = (2, BackendKind::Cpu, 1, 1);
    Pipeline::new(c).unwrap()
}

#[test]
fn negative_numbers_in_a_resume_state_are_refused_naming_the_field() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[4]);
    let good = small_pipeline(&root).fresh_state(0).to_json();
    for (field, from, to) in [
        ("epoch", "\"epoch\":0", "\"epoch\":-1"),
        ("step", "\"step\":0", "\"step\":-3"),
        ("next_pad", "\"next_pad\":4", "\"next_pad\":-4"),
        ("remaining[0][0]", "[[0,4]]", "[[-2,4]]"),
        ("seed", "\"seed\":", "\"seed\":-9223372036854775808,\"x\":"),
    ] {
        assert!(good.contains(from), "{good}");
        let e = ResumeState::from_json(&good.replacen(from, to, 1)).unwrap_err().to_string();
        assert!(e.contains(&format!("resume state's {field} is -")), "{field}: {e}");
    }
}

#[test]
fn huge_positions_in_a_resume_state_are_refused_before_any_epoch_is_listed() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("ds");
    folder(&root, &["a"], &[4]);
    let good = small_pipeline(&root).fresh_state(0).to_json();
    // Beyond the arithmetic's range: refused when read.
    let e = ResumeState::from_json(&good.replace("[[0,4]],\"next_pad\":4", &format!("[[0,4]],\"next_pad\":{}", u64::MAX))).unwrap_err();
    assert!(e.to_string().contains("next_pad 18446744073709551615"), "{e}");
    // Readable, but 2^31 and 2^40 positions left of an epoch of 4: refused by the pipeline.
    for n in [1u64 << 31, 1 << 40] {
        let s = ResumeState::from_json(&good.replace("[[0,4]],\"next_pad\":4", &format!("[[0,{n}]],\"next_pad\":{n}"))).unwrap();
        let r = root.clone();
        let e = within(20, "resume", move || {
            let mut p = small_pipeline(&r);
            p.resume(&s).map(|_| p.next_batch().map(|b| b.map(|b| b.positions.len())))
        });
        let e = e.unwrap_err().to_string();
        assert!(e.contains(&format!("{n} positions left")) && e.contains("epoch has 4"), "{e}");
    }
}
