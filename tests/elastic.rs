//! Elastic resume (`stoke::state`), end to end on real tar shards and the CPU backend: a world of
//! W ranks delivers part of an epoch, every rank saves its state (they must be the same), and a
//! world of W' ranks with another batch size resumes from it. Across the two worlds every
//! sample is delivered exactly once, plus padding of at most W − 1 + W' − 1 positions; at the
//! same W the batches are the uninterrupted run's, pixel for pixel; `stoke plan --resume`
//! prints what each new rank delivers. Per-sample mode and stream mode. The same over S3 (moto)
//! is in `store_s3.rs`.

use jpeg_encoder::{ColorType, Encoder};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use stoke::config::{AugmentSpec, BackendKind, PipelineConfig, StreamSpec};
use stoke::pipeline::Pipeline;
use stoke::source::tar::TarWriter;
use stoke::ResumeState;

/// Samples per shard, uneven (58 in all).
const COUNTS: [usize; 8] = [7, 11, 4, 9, 2, 13, 8, 4];

fn total() -> u64 {
    COUNTS.iter().sum::<usize>() as u64
}

fn jpeg(w: u16, h: u16, seed: usize) -> Vec<u8> {
    let rgb: Vec<u8> = (0..w as usize * h as usize * 3).map(|i| ((i * 7 + seed * 31) % 251) as u8).collect();
    let mut out = Vec::new();
    Encoder::new(&mut out, 85).encode(&rgb, w, h, ColorType::Rgb).unwrap();
    out
}

/// `dir/shard-{0..7}.tar`, `COUNTS[s]` labelled JPEGs each (label `k % 5`).
fn write_shards(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let mut k = 0;
    for (s, &n) in COUNTS.iter().enumerate() {
        let mut w = TarWriter::new(std::fs::File::create(dir.join(format!("shard-{s}.tar"))).unwrap());
        for _ in 0..n {
            w.append(&format!("img{k:03}.jpg"), &jpeg(24 + (k % 4) as u16 * 8, 20 + (k % 3) as u16 * 8, k)).unwrap();
            w.append(&format!("img{k:03}.cls"), format!("{}", k % 5).as_bytes()).unwrap();
            k += 1;
        }
        w.finish().unwrap();
    }
}

fn shards() -> &'static PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("stoke-elastic-{}", std::process::id()));
        write_shards(&dir);
        dir
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    PerSample,
    Stream,
}

fn config(dataset: &Path, mode: Mode, rank: usize, world: usize, batch: usize, seed: u64) -> PipelineConfig {
    let mut c = PipelineConfig::new(dataset);
    c.augment = AugmentSpec::train(16);
    (c.batch_size, c.seed, c.backend, c.cpu_threads, c.reader_threads) = (batch, seed, BackendKind::Cpu, 1, 1);
    (c.rank, c.world_size) = (rank, world);
    if mode == Mode::Stream {
        c.stream = Some(StreamSpec { group: 2, read_ahead_bytes: 1 << 20, ..Default::default() });
    }
    c
}

fn pattern(dir: &Path) -> PathBuf {
    dir.join(format!("shard-{{0..{}}}.tar", COUNTS.len() - 1))
}

fn pipeline(mode: Mode, rank: usize, world: usize, batch: usize) -> Pipeline {
    Pipeline::new(config(&pattern(shards()), mode, rank, world, batch, 5)).unwrap()
}

/// One delivered sample: position, dataset index, pixels.
type Got = (u64, usize, Vec<u8>);

/// Up to `steps` batches (all when `None`) of the epoch started on `p`, flattened to samples.
fn take(p: &mut Pipeline, steps: Option<usize>) -> Vec<Got> {
    let mut out = Vec::new();
    let mut n = 0;
    while steps.is_none_or(|s| n < s) {
        let Some(b) = p.next_batch() else { break };
        let b = b.unwrap();
        let bytes = b.host_bytes().unwrap();
        let per = bytes.len() / b.positions.len();
        for (k, (&pos, &i)) in b.positions.iter().zip(&b.indices).enumerate() {
            out.push((pos, i, bytes[k * per..(k + 1) * per].to_vec()));
        }
        n += 1;
    }
    out
}

/// A world of `w` ranks (batch `b`) delivers `steps` batches each of epoch 1; the state every
/// rank saves (asserted equal) and what they delivered.
fn first_world(mode: Mode, w: usize, b: usize, steps: usize) -> (ResumeState, Vec<Got>) {
    let mut got = Vec::new();
    let mut states = Vec::new();
    for r in 0..w {
        let mut p = pipeline(mode, r, w, b);
        p.start_epoch(1, 0);
        got.extend(take(&mut p, Some(steps)));
        states.push(p.state());
    }
    for s in &states[1..] {
        assert_eq!(s, &states[0], "{mode:?}: every rank saves the same state");
    }
    (states.swap_remove(0), got)
}

/// A world of `w` ranks (batch `b`) resumes from `state` (through its JSON) and finishes.
fn second_world(mode: Mode, state: &ResumeState, w: usize, b: usize) -> Vec<Vec<Got>> {
    let state = ResumeState::from_json(&state.to_json()).unwrap();
    (0..w)
        .map(|r| {
            let mut p = pipeline(mode, r, w, b);
            p.resume(&state).unwrap();
            take(&mut p, None)
        })
        .collect()
}

#[test]
fn every_sample_once_across_a_world_size_change_per_sample_and_stream() {
    let n = total();
    for mode in [Mode::PerSample, Mode::Stream] {
        for (w, steps, w2) in [(4usize, 2usize, 3usize), (2, 3, 5), (8, 1, 1)] {
            let (state, before) = first_world(mode, w, 3, steps);
            assert_eq!(before.len(), w * steps * 3);
            let after: Vec<Got> = second_world(mode, &state, w2, 4).into_iter().flatten().collect();
            let all: Vec<&Got> = before.iter().chain(&after).collect();
            let what = format!("{mode:?} {w} -> {w2} ranks after {steps} batches");
            // No position twice; the positions below N are the whole epoch, each a different
            // sample; the rest is padding within its bound.
            let positions: HashSet<u64> = all.iter().map(|g| g.0).collect();
            assert_eq!(positions.len(), all.len(), "{what}: a position delivered twice");
            let real: Vec<&&Got> = all.iter().filter(|g| g.0 < n).collect();
            assert_eq!(real.len() as u64, n, "{what}: every position of the epoch once");
            let indices: HashSet<usize> = real.iter().map(|g| g.1).collect();
            assert_eq!(indices, (0..n as usize).collect(), "{what}: every sample exactly once");
            let pads = all.len() as u64 - n;
            assert!(pads < (w + w2 - 2) as u64 + 1, "{what}: {pads} padded samples");
        }
    }
}

#[test]
fn the_same_world_size_continues_pixel_for_pixel_whatever_the_batch_size() {
    for mode in [Mode::PerSample, Mode::Stream] {
        let (state, _) = first_world(mode, 2, 3, 2);
        for r in 0..2 {
            let mut p = pipeline(mode, r, 2, 3);
            p.start_epoch(1, 0);
            let whole = take(&mut p, None);
            for batch in [3, 5] {
                let mut q = pipeline(mode, r, 2, batch);
                q.resume(&state).unwrap();
                assert_eq!(q.steps_now(), (whole.len() as u64 - 6).div_ceil(batch as u64));
                assert!(take(&mut q, None) == whole[6..], "{mode:?} rank {r} batch {batch}: the uninterrupted run's samples");
            }
        }
    }
}

#[test]
fn a_state_from_another_order_or_data_set_is_refused_by_name_and_a_done_epoch_is_empty() {
    let (state, _) = first_world(Mode::PerSample, 2, 3, 1);
    let refuse = |c: PipelineConfig, st: &ResumeState| Pipeline::new(c).unwrap().resume(st).unwrap_err().to_string();
    let e = refuse(config(&pattern(shards()), Mode::PerSample, 0, 3, 4, 6), &state);
    assert!(e.contains("seed 5") && e.contains("seed 6"), "{e}");
    let fewer = shards().join("shard-{0..6}.tar");
    let e = refuse(config(&fewer, Mode::PerSample, 0, 3, 4, 5), &state);
    assert!(e.contains("another data set") && e.contains("58 samples"), "{e}");
    let e = refuse(config(&pattern(shards()), Mode::Stream, 0, 3, 4, 5), &state);
    assert!(e.contains("stream_group"), "{e}");
    let mut other = config(&pattern(shards()), Mode::PerSample, 0, 3, 4, 5);
    other.shuffle = false;
    let e = refuse(other, &state);
    assert!(e.contains("shuffle true") && e.contains("shuffle false"), "{e}");

    // An epoch delivered to its end: the state's rest is empty, and resuming it gives no batch.
    let mut p = pipeline(Mode::PerSample, 1, 2, 4);
    p.start_epoch(3, 0);
    take(&mut p, None);
    let done = p.state();
    assert!(done.rest.is_empty() && done.epoch == 3);
    let mut q = pipeline(Mode::PerSample, 0, 3, 4);
    q.resume(&done).unwrap();
    assert!(q.next_batch().is_none());
}

/// `stoke plan --resume STATE --world-size W' --rank r --positions`: the positions each rank of
/// the new world delivers, from the sampler alone, equal to what the resumed pipelines delivered.
#[test]
fn plan_resume_prints_what_each_rank_of_the_new_world_delivers() {
    let dir = tempfile_dir("plan");
    for mode in [Mode::PerSample, Mode::Stream] {
        let (state, _) = first_world(mode, 4, 3, 1);
        let file = dir.join(format!("state-{mode:?}.json"));
        std::fs::write(&file, state.to_json()).unwrap();
        let resumed = second_world(mode, &state, 3, 4);
        for (r, got) in resumed.iter().enumerate() {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
                .args(["plan", &pattern(shards()).to_string_lossy(), "--resume", &file.to_string_lossy()])
                .args(["--world-size", "3", "--rank", &r.to_string(), "--positions"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let printed: Vec<u64> =
                String::from_utf8(out.stdout).unwrap().lines().map(|l| l.split('\t').next().unwrap().parse().unwrap()).collect();
            assert_eq!(printed, got.iter().map(|g| g.0).collect::<Vec<_>>(), "{mode:?} rank {r}");
        }
        // A seed that is not the state's: refused, naming the file and the seeds.
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
            .args(["plan", &pattern(shards()).to_string_lossy(), "--resume", &file.to_string_lossy(), "--seed", "9"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("state-") && err.contains("seed 5"), "{err}");
    }
    // A file that is not a resume state: named, with what is wrong.
    let bad = dir.join("bad.json");
    for (text, why) in [("{\"version\": 2, \"epoch\": 1}", "malformed"), ("[1, 2", "not JSON"), ("{}", "no version")] {
        std::fs::write(&bad, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_stoke"))
            .args(["plan", &pattern(shards()).to_string_lossy(), "--resume", &bad.to_string_lossy()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("bad.json") && err.contains(why), "{text}: {err}");
    }
}

fn tempfile_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stoke-elastic-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
