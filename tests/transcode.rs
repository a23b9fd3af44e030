//! Progressive and arithmetic-coded JPEGs rewritten as baseline (`to_baseline`, libjpeg-turbo's
//! lossless transform): the same DCT coefficients, so libjpeg-turbo must decode the rewritten
//! bytes to exactly the original's pixels, whole and by region. Likewise gray JPEGs declaring
//! 2×2 sampling declared 1×1 (`declare_gray_1x1`, under `gpu_engine_gray`). The reference is the decoder
//! on the stored file, an independent path (the progressive decoder's coefficient buffer
//! against the sequential one's), not a capture of the transcoder's output.
//!
//! Generated photos always; the corpus's files too with `STOKE_CORPUS=/path/to/corpus/dev`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stoke::backend::cpu::decode::{decode_rgb, decode_rgb_region, to_baseline, DecodedImage};
use stoke::codec::jpeg::{declare_gray_1x1, parse, Coding};
use stoke::config::OnError;
use stoke::pipeline::Pipeline;
use stoke::reader::Reader;
use stoke::source::{Dataset, IndexOptions};
use stoke::PipelineConfig;

const GUARD: u64 = 1 << 28;

/// Decodes `a` and `b` whole and by a few regions, and requires the same pixels.
fn same_pictures(name: &str, a: &[u8], b: &[u8]) {
    let (mut x, mut y) = (DecodedImage::default(), DecodedImage::default());
    decode_rgb(a, GUARD, &mut x).unwrap_or_else(|e| panic!("{name}: {e}"));
    decode_rgb(b, GUARD, &mut y).unwrap_or_else(|e| panic!("{name} transcoded: {e}"));
    assert_eq!((x.width, x.height), (y.width, y.height), "{name}");
    assert!(x.rgb == y.rgb, "{name}: the transcoded file decodes to other pixels");
    let (w, h) = (x.width, x.height);
    for (rx, ry, rw, rh) in [(w / 3, h / 4, w / 2, h / 2), (0, h / 2, w.div_ceil(3), h - h / 2), (w - w / 5 - 1, 1, w / 5, h / 3)] {
        if rw == 0 || rh == 0 {
            continue;
        }
        decode_rgb_region(a, GUARD, Some((rx, ry, rw, rh)), &mut x).unwrap();
        decode_rgb_region(b, GUARD, Some((rx, ry, rw, rh)), &mut y).unwrap();
        assert_eq!((x.region_x, x.region_y, x.region_w, x.region_h), (y.region_x, y.region_y, y.region_w, y.region_h), "{name}");
        assert!(x.rgb == y.rgb, "{name}: region {rx},{ry} {rw}x{rh} differs");
    }
}

#[test]
fn generated_progressive_photos_become_baseline_with_the_same_pixels() {
    let seed = 7;
    let mut done = 0;
    for i in (0..4000).filter(|&i| stoke::gen::kind_of(seed, i) == stoke::gen::Kind::Progressive420).take(12) {
        let g = stoke::gen::image(seed, 4, i).unwrap();
        assert_eq!(parse(&g.bytes).unwrap().coding, Coding::Progressive);
        let t = to_baseline(&g.bytes, GUARD).expect("a generated progressive photo transcodes");
        let info = parse(&t).unwrap();
        assert_eq!((info.coding, info.sof), (Coding::Baseline, 0xC0), "image {i}");
        same_pictures(&format!("generated {i}"), &g.bytes, &t);
        done += 1;
    }
    assert_eq!(done, 12);
}

#[test]
fn what_is_not_to_be_transcoded_is_left_alone() {
    let seed = 7;
    let find = |k: stoke::gen::Kind| (0..20_000).find(|&i| stoke::gen::kind_of(seed, i) == k).unwrap();
    // Baseline, and CMYK (four components, which the hardware engine takes in no form).
    for kind in [stoke::gen::Kind::Baseline420, stoke::gen::Kind::AdobeCmyk] {
        let g = stoke::gen::image(seed, 4, find(kind)).unwrap();
        assert!(to_baseline(&g.bytes, GUARD).is_none(), "{kind:?}");
    }
    let g = stoke::gen::image(seed, 4, find(stoke::gen::Kind::Progressive420)).unwrap();
    let info = parse(&g.bytes).unwrap();
    // Over the guard: refused before anything is allocated.
    assert!(to_baseline(&g.bytes, info.pixels() - 1).is_none());
    assert!(to_baseline(&g.bytes, info.pixels()).is_some());
    // Truncated: libjpeg-turbo warns, so the stored bytes go on (and fail in the decoder).
    assert!(to_baseline(&g.bytes[..g.bytes.len() * 2 / 3], GUARD).is_none());
    assert!(to_baseline(b"not a jpeg", GUARD).is_none());
    // The transformer is usable after those failures.
    assert!(to_baseline(&g.bytes, GUARD).is_some());
}

/// Every JPEG of the corpus: those transcoded decode to the stored file's pixels; progressive
/// and arithmetic ones that decode without a warning are all transcoded.
#[test]
fn the_corpus_transcodes_to_the_same_pixels() {
    let Some(root) = std::env::var_os("STOKE_CORPUS").map(PathBuf::from) else {
        eprintln!("STOKE_CORPUS not set: skipped");
        return;
    };
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    let (mut transcoded, mut candidates) = (0, 0);
    for p in &files {
        let bytes = std::fs::read(p).unwrap();
        let name = p.strip_prefix(&root).unwrap().display().to_string();
        let Ok(info) = parse(&bytes) else { continue };
        let candidate = stoke::backend::cpu::decode::transcodable(&info) && info.pixels() <= GUARD;
        match to_baseline(&bytes, GUARD) {
            Some(t) => {
                assert!(candidate, "{name}: transcoded but not a candidate");
                same_pictures(&name, &bytes, &t);
                transcoded += 1;
            }
            None if candidate && !name.contains("corrupt") => {
                // Only damaged files may be refused: they decode with a warning.
                let mut out = DecodedImage::default();
                let clean = decode_rgb(&bytes, GUARD, &mut out).is_ok();
                eprintln!("{name}: candidate not transcoded (decodes: {clean})");
            }
            None => {}
        }
        candidates += candidate as usize;
    }
    eprintln!("{transcoded} of {candidates} candidates transcoded, {} files", files.len());
    assert!(transcoded >= 25, "only {transcoded} of {candidates} transcoded");
}

/// `root/{a,b}/`: generated photos of seed 7 — progressive ones, baseline ones, a CMYK one and
/// a progressive one cut short — and the stored bytes by file name.
fn folder(root: &Path) -> Vec<(String, Vec<u8>)> {
    use stoke::gen::Kind;
    let seed = 7;
    let of = |k: Kind, n: usize| (0..20_000).filter(move |&i| stoke::gen::kind_of(seed, i) == k).take(n);
    let mut files = Vec::new();
    for (n, i) in of(Kind::Progressive420, 6).chain(of(Kind::Baseline420, 6)).chain(of(Kind::AdobeCmyk, 1)).enumerate() {
        files.push((format!("{}/{n:02}.jpg", ["a", "b"][n % 2]), stoke::gen::image(seed, 4, i).unwrap().bytes));
    }
    let cut = stoke::gen::image(seed, 4, of(Kind::Progressive420, 7).last().unwrap()).unwrap().bytes;
    files.push(("b/cut.jpg".into(), cut[..cut.len() / 2].to_vec()));
    let gray = stoke::gen::image(seed, 4, of(Kind::Gray, 1).last().unwrap()).unwrap().bytes;
    files.push(("a/gray22.jpg".into(), declared_2x2(&gray)));
    for (name, bytes) in &files {
        std::fs::create_dir_all(root.join(name).parent().unwrap()).unwrap();
        std::fs::write(root.join(name), bytes).unwrap();
    }
    files
}

/// `gray` (a 1×1 baseline gray JPEG) with its frame header declaring 2×2 sampling, as
/// `cjpeg -grayscale` writes.
fn declared_2x2(gray: &[u8]) -> Vec<u8> {
    let sof = (2..gray.len()).find(|&i| gray[i - 2] == 0xFF && gray[i - 1] == 0xC0).unwrap() - 2;
    assert_eq!((gray[sof + 9], gray[sof + 11]), (1, 0x11), "one component, 1×1");
    let mut b = gray.to_vec();
    b[sof + 11] = 0x22;
    assert_eq!(parse(&b).unwrap().sampling[0], (2, 2));
    b
}

/// Gray JPEGs declaring other sampling than 1×1 — generated ones declared 2×2 by hand, and with
/// `STOKE_CORPUS` the corpus's (its ImageNet-like gray photos declare 2×2) — declared 1×1
/// decode to the stored file's pixels bit for bit, whole and by region; colour, 1×1 and
/// progressive files (the corpus has a 2×2 one) are left as they are.
#[test]
fn gray_jpegs_declared_1x1_decode_to_the_same_pixels() {
    let seed = 7;
    let mut files: Vec<(String, Vec<u8>)> = (0..20_000)
        .filter(|&i| stoke::gen::kind_of(seed, i) == stoke::gen::Kind::Gray)
        .take(6)
        .map(|i| (format!("generated gray {i}"), declared_2x2(&stoke::gen::image(seed, 4, i).unwrap().bytes)))
        .collect();
    if let Some(root) = std::env::var_os("STOKE_CORPUS").map(PathBuf::from) {
        for d in ["imagenet_like", "conformance/gray", "conformance/odd-subsampling", "conformance/progressive"] {
            let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join(d)).unwrap().flatten().map(|e| e.path()).collect();
            paths.sort();
            files.extend(paths.into_iter().map(|p| (p.display().to_string(), std::fs::read(&p).unwrap())));
        }
    }
    let mut declared = 0;
    for (name, stored) in &files {
        let Ok(info) = parse(stored) else { continue };
        let mut b = stored.clone();
        let changed = declare_gray_1x1(&mut b);
        if info.components == 1 && info.sampling[0] != (1, 1) && !info.coding.is_progressive() {
            assert!(changed, "{name}: {:?} declares {:?}", info.coding, info.sampling[0]);
            let after = parse(&b).unwrap();
            assert_eq!(
                (after.sampling[0], after.coding, after.width, after.height),
                ((1, 1), info.coding, info.width, info.height),
                "{name}"
            );
            assert_eq!(b.iter().zip(stored).filter(|(x, y)| x != y).count(), 1, "{name}: one byte changes");
            same_pictures(name, stored, &b);
            declared += 1;
        } else {
            assert!(!changed && b == *stored, "{name}: changed");
        }
    }
    eprintln!("{declared} gray files declared 1x1 of {}", files.len());
    assert!(declared >= 6);
}

fn reader_config(root: &Path, threads: usize, budget: u64, cache: u64) -> PipelineConfig {
    let mut c = PipelineConfig::new(root);
    c.batch_size = 4;
    c.seed = 3;
    c.reader_threads = threads;
    c.on_error = OnError::Skip;
    c.transcode_progressive = true;
    c.transcode_cache_bytes = budget;
    c.cache_bytes = cache;
    c
}

/// Every sample's delivered bytes of one epoch, by dataset key.
fn epoch_bytes(r: &mut Reader, d: &Dataset, epoch: u64) -> BTreeMap<String, Vec<u8>> {
    r.start_epoch(epoch, 0);
    let mut out = BTreeMap::new();
    while let Some(b) = r.next_batch() {
        let b = b.unwrap();
        for s in &b.samples {
            assert!(s.error.is_none(), "{}: {:?}", d.sample(s.index).key, s.error);
            out.insert(d.sample(s.index).key.clone(), b.data[s.bytes.clone()].to_vec());
        }
        r.recycle(b);
    }
    out
}

/// The reader delivers each progressive photo as baseline bytes that decode to its pixels, every
/// other file as stored (the CMYK one; the cut one, on which libjpeg-turbo warns), rewrites each
/// once and keeps it: with the progressive files deleted, the next epochs still deliver them.
#[test]
fn the_reader_delivers_progressive_photos_as_baseline_and_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let files = folder(&root);
    let d = Arc::new(Dataset::open(&root, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap());
    let mut r = Reader::new(d.clone(), &reader_config(&root, 2, 1 << 30, 0)).unwrap();
    let first = epoch_bytes(&mut r, &d, 0);
    assert_eq!(first.len(), files.len());
    let mut rewritten = 0;
    for (name, stored) in &files {
        let got = &first[name];
        if parse(stored).unwrap().coding == Coding::Progressive && name != "b/cut.jpg" {
            assert_eq!(parse(got).unwrap().coding, Coding::Baseline, "{name}");
            same_pictures(name, stored, got);
            rewritten += 1;
        } else {
            assert!(got == stored, "{name} is not delivered as stored");
        }
    }
    assert_eq!(rewritten, 6);
    let s = r.transcoded();
    assert_eq!((s.rewrites, s.kept, s.again), (6, 6, 0), "{s:?}");
    let progressive = |name: &str, stored: &[u8]| name != "b/cut.jpg" && parse(stored).unwrap().coding == Coding::Progressive;
    assert_eq!(s.kept_bytes, files.iter().filter(|(n, b)| progressive(n, b)).map(|(n, _)| first[n].len() as u64).sum::<u64>());
    for (name, stored) in &files {
        if progressive(name, stored) {
            std::fs::remove_file(root.join(name)).unwrap();
        }
    }
    for epoch in 1..3 {
        assert_eq!(epoch_bytes(&mut r, &d, epoch), first, "epoch {epoch}");
    }
    assert_eq!(r.transcoded().rewrites, 6, "kept images are not rewritten again");
}

/// Past its budget the reader rewrites the same images again at each read and delivers the same
/// bytes as with room to keep them, whatever the thread count; with the RAM cache on, the cache
/// holds the rewritten bytes and the transcoder keeps no second copy.
#[test]
fn the_budget_and_the_threads_change_what_it_costs_never_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    folder(&root);
    let d = Arc::new(Dataset::open(&root, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap());
    let mut roomy = Reader::new(d.clone(), &reader_config(&root, 1, 1 << 30, 0)).unwrap();
    let want: Vec<_> = (0..2).map(|e| epoch_bytes(&mut roomy, &d, e)).collect();
    for threads in [1, 3] {
        let mut tight = Reader::new(d.clone(), &reader_config(&root, threads, 1, 0)).unwrap();
        for (e, w) in want.iter().enumerate() {
            assert!(&epoch_bytes(&mut tight, &d, e as u64) == w, "threads {threads}, epoch {e}");
        }
        let s = tight.transcoded();
        assert_eq!((s.rewrites, s.kept, s.kept_bytes, s.again), (12, 0, 0, 6), "{s:?}");
    }
    let mut cached = Reader::new(d.clone(), &reader_config(&root, 2, 1 << 30, 1 << 30)).unwrap();
    for (e, w) in want.iter().enumerate() {
        assert!(&epoch_bytes(&mut cached, &d, e as u64) == w, "cache on, epoch {e}");
    }
    let s = cached.transcoded();
    assert_eq!((s.rewrites, s.kept), (6, 0), "{s:?}");
    // Stream mode keeps nothing: refused, by name.
    let mut c = reader_config(&root, 1, 1 << 30, 0);
    c.stream = Some(stoke::config::StreamSpec::default());
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("transcode_progressive") && e.contains("per-sample"), "{e}");
}

/// The CPU backend's batches are bit for bit the same with and without the rewrites (progressive
/// as baseline, gray declared 1×1): the rewritten bytes decode to the stored file's pixels,
/// whole or by the crop's region.
#[test]
fn the_cpu_backends_batches_are_the_same_with_and_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    folder(&root);
    let run = |on: bool| {
        let mut c = reader_config(&root, 2, 1 << 30, 0);
        c.transcode_progressive = on;
        // The gray photo declaring 2×2 is declared 1×1 too.
        c.gpu_engine_gray = on;
        c.backend = stoke::config::BackendKind::Cpu;
        c.cpu_threads = 2;
        let mut p = Pipeline::new(c).unwrap();
        let mut out = Vec::new();
        for epoch in 0..2 {
            p.start_epoch(epoch, 0);
            while let Some(b) = p.next_batch() {
                let b = b.unwrap();
                out.push((b.host_bytes().unwrap().to_vec(), b.labels.clone()));
            }
        }
        out
    };
    let (off, on) = (run(false), run(true));
    assert_eq!(off.len(), 8);
    assert!(off == on, "the batches differ with transcode_progressive");
}

/// libjpeg-turbo's lossless transform of `jpeg` with TurboJPEG's transform `options`, outside
/// stoke's checks (test input and premises only).
fn tj_transform(jpeg: &[u8], options: u32) -> Vec<u8> {
    use turbojpeg_sys as tj;
    // SAFETY: a transformer handle used on this thread only; `jpeg` is the source; one
    // transform whose output TurboJPEG allocates and we free once.
    unsafe {
        let handle = tj::tj3Init(tj::TJINIT_TJINIT_TRANSFORM as i32);
        assert!(!handle.is_null());
        let t = tj::tjtransform {
            r: tj::tjregion { x: 0, y: 0, w: 0, h: 0 },
            op: tj::TJXOP_TJXOP_NONE as i32,
            options: options as i32,
            data: std::ptr::null_mut(),
            customFilter: None,
        };
        let (mut out, mut len): (*mut u8, tj::size_t) = (std::ptr::null_mut(), 0);
        assert_eq!(tj::tj3Transform(handle, jpeg.as_ptr(), jpeg.len() as _, 1, &mut out, &mut len, &t), 0);
        let v = std::slice::from_raw_parts(out, len as usize).to_vec();
        tj::tj3Free(out.cast());
        tj::tj3Destroy(handle);
        v
    }
}

/// A flat grey `w × h` picture as a progressive JPEG written by libjpeg-turbo (its lossless
/// transform with TJXOPT_PROGRESSIVE over jpeg-encoder's baseline file): its end-of-band runs
/// code thousands of empty blocks in a few bytes, which a baseline scan cannot.
fn flat_progressive(w: u16, h: u16) -> Vec<u8> {
    let mut base = Vec::new();
    jpeg_encoder::Encoder::new(&mut base, 90)
        .encode(&vec![128u8; w as usize * h as usize * 3], w, h, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    tj_transform(&base, turbojpeg_sys::TJXOPT_PROGRESSIVE)
}

/// A progressive file whose scans stop before its AC coefficients are refined (cut after its
/// first scans, an EOI after them: legal, no warning) is decoded by libjpeg-turbo with block
/// smoothing, which a baseline file of the same coefficients would not get: its rewrite would
/// change the pixels (the premise, shown with libjpeg-turbo's transform directly), so it is
/// not rewritten. Whole scan scripts are.
#[test]
fn a_progressive_file_with_unrefined_coefficients_is_not_rewritten() {
    use stoke::codec::jpeg::progressive_complete;
    let seed = 7;
    let i = (0..20_000).find(|&i| stoke::gen::kind_of(seed, i) == stoke::gen::Kind::Baseline420).unwrap();
    let full = tj_transform(&stoke::gen::image(seed, 4, i).unwrap().bytes, turbojpeg_sys::TJXOPT_PROGRESSIVE);
    assert!(progressive_complete(&full) && to_baseline(&full, GUARD).is_some());
    let scans: Vec<usize> = (0..full.len() - 1).filter(|&k| full[k] == 0xFF && full[k + 1] == 0xDA).collect();
    assert!(scans.len() >= 6, "libjpeg-turbo's scan script: {} scans", scans.len());
    for cut_at in [2, scans.len() - 1] {
        let mut cut = full[..scans[cut_at]].to_vec();
        cut.extend([0xFF, 0xD9]);
        assert!(!progressive_complete(&cut), "cut before scan {cut_at}");
        assert!(to_baseline(&cut, GUARD).is_none(), "cut before scan {cut_at}: rewritten");
        let (mut a, mut b) = (DecodedImage::default(), DecodedImage::default());
        decode_rgb(&cut, GUARD, &mut a).unwrap();
        decode_rgb(&tj_transform(&cut, 0), GUARD, &mut b).unwrap();
        assert!(a.rgb != b.rgb, "cut before scan {cut_at}: the premise (smoothing changes the pixels)");
    }
}

/// A rewrite longer than `room` of the stored bytes is not delivered: the stored bytes go on, so
/// the CUDA backend's buffers, sized from the index by `room` for the progressive samples, hold
/// whatever the reader delivers. The rule depends on the bytes alone (the same every epoch).
#[test]
fn a_rewrite_longer_than_its_room_is_not_delivered() {
    use stoke::reader::transcode::room;
    let flat = flat_progressive(2048, 2048);
    assert_eq!(parse(&flat).unwrap().coding, Coding::Progressive);
    let rewrite = to_baseline(&flat, GUARD).expect("it transcodes");
    assert!(rewrite.len() as u64 > room(flat.len() as u64), "{} stored, {} rewritten: the premise", flat.len(), rewrite.len());
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let files = folder(&root);
    std::fs::write(root.join("a/flat.jpg"), &flat).unwrap();
    let d = Arc::new(Dataset::open(&root, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap());
    let mut r = Reader::new(d.clone(), &reader_config(&root, 2, 1 << 30, 0)).unwrap();
    for epoch in 0..2 {
        let got = epoch_bytes(&mut r, &d, epoch);
        assert!(got["a/flat.jpg"] == flat, "epoch {epoch}: the flat photo is not delivered as stored");
        assert_eq!(got.len(), files.len() + 1);
    }
    assert_eq!(r.transcoded().rewrites, 6, "the flat photo is not counted as rewritten");
}

/// With `gpu_engine_gray` the reader delivers a gray photo declaring 2×2 declared 1×1 (the same
/// pixels), every other file as it would without it, epoch after epoch.
#[test]
fn the_reader_declares_gray_photos_1x1_under_gpu_engine_gray() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    folder(&root);
    let d = Arc::new(Dataset::open(&root, &IndexOptions { save: false, ..IndexOptions::default() }).unwrap());
    let mut plain = Reader::new(d.clone(), &reader_config(&root, 2, 1 << 30, 0)).unwrap();
    let mut c = reader_config(&root, 2, 1 << 30, 0);
    c.gpu_engine_gray = true;
    let mut gray = Reader::new(d.clone(), &c).unwrap();
    for epoch in 0..2 {
        let (want, got) = (epoch_bytes(&mut plain, &d, epoch), epoch_bytes(&mut gray, &d, epoch));
        for (name, bytes) in &got {
            if name == "a/gray22.jpg" {
                assert_eq!(parse(&want[name]).unwrap().sampling[0], (2, 2));
                assert_eq!(parse(bytes).unwrap().sampling[0], (1, 1), "epoch {epoch}");
                same_pictures(name, &want[name], bytes);
            } else {
                assert!(*bytes == want[name], "{name} changed");
            }
        }
    }
}

/// Stream mode's reader declares a 2×2-declared gray photo 1×1 too under `gpu_engine_gray`
/// (its `gray_1x1`), and leaves every sample as stored without it.
#[test]
fn the_stream_reader_declares_gray_photos_1x1_too() {
    use stoke::reader::stream::{StreamReader, StreamSource};
    use stoke::sampler::shards::ShardOrderConfig;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let files = folder(&root);
    let shards = dir.path().join("shards");
    std::fs::create_dir_all(&shards).unwrap();
    let mut w = stoke::source::tar::TarWriter::new(std::fs::File::create(shards.join("s-0.tar")).unwrap());
    for (k, (_, bytes)) in files.iter().enumerate() {
        w.append(&format!("{k:03}.jpg"), bytes).unwrap();
    }
    w.finish().unwrap();
    let source = Arc::new(StreamSource::open(&shards, 1).unwrap());
    let gray = files.iter().position(|(n, _)| n == "a/gray22.jpg").unwrap();
    for on in [false, true] {
        let mut c = reader_config(&shards, 1, 0, 0);
        c.transcode_progressive = false;
        c.gpu_engine_gray = on;
        let rc = stoke::reader::ReaderConfig::from_pipeline(&c);
        let mut r = StreamReader::new(source.clone(), ShardOrderConfig::default(), &rc, 1 << 30).unwrap();
        r.start_epoch(0, 0).unwrap();
        let mut seen = 0;
        while let Some(b) = r.next_batch() {
            let b = b.unwrap();
            for (s, (key, _)) in b.samples.iter().zip(&b.names) {
                let k: usize = key.trim_end_matches(".jpg").rsplit('/').next().unwrap().parse().unwrap();
                let got = &b.data[s.bytes.clone()];
                if k == gray && on {
                    assert_eq!(parse(got).unwrap().sampling[0], (1, 1));
                    same_pictures("gray22 in a shard", &files[k].1, got);
                } else {
                    assert!(got == files[k].1, "{key}: changed (gray_1x1 {on})");
                }
                seen += 1;
            }
            r.recycle(b);
        }
        assert_eq!(seen, files.len());
    }
}
