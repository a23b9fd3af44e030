//! Decode + augment backends: what a backend is given (the batch's samples), what it reports,
//! the one [`Backend`] contract both implement, and the dispatch between them ([`AnyBackend`]).

pub mod cpu;
pub mod cuda;

use crate::augment::AugParams;
use crate::batch::{Batch, Substitute};
use crate::config::{OnError, PipelineConfig};
use crate::error::{Error, Result};
use crate::source::Dataset;
use std::time::Duration;

/// One sample handed to the backend.
#[derive(Clone, Debug)]
pub struct SampleIn<'a> {
    /// Dataset index.
    pub index: usize,
    /// Epoch position.
    pub position: u64,
    /// Class label.
    pub label: i64,
    /// Compressed bytes (empty when `read_error` is set).
    pub bytes: &'a [u8],
    /// Augment parameters drawn for it.
    pub params: AugParams,
    /// Why it could not be read, if it could not.
    pub read_error: Option<String>,
}

/// Where the time of one batch went. `decode` and `augment` are summed over the workers
/// (thread time); `wall` is the batch's elapsed time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchTimes {
    /// Time spent decoding, summed over workers.
    pub decode: Duration,
    /// Time spent in the augment math, summed over workers.
    pub augment: Duration,
    /// Elapsed time for the batch.
    pub wall: Duration,
    /// The CUDA backend's stage times (zero on the CPU backend).
    pub gpu: GpuStageTimes,
}

/// One batch for a backend: where it sits in the epoch, its samples, and `describe(i)`: slot
/// `i`'s key and location for messages and substitute records.
#[derive(Clone, Copy)]
pub struct BatchInput<'s, 'b> {
    /// Epoch of the batch.
    pub epoch: u64,
    /// Step (batch number) inside the epoch.
    pub step: u64,
    /// The samples, in slot order.
    pub samples: &'s [SampleIn<'b>],
    /// Key and location of slot `i`.
    pub describe: &'s dyn Fn(usize) -> (String, String),
}

/// A decode + augment backend: turns one batch's samples into the batch tensor and its
/// per-slot records, applying the `on_error` policy (docs/CONTRACTS.md, contract 4).
pub trait Backend {
    /// Decode and augment `input` into `batch` (whose buffers are reused).
    fn run(&mut self, input: BatchInput<'_, '_>, batch: &mut Batch) -> Result<BatchTimes>;

    /// CPU worker threads (decode/augment on the CPU backend, CPU-route decodes on CUDA).
    fn threads(&self) -> usize;

    /// Device and pinned host bytes the backend holds (zero on the CPU backend).
    fn held_bytes(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// The backend a pipeline runs, chosen from the config.
#[allow(clippy::large_enum_variant)]
pub enum AnyBackend {
    /// The CPU backend.
    Cpu(cpu::CpuBackend),
    /// The CUDA backend.
    Cuda(Box<cuda::pipeline::CudaBackend>),
}

impl AnyBackend {
    /// Build the backend `config` asks for (`auto`: CUDA when a usable GPU is there, else the
    /// CPU, with a warning that says why).
    pub fn new(config: &PipelineConfig, dataset: &Dataset) -> Result<Self> {
        use crate::config::BackendKind;
        match config.backend {
            BackendKind::Cpu => Ok(Self::Cpu(cpu::CpuBackend::new(config)?)),
            BackendKind::Cuda => Ok(Self::Cuda(Box::new(cuda::pipeline::CudaBackend::new(config, dataset)?))),
            BackendKind::Auto => match cuda::pipeline::CudaBackend::new(config, dataset) {
                Ok(b) => Ok(Self::Cuda(Box::new(b))),
                Err(Error::Gpu(e)) => {
                    log::warn!("backend auto: no usable GPU, using the CPU backend ({e})");
                    Ok(Self::Cpu(cpu::CpuBackend::new(config)?))
                }
                Err(e) => Err(e),
            },
        }
    }

    /// The backend as the common contract.
    pub fn as_backend(&mut self) -> &mut dyn Backend {
        match self {
            Self::Cpu(b) => b,
            Self::Cuda(b) => b.as_mut(),
        }
    }

    /// CPU worker threads.
    pub fn threads(&self) -> usize {
        match self {
            Self::Cpu(b) => b.threads(),
            Self::Cuda(b) => Backend::threads(b.as_ref()),
        }
    }

    /// Device and pinned host bytes held.
    pub fn held_bytes(&self) -> (u64, u64) {
        match self {
            Self::Cpu(b) => b.held_bytes(),
            Self::Cuda(b) => Backend::held_bytes(b.as_ref()),
        }
    }

    /// The CUDA context of the CUDA backend's device (`None` on the CPU backend).
    pub fn cuda_context(&self) -> Option<std::sync::Arc<cudarc::driver::CudaContext>> {
        match self {
            Self::Cpu(_) => None,
            Self::Cuda(b) => Some(b.gpu().ctx().clone()),
        }
    }
}

/// Per-batch GPU stage times in seconds (CUDA events where the work runs on a stream, host
/// wall time for host work); all zero on the CPU backend. Sums and differences of them are
/// stage times over several batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct GpuStageTimes {
    /// Host: header parse, routing and staging of the batch.
    pub classify: f64,
    /// Hardware JPEG engine calls (CUDA events).
    pub hw_decode: f64,
    /// CUDA (hybrid / GPU-hybrid) decoders (CUDA events).
    pub cuda_decode: f64,
    /// CPU route: libjpeg-turbo decode + upload (host wall).
    pub cpu_route: f64,
    /// The fused augment kernel(s) (CUDA events).
    pub augment: f64,
}

impl GpuStageTimes {
    /// (name, seconds) of each stage, in pipeline order.
    pub fn rows(&self) -> [(&'static str, f64); 5] {
        [
            ("classify", self.classify),
            ("hw decode", self.hw_decode),
            ("cuda decode", self.cuda_decode),
            ("cpu route", self.cpu_route),
            ("augment", self.augment),
        ]
    }

    /// Stage by stage `f(self, o)`.
    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Self {
            classify: f(self.classify, o.classify),
            hw_decode: f(self.hw_decode, o.hw_decode),
            cuda_decode: f(self.cuda_decode, o.cuda_decode),
            cpu_route: f(self.cpu_route, o.cpu_route),
            augment: f(self.augment, o.augment),
        }
    }
}

impl std::ops::AddAssign for GpuStageTimes {
    fn add_assign(&mut self, o: Self) {
        *self = self.zip(o, |a, b| a + b);
    }
}

impl std::ops::Sub for GpuStageTimes {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        self.zip(o, |a, b| a - b)
    }
}

/// Fill `batch`'s per-slot records (labels, positions, dataset indices, params) from `samples`
/// and apply the `on_error` policy to the slots whose `status` is an error — the one rule both
/// backends follow (docs/CONTRACTS.md, contract 4):
/// - `fail`: the first failed slot (in slot order) is an error naming its sample;
/// - `skip`: a failed slot `i` takes the next good slot `j` of the batch (cyclic): the backend's
///   `copy_slot(batch, i, j)` makes slot `i` show slot `j`'s pixels (a host copy, or for the
///   CUDA backend which decoded image the kernel reads), its label, index and params become
///   `j`'s, and a [`Substitute`] is recorded; a batch with no good slot is an error naming
///   its keys.
///
/// `batch.epoch` and `batch.step` must already be set (they name an all-bad batch).
/// `describe(i)` gives slot `i`'s key and location.
pub(crate) fn settle_slots(
    samples: &[SampleIn<'_>],
    status: &[Option<String>],
    on_error: OnError,
    describe: &dyn Fn(usize) -> (String, String),
    batch: &mut Batch,
    copy_slot: &mut dyn FnMut(&mut Batch, usize, usize),
) -> Result<()> {
    debug_assert_eq!(samples.len(), status.len());
    let n = samples.len();
    batch.labels.clear();
    batch.positions.clear();
    batch.indices.clear();
    batch.params.clear();
    batch.substitutes.clear();
    for s in samples {
        batch.labels.push(s.label);
        batch.positions.push(s.position);
        batch.indices.push(s.index);
        batch.params.push(s.params);
    }
    let Some(bad) = status.iter().position(Option::is_some) else { return Ok(()) };
    if on_error == OnError::Fail {
        let (key, location) = describe(bad);
        return Err(Error::sample(key, location, status[bad].clone().unwrap_or_default()));
    }
    if status.iter().all(Option::is_some) {
        let keys: Vec<String> = (0..n).map(|i| describe(i).0).collect();
        return Err(Error::sample(
            keys.join(", "),
            format!("epoch {} step {}", batch.epoch, batch.step),
            format!("no sample of the batch could be decoded, nothing to substitute: first error: {}", status[0].as_deref().unwrap_or("")),
        ));
    }
    for (i, st) in status.iter().enumerate() {
        let Some(reason) = st else { continue };
        let j = next_good(status, i);
        copy_slot(batch, i, j);
        let (key, location) = describe(i);
        batch.substitutes.push(Substitute {
            slot: i,
            position: samples[i].position,
            index: samples[i].index,
            key,
            reason: format!("{location}: {reason}"),
            replaced_by: samples[j].index,
            replaced_by_key: describe(j).0,
        });
        batch.labels[i] = samples[j].label;
        batch.indices[i] = samples[j].index;
        batch.params[i] = samples[j].params;
    }
    Ok(())
}

/// The slot whose sample replaces failed slot `i`: the next good one after it, cyclic.
/// There is one: the caller checked.
fn next_good(status: &[Option<String>], i: usize) -> usize {
    let n = status.len();
    (1..n).map(|d| (i + d) % n).find(|&j| status[j].is_none()).expect("a good slot exists")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::AugParams;
    use crate::config::{DType, Layout};

    #[test]
    fn next_good_is_cyclic() {
        let ok = None;
        let bad = Some(String::from("x"));
        let st = vec![bad.clone(), ok.clone(), bad.clone(), bad.clone(), ok.clone()];
        assert_eq!(next_good(&st, 0), 1);
        assert_eq!(next_good(&st, 2), 4);
        assert_eq!(next_good(&st, 3), 4);
        let st = vec![ok.clone(), bad.clone(), bad.clone()];
        assert_eq!(next_good(&st, 1), 0);
        assert_eq!(next_good(&st, 2), 0);
    }

    fn samples(n: usize) -> Vec<SampleIn<'static>> {
        (0..n)
            .map(|i| SampleIn {
                index: 10 + i,
                position: 100 + i as u64,
                label: 1000 + i as i64,
                bytes: &[],
                params: AugParams { crop_x: i as i32, ..AugParams::default() },
                read_error: None,
            })
            .collect()
    }

    fn describe(i: usize) -> (String, String) {
        (format!("key{i}"), format!("file{i}.jpg"))
    }

    #[test]
    fn skip_copies_the_next_good_slot_and_records_it() {
        let ins = samples(4);
        let st = vec![None, Some("bad header".to_string()), None, Some("truncated".to_string())];
        let mut batch = Batch::new_host(DType::F32, Layout::Nchw);
        let mut copies = Vec::new();
        settle_slots(&ins, &st, OnError::Skip, &describe, &mut batch, &mut |_, i, j| copies.push((i, j))).unwrap();
        assert_eq!(copies, vec![(1, 2), (3, 0)], "slot 3 wraps around to slot 0");
        assert_eq!(batch.labels, vec![1000, 1002, 1002, 1000]);
        assert_eq!(batch.indices, vec![10, 12, 12, 10]);
        assert_eq!(batch.positions, vec![100, 101, 102, 103], "a slot keeps its own position");
        assert_eq!(batch.params.iter().map(|p| p.crop_x).collect::<Vec<_>>(), vec![0, 2, 2, 0]);
        let s = &batch.substitutes;
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].slot, s[0].position, s[0].index, s[0].replaced_by), (1, 101, 11, 12));
        assert_eq!((s[0].key.as_str(), s[0].replaced_by_key.as_str(), s[0].reason.as_str()), ("key1", "key2", "file1.jpg: bad header"));
        assert_eq!((s[1].slot, s[1].replaced_by, s[1].replaced_by_key.as_str()), (3, 10, "key0"));
    }

    #[test]
    fn fail_names_the_first_bad_slot_and_an_all_bad_batch_names_its_keys() {
        let ins = samples(3);
        let st = vec![None, Some("bad header".to_string()), Some("truncated".to_string())];
        let mut batch = Batch::new_host(DType::F32, Layout::Nchw);
        let mut copied = false;
        let e = settle_slots(&ins, &st, OnError::Fail, &describe, &mut batch, &mut |_, _, _| copied = true).unwrap_err().to_string();
        assert!(e.contains("key1") && e.contains("file1.jpg") && e.contains("bad header") && !e.contains("key2"), "{e}");
        assert!(!copied);
        let st = vec![Some("a".to_string()), Some("b".to_string()), Some("c".to_string())];
        (batch.epoch, batch.step) = (3, 7);
        let e = settle_slots(&ins, &st, OnError::Skip, &describe, &mut batch, &mut |_, _, _| copied = true).unwrap_err().to_string();
        assert!(e.contains("key0, key1, key2") && e.contains("epoch 3 step 7") && e.contains("first error: a"), "{e}");
        assert!(!copied);
        // All good: records filled, nothing copied.
        settle_slots(&ins, &[None, None, None], OnError::Fail, &describe, &mut batch, &mut |_, _, _| copied = true).unwrap();
        assert!(!copied && batch.substitutes.is_empty());
        assert_eq!(batch.labels, vec![1000, 1001, 1002]);
    }
}
