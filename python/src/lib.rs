//! `stoke._stoke`: the Python face of the Rust crate. Thin by design: [`Loader`] wraps a
//! [`stoke::pipeline::Pipeline`], each batch is shared by an images and a labels [`Tensor`]
//! exported through DLPack without a copy, and the batch goes back to stoke when the last
//! tensor viewing it is gone.
//!
//! Held batches: a batch the consumer still holds is never overwritten (it owns its host buffer
//! or its device ring slot until its last reference dies). The ring is sized for
//! `max_held_batches` batches held at once plus the pipeline's prefetch; asking for a batch
//! while `max_held_batches` are held raises an error naming the bound instead of blocking.

// pyo3 0.22's #[pymethods] expansion converts PyErr into PyErr; clippy flags the macro's code.
#![allow(clippy::useless_conversion)]

mod dlpack;
mod options;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use dlpack::{DLDataType, DLDevice, View, KDL_BFLOAT, KDL_CPU, KDL_CUDA, KDL_FLOAT, KDL_INT, KDL_UINT};
use options::build_config;
use stoke::batch::{Batch, Images};
use stoke::config::{
    BackendKind, DType, EraseMode, Filter, GpuBitstream, GpuDecoders, GpuUpsampling, GpuWait, Layout, MixupMode, OnError, OptionNames,
    PipelineConfig, PipelineOptions, Preset, RotateInterp, TrainInterpolation, ViewOptions,
};
use stoke::pipeline::Pipeline;
use stoke::ResumeState;

pyo3::create_exception!(
    _stoke,
    SampleError,
    PyRuntimeError,
    "A sample could not be read or decoded under on_error='fail'; the message names its key, file, shard and offset."
);

/// One delivered batch, shared by its tensors. Dropping the last reference sends it back to
/// the loader (host buffers are reused; a device batch's ring slot is released on the stream
/// its consumer waited on).
struct Held {
    batch: Option<Batch>,
    back: Sender<Batch>,
    held: Arc<AtomicUsize>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(mut b) = self.batch.take() {
            // A device batch's ring slot is released here and now, on the stream its consumer
            // waited on: the loader would only take the batch back at its next `next()`, after
            // the consumer may have destroyed that stream (the release would then be recorded
            // on a dead handle), and on its own thread (a per-thread stream's reads would need
            // a whole-device wait). The rest of the batch goes back for reuse.
            if matches!(b.images, Images::Device(_)) {
                drop(std::mem::replace(&mut b.images, Images::Host(Default::default())));
            }
            let _ = self.back.send(b); // the loader may be gone: then the batch is simply freed
        }
        self.held.fetch_sub(1, Ordering::SeqCst);
    }
}

// SAFETY: a `Held` is never mutated after it is shared (Drop has `&mut`); the batch's device
// images are only read through `&` (their consumer stream is behind a mutex) and its host
// bytes are plain memory.
unsafe impl Sync for Held {}

fn held(h: &Arc<Held>) -> &Batch {
    h.batch.as_ref().expect("a shared batch is present until dropped")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Images,
    Labels,
    /// One view of a `views` batch (its index in view order).
    View(usize),
    /// One group of a `views` batch: its views, view-major, as one tensor.
    Group(usize),
}

/// A zero-copy view of a batch's images or labels: pass it to `torch.from_dlpack`,
/// `np.from_dlpack` or `cupy.from_dlpack`.
#[pyclass(module = "stoke", frozen)]
struct Tensor {
    batch: Arc<Held>,
    part: Part,
}

impl Tensor {
    fn view(&self) -> View {
        let b = held(&self.batch);
        let n = b.len() as i64;
        // Where the part's images start in the batch's images, and their shape.
        let (offset, img_shape) = match self.part {
            Part::View(v) => {
                let p = b.view_places()[v];
                (p.offset as u64, b.shape_of(b.len(), p.width, p.height))
            }
            Part::Group(g) => {
                let p = *b.view_places().iter().find(|p| p.group == g).expect("a group of the batch");
                (p.offset as u64, b.shape_of(b.groups[g].count * b.len(), p.width, p.height))
            }
            _ => (0, b.shape),
        };
        let img_shape: Vec<i64> = img_shape.iter().map(|&d| d as i64).collect();
        let dtype = match b.dtype {
            DType::F32 => DLDataType { code: KDL_FLOAT, bits: 32, lanes: 1 },
            DType::F16 => DLDataType { code: KDL_FLOAT, bits: 16, lanes: 1 },
            DType::Bf16 => DLDataType { code: KDL_BFLOAT, bits: 16, lanes: 1 },
            DType::U8 => DLDataType { code: KDL_UINT, bits: 8, lanes: 1 },
        };
        let i64t = DLDataType { code: KDL_INT, bits: 64, lanes: 1 };
        let owner: Arc<dyn Send + Sync> = self.batch.clone();
        match (&b.images, self.part) {
            (Images::Host(v), Part::Images | Part::View(_) | Part::Group(_)) => View {
                owner,
                data: v.as_ptr() as u64 + offset,
                device: DLDevice { device_type: KDL_CPU, device_id: 0 },
                dtype,
                shape: img_shape,
            },
            // Under Mixup/CutMix the second tensor is the soft targets [N, classes] (timm's
            // `Mixup` returns them in place of the labels).
            (Images::Host(_), Part::Labels) if b.num_classes > 0 => View {
                owner,
                data: b.targets.as_ptr() as u64,
                device: DLDevice { device_type: KDL_CPU, device_id: 0 },
                dtype: DLDataType { code: KDL_FLOAT, bits: 32, lanes: 1 },
                shape: vec![n, b.num_classes as i64],
            },
            (Images::Host(_), Part::Labels) => View {
                owner,
                data: b.labels.as_ptr() as u64,
                device: DLDevice { device_type: KDL_CPU, device_id: 0 },
                dtype: i64t,
                shape: vec![n],
            },
            (Images::Device(d), part) => {
                let device = DLDevice { device_type: KDL_CUDA, device_id: d.context().ordinal() as i32 };
                match (part, d.targets_ptr()) {
                    (Part::Images | Part::View(_) | Part::Group(_), _) => {
                        View { owner, data: d.images_ptr() + offset, device, dtype, shape: img_shape }
                    }
                    (Part::Labels, Some(t)) => View {
                        owner,
                        data: t,
                        device,
                        dtype: DLDataType { code: KDL_FLOAT, bits: 32, lanes: 1 },
                        shape: vec![n, d.num_classes() as i64],
                    },
                    (Part::Labels, None) => View { owner, data: d.labels_ptr(), device, dtype: i64t, shape: vec![n] },
                }
            }
        }
    }
}

#[pymethods]
impl Tensor {
    /// DLPack export (Python array API). On CUDA, `stream` (an int handle; 1 = legacy default,
    /// 2 = per-thread default, None = legacy default, -1 = no synchronisation) is made to wait
    /// on the batch's ready event on the device: the host never waits.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<i64>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<PyObject> {
        let view = self.view();
        dlpack::check_request(view.device, dl_device, copy)?;
        let b = held(&self.batch);
        if matches!(&b.images, Images::Host(_)) && self.part != Part::Labels && b.host_bytes().is_none() {
            // A decode-only batch (`decode_only=True`: decoded, not augmented) holds no images;
            // its shape is the pipeline's, its buffer empty: nothing to export.
            return Err(PyValueError::new_err(
                "this batch holds no images: decode_only=True decodes each sample and skips the augment (a \
                 decoder-only measurement); its labels are there, its images are not",
            ));
        }
        if let Images::Device(d) = &held(&self.batch).images {
            let s = stream.unwrap_or(1);
            if s == 0 {
                return Err(PyValueError::new_err("stream=0 is ambiguous for CUDA in the DLPack protocol; pass 1 (legacy default), 2 (per-thread default) or a stream handle"));
            }
            if s == -1 {
                // The consumer orders its own reads (DLPack: -1 asks for no synchronisation);
                // stoke still must not reuse the slot before they are done.
                d.consumer_unordered();
            } else {
                // SAFETY: the consumer passed a stream of its own on this device (the protocol's
                // contract); it outlives the tensor, whose release is recorded on it (`2`, the
                // per-thread default stream, only from this thread: DeviceImages' drop).
                unsafe { d.wait_on_raw(s as usize as cudarc::driver::sys::CUstream) }
                    .map_err(|e| PyRuntimeError::new_err(format!("making stream {s:#x} wait for the batch: {e}")))?;
            }
        } else if stream.is_some_and(|s| s != -1) {
            return Err(PyValueError::new_err(format!("stream={stream:?} was given for a CPU tensor (the protocol wants None)")));
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::capsule(py, view, versioned)
    }

    /// `(device_type, device_id)`: `(1, 0)` for CPU, `(2, ordinal)` for CUDA.
    fn __dlpack_device__(&self) -> (i32, i32) {
        let d = self.view().device;
        (d.device_type, d.device_id)
    }

    /// Shape as a tuple.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.view().shape
    }

    /// Element type name: "float32", "float16", "bfloat16", "uint8" or "int64".
    #[getter]
    fn dtype(&self) -> &'static str {
        match (self.part, held(&self.batch).dtype) {
            (Part::Labels, _) => "int64",
            (_, DType::F32) => "float32",
            (_, DType::F16) => "float16",
            (_, DType::Bf16) => "bfloat16",
            (_, DType::U8) => "uint8",
        }
    }

    /// "cpu" or "cuda:N".
    #[getter]
    fn device(&self) -> String {
        let d = self.view().device;
        if d.device_type == KDL_CUDA {
            format!("cuda:{}", d.device_id)
        } else {
            "cpu".into()
        }
    }

    fn __repr__(&self) -> String {
        format!("stoke.Tensor(shape={:?}, dtype={}, device={})", self.shape(), self.dtype(), self.device())
    }

    /// A view's whole group as one tensor `[count · N, ...]` (views of one size, view-major),
    /// with no copy: DINO's loop runs one forward per resolution on it. `None` for the images
    /// of a batch without `views` and for labels.
    #[getter]
    fn group(&self, py: Python<'_>) -> PyResult<Option<Py<Tensor>>> {
        match self.part {
            Part::View(v) => {
                let g = held(&self.batch).view_places()[v].group;
                Ok(Some(Py::new(py, Tensor { batch: self.batch.clone(), part: Part::Group(g) })?))
            }
            _ => Ok(None),
        }
    }
}

/// A sample replaced under `on_error='skip'`.
struct Replaced {
    key: String,
    location: String,
    position: u64,
    reason: String,
    kind: &'static str,
}

/// What the next `iter()` starts.
#[derive(Clone, Debug)]
enum Next {
    /// An epoch from its first batch.
    Fresh(u64),
    /// The rest of an epoch, from a loaded state.
    Resume(Box<ResumeState>),
}

/// Batches of augmented images and int64 labels from a dataset (see `stoke.Loader`).
///
/// Sendable: a second thread that calls into it while one is iterating gets a named error
/// (the borrow check in `EpochIter::__next__`), not PyO3's unsendable panic.
#[pyclass(module = "stoke")]
struct Loader {
    /// Dropped by `Drop for Loader`, which leaves it alone in a forked child (its threads did
    /// not come with the fork: joining them would wait forever).
    pipeline: std::mem::ManuallyDrop<Pipeline>,
    /// The process that made it.
    pid: u32,
    config: PipelineConfig,
    back: Sender<Batch>,
    returned: Receiver<Batch>,
    held: Arc<AtomicUsize>,
    max_held: usize,
    /// What the next `iter()` starts: `set_epoch`/`load_state_dict`, else the epoch after the
    /// last one started.
    next: Next,
    /// Whether an epoch is running (the pipeline knows which, and where it stands).
    running: bool,
    /// Bumped by every `iter()`: an older epoch iterator stops.
    generation: u64,
    errors: Arc<Mutex<Vec<Replaced>>>,
}

fn to_py_err(e: stoke::Error) -> PyErr {
    match e {
        e @ stoke::Error::Sample { .. } => SampleError::new_err(e.to_string()),
        e @ stoke::Error::Config(_) => PyValueError::new_err(e.to_string()),
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (source, batch_size, **options))]
    fn new(py: Python<'_>, source: PathBuf, batch_size: usize, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let empty = PyDict::new_bound(py);
        let o = options.unwrap_or(&empty);
        let (config, max_held, epoch) = build_config(source, batch_size, o)?;
        let want_cuda = config.backend == BackendKind::Cuda;
        let pipeline = Pipeline::new(config.clone()).map_err(|e| match e {
            stoke::Error::Gpu(g) if want_cuda => PyRuntimeError::new_err(format!("device='cuda' but no usable GPU: {g}")),
            e => to_py_err(e),
        })?;
        let (back, returned) = channel();
        Ok(Self {
            pipeline: std::mem::ManuallyDrop::new(pipeline),
            pid: std::process::id(),
            config,
            back,
            returned,
            held: Arc::new(AtomicUsize::new(0)),
            max_held,
            next: Next::Fresh(epoch),
            running: false,
            generation: 0,
            errors: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// Batches this rank delivers per epoch (DistributedSampler's padding / drop_last).
    fn __len__(&self) -> usize {
        self.pipeline.steps_per_epoch() as usize
    }

    /// Start an epoch: the one given to `set_epoch` or a loaded state, else the next. The
    /// returned iterator yields `(images, labels)`; an older one stops once a newer starts.
    fn __iter__(this: &Bound<'_, Self>) -> PyResult<EpochIter> {
        let mut slf = this.try_borrow_mut().map_err(|_| in_use())?;
        slf.same_process()?;
        let next = slf.next.clone();
        let epoch = match next {
            Next::Fresh(e) => {
                slf.pipeline.start_epoch(e, 0);
                e
            }
            Next::Resume(state) => {
                slf.pipeline.resume(&state).map_err(to_py_err)?;
                state.epoch
            }
        };
        slf.running = true;
        slf.next = Next::Fresh(epoch + 1);
        slf.generation += 1;
        let generation = slf.generation;
        Ok(EpochIter { loader: slf.into(), generation })
    }

    /// The epoch the next `iter()` starts (from its first batch).
    fn set_epoch(&mut self, epoch: u64) {
        self.next = Next::Fresh(epoch);
    }

    /// Where this loader is, JSON-serialisable and the same on every rank: the epoch and the
    /// positions of it no rank has delivered yet (version 2; see the Rust docs of
    /// `stoke::state`). `load_state_dict` continues from it at any world size and batch size.
    fn state_dict(&self, py: Python<'_>) -> PyResult<PyObject> {
        let state = match (&self.next, self.running) {
            (_, true) => self.pipeline.state(),
            (Next::Fresh(e), false) => self.pipeline.fresh_state(*e),
            (Next::Resume(s), false) => (**s).clone(),
        };
        Ok(py.import_bound("json")?.call_method1("loads", (state.to_json(),))?.into())
    }

    /// Resume at a state from `state_dict()` of this loader or of any rank of a run over the same
    /// data set, seed, shuffle, sampling and stream group, at any world size and batch size: the
    /// next `iter()` delivers this rank's share of the rest of the saved epoch (the same batches
    /// as the uninterrupted run when the world size is the same). A version 1 state (epoch and
    /// step of a world that started the epoch fresh) is converted.
    fn load_state_dict(&mut self, py: Python<'_>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let text: String = py.import_bound("json")?.call_method1("dumps", (state,))?.extract()?;
        let state = if state.contains("remaining")? { ResumeState::from_json(&text).map_err(to_py_err)? } else { self.state_v1(state)? };
        self.pipeline.check_state(&state).map_err(to_py_err)?;
        self.next = Next::Resume(Box::new(state));
        self.running = false;
        Ok(())
    }

    /// This process's rank.
    #[getter]
    fn rank(&self) -> usize {
        self.config.rank
    }

    /// Ranks in the world.
    #[getter]
    fn world_size(&self) -> usize {
        self.config.world_size
    }

    /// Samples replaced under on_error='skip': dicts of key, location, position, reason and
    /// kind (`read`, `truncated`, `corrupt`, `unknown format`, `unsupported`, `too large`,
    /// `params`, `capacity`, `device`).
    #[getter]
    fn errors(&self, py: Python<'_>) -> PyResult<PyObject> {
        let l = PyList::empty_bound(py);
        for Replaced { key, location, position, reason, kind } in self.errors.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let d = PyDict::new_bound(py);
            d.set_item("key", key)?;
            d.set_item("location", location)?;
            d.set_item("position", position)?;
            d.set_item("reason", reason)?;
            d.set_item("kind", kind)?;
            l.append(d)?;
        }
        Ok(l.into())
    }

    /// Batches currently referenced by the consumer.
    #[getter]
    fn held_batches(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// The backend running: "cpu" or "cuda".
    #[getter]
    fn backend(&self) -> &'static str {
        if self.pipeline.is_cuda() {
            "cuda"
        } else {
            "cpu"
        }
    }

    /// What `stoke bench` reports, so far: counts, seconds per stage, decoder split, bytes held.
    fn stats(&self, py: Python<'_>) -> PyResult<PyObject> {
        let s = self.pipeline.stats();
        let d = PyDict::new_bound(py);
        d.set_item("batches", s.batches)?;
        d.set_item("images", s.images)?;
        d.set_item("compressed_bytes", s.bytes)?;
        d.set_item("substitutes", s.substitutes)?;
        d.set_item("read_wait_s", s.read_wait.as_secs_f64())?;
        d.set_item("decode_s", s.decode.as_secs_f64())?;
        d.set_item("augment_s", s.augment.as_secs_f64())?;
        d.set_item("backend_s", s.backend.as_secs_f64())?;
        d.set_item("consumer_wait_s", s.consumer_wait.as_secs_f64())?;
        d.set_item("decoded_hardware", s.decoders.hardware)?;
        d.set_item("decoded_cuda", s.decoders.cuda)?;
        d.set_item("decoded_gpu_hybrid_batched", s.decoders.gpu_hybrid_batched)?;
        d.set_item("gpu_hybrid_yielded_batches", s.decoders.gpu_hybrid_yielded)?;
        d.set_item("bitstream_copies", s.decoders.bitstream_copies)?;
        d.set_item("engine_queued_ahead", s.decoders.engine_queued_ahead)?;
        d.set_item("gpu_decodes_retried", s.decoders.retried)?;
        d.set_item("decoded_cpu", s.decoders.cpu)?;
        d.set_item("device_bytes", s.device_bytes)?;
        d.set_item("pinned_bytes", s.pinned_bytes)?;
        d.set_item("nvjpeg_device_bytes", s.nvjpeg.device_bytes)?;
        d.set_item("nvjpeg_pinned_bytes", s.nvjpeg.pinned_bytes)?;
        d.set_item("nvjpeg_allocations", s.nvjpeg.allocations)?;
        d.set_item("transcoded_rewrites", s.transcoded.rewrites)?;
        d.set_item("transcoded_kept", s.transcoded.kept)?;
        d.set_item("transcoded_kept_bytes", s.transcoded.kept_bytes)?;
        d.set_item("transcoded_again", s.transcoded.again)?;
        Ok(d.into())
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            // SAFETY: dropped once, here, and never used after.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.pipeline) };
        }
        // In a forked child the pipeline's threads (producer, readers, workers) exist only in
        // the parent: its drop would wait for them forever. Its memory is the child's copy of
        // the parent's, left as it is.
    }
}

/// A second call into a Loader while one runs (another thread iterating it: the first holds
/// it while it waits for a batch, with the GIL released).
fn in_use() -> PyErr {
    PyRuntimeError::new_err(
        "this stoke.Loader is in use by another call (another thread iterating it?): one Loader serves one consumer at a time; make a Loader per thread",
    )
}

/// How often a wait for the next batch lets Python check for signals (Ctrl-C, SIGTERM's
/// handler): the longest a KeyboardInterrupt waits for a batch that is not coming.
const SIGNAL_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

impl Loader {
    /// A Loader used in a process forked after it was made (a DataLoader worker, multiprocessing's
    /// fork start method) has no pipeline threads there: refused by name instead of a wait
    /// that never ends.
    fn same_process(&self) -> PyResult<()> {
        let me = std::process::id();
        if me == self.pid {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(format!(
            "this stoke.Loader was made in process {} and is used in process {me}, forked from it (a DataLoader worker, multiprocessing's fork start method): its threads did not come with the fork; make a new stoke.Loader in this process",
            self.pid
        )))
    }

    /// A version 1 state (`epoch`, `step` of a world of `world_size` × `batch_size` that started
    /// the epoch fresh, `seed`, `stream_group`) as a version 2 one. Its data set cannot be checked
    /// (version 1 did not record it).
    fn state_v1(&self, state: &Bound<'_, PyDict>) -> PyResult<ResumeState> {
        let get = |k: &str| -> PyResult<u64> {
            state
                .get_item(k)?
                .ok_or_else(|| PyValueError::new_err(format!("state_dict has no {k:?}")))?
                .extract::<u64>()
                .map_err(|_| PyValueError::new_err(format!("state_dict[{k:?}] must be a non-negative integer")))
        };
        let mut s = self.pipeline.fresh_state(get("epoch")?);
        let theirs = get("seed")?;
        if theirs != s.order.seed {
            return Err(PyValueError::new_err(format!(
                "state_dict was saved with seed {theirs}, this loader has seed {}: its epoch order would differ",
                s.order.seed
            )));
        }
        // States saved before stream mode existed have no stream_group: the per-sample order.
        let theirs = if state.contains("stream_group")? { get("stream_group")? } else { 0 };
        if theirs != s.order.stream_group {
            return Err(PyValueError::new_err(format!(
                "state_dict was saved with stream_group {theirs}, this loader has stream_group {} (0: not streaming): its epoch order would differ",
                s.order.stream_group
            )));
        }
        (s.world_size, s.batch_size, s.step) = (get("world_size")? as usize, get("batch_size")? as usize, get("step")?);
        s.rest = self.pipeline.rest_after(s.world_size, s.batch_size, s.step).map_err(to_py_err)?;
        Ok(s)
    }

    /// The next batch of the running epoch, `None` at its end.
    fn next_item(&mut self, py: Python<'_>) -> PyResult<Option<(PyObject, Py<Tensor>)>> {
        self.same_process()?;
        if !self.running {
            return Ok(None);
        }
        while let Ok(b) = self.returned.try_recv() {
            self.pipeline.recycle(b);
        }
        let held = self.held.load(Ordering::SeqCst);
        if held >= self.max_held {
            return Err(PyRuntimeError::new_err(format!(
                "{held} batches are still referenced (max_held_batches={}): drop some (e.g. `del images, labels`) or build the Loader with a larger max_held_batches",
                self.max_held
            )));
        }
        // Waiting with the GIL released, and checking for signals every SIGNAL_CHECK: Ctrl-C
        // raises KeyboardInterrupt at once, whatever the pipeline is waiting for; the batch it
        // waited for comes with the next call.
        let pipeline = &mut *self.pipeline;
        let item = py.allow_threads(|| pipeline.next_batch_unless(Some(SIGNAL_CHECK), || Python::with_gil(|py| py.check_signals())))?;
        let batch = match item {
            None => {
                self.running = false;
                return Ok(None);
            }
            Some(Err(e)) => {
                self.running = false;
                return Err(to_py_err(e));
            }
            Some(Ok(b)) => b,
        };
        {
            let mut errs = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            for s in &batch.substitutes {
                errs.push(Replaced {
                    key: s.key.clone(),
                    location: s.location.clone(),
                    position: s.position,
                    reason: s.reason.clone(),
                    kind: s.error.kind(),
                });
            }
        }
        self.held.fetch_add(1, Ordering::SeqCst);
        let h = Arc::new(Held { batch: Some(batch), back: self.back.clone(), held: self.held.clone() });
        // With `views`: a list of one tensor per view, in group order (views into one buffer).
        let images = if self.config.views.is_empty() {
            Py::new(py, Tensor { batch: h.clone(), part: Part::Images })?.into_py(py)
        } else {
            let views = (0..self.config.view_count())
                .map(|v| Py::new(py, Tensor { batch: h.clone(), part: Part::View(v) }))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new_bound(py, views).into_py(py)
        };
        let labels = Py::new(py, Tensor { batch: h, part: Part::Labels })?;
        Ok(Some((images, labels)))
    }
}

/// One epoch of a [`Loader`] (what `iter(loader)` returns).
#[pyclass(module = "stoke")]
struct EpochIter {
    loader: Py<Loader>,
    generation: u64,
}

#[pymethods]
impl EpochIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(PyObject, Py<Tensor>)>> {
        let mut l = self.loader.bind(py).try_borrow_mut().map_err(|_| in_use())?;
        if l.generation != self.generation {
            return Ok(None); // a newer iter() took over this loader
        }
        l.next_item(py)
    }

    /// Batches this epoch delivers: a resumed epoch's rest may be shorter than `len(loader)`.
    fn __len__(&self, py: Python<'_>) -> usize {
        self.loader.borrow(py).pipeline.steps_now() as usize
    }
}

#[pymodule]
fn _stoke(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Loader>()?;
    m.add_class::<Tensor>()?;
    m.add_class::<EpochIter>()?;
    m.add("SampleError", m.py().get_type_bound::<SampleError>())?;
    m.add("DLPACK_VERSION", dlpack::VERSION)?;
    // The CPU decoder (libjpeg-turbo) was built with its SIMD code (nasm), and the advice when not.
    m.add("JPEG_SIMD", stoke::backend::cpu::decode::jpeg_simd())?;
    m.add("NO_SIMD_ADVICE", stoke::backend::cpu::decode::NO_SIMD_ADVICE)?;
    Ok(())
}
