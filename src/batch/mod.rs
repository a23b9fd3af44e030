//! `Batch`: what the trainer receives — the output tensor (host or device), labels, shape,
//! dtype, layout, and for every slot where its pixels came from.
//!
//! Slot `i` of a batch holds the sample at epoch position `positions[i]`. When that sample
//! could not be read or decoded under `on_error = skip`, the slot holds a copy of the next
//! good sample of the same batch (cyclic): its pixels, `params[i]`, `labels[i]` and
//! `indices[i]` are the replacement's, and a [`Substitute`] records what happened.

use crate::augment::views::{view_offsets, GroupShape, ViewPlace};
use crate::augment::AugParams;
use crate::config::{DType, Layout};
use crate::error::SlotError;

/// The batch tensor's storage.
#[derive(Debug)]
pub enum Images {
    /// Host memory: `shape` elements of `dtype`, in a vector of that type (read and written as
    /// little-endian bytes; a framework tensor can take the vector without a copy).
    Host(HostImages),
    /// Device memory: one slot of the CUDA backend's output ring, with the labels beside the
    /// images. Read it on your stream after [`DeviceImages::wait_on`]; dropping it (with the
    /// batch) returns the slot. The lifetime rules are on [`DeviceImages`].
    Device(Box<DeviceImages>),
}

#[cfg(feature = "candle")]
mod candle;
pub(crate) mod device;
mod host;
pub use device::DeviceImages;
pub use host::HostImages;

/// A sample that was replaced (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Substitute {
    /// Slot in the batch.
    pub slot: usize,
    /// Epoch position of the sample that failed.
    pub position: u64,
    /// Dataset index of the sample that failed.
    pub index: usize,
    /// Its key.
    pub key: String,
    /// Where its bytes live (the file, or the shard and byte offset).
    pub location: String,
    /// Why it failed: the error's text (no file name: that is `location`).
    pub reason: String,
    /// Why it failed, typed (its [`SlotError::kind`] is what a policy or a statistic reads;
    /// serialized as that kind, under `kind`).
    #[serde(rename = "kind", serialize_with = "serialize_kind")]
    pub error: SlotError,
    /// Dataset index of the sample delivered in its place.
    pub replaced_by: usize,
    /// Key of the sample delivered in its place.
    pub replaced_by_key: String,
}

fn serialize_kind<S: serde::Serializer>(e: &SlotError, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(e.kind())
}

/// Which decoder decoded how many samples. Samples that failed (and were replaced by a
/// substitute) are not counted; the CPU backend decodes everything on the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecoderCounts {
    /// Decoded by the GPU's hardware JPEG engine.
    pub hardware: u64,
    /// Decoded by nvJPEG's CUDA decoders.
    pub cuda: u64,
    /// Decoded by nvJPEG's GPU-assisted hybrid decoder in one batched call beside the
    /// hardware engine (its share of the engine's images; `gpu_hybrid_share`).
    pub gpu_hybrid_batched: u64,
    /// Decoded on the CPU (the CPU backend, or the CUDA backend's CPU route and retries).
    pub cpu: u64,
    /// GPU decodes that failed, or reported success but left canaries unwritten, and were
    /// decoded again on the CPU (counted in `cpu` when that succeeded). Never on the CPU backend.
    pub retried: u64,
    /// Batches (not images) in which the batched GPU-hybrid route's `auto` share yielded its
    /// SMs to the trainer: a batch stoke made was waiting for it (`gpu_hybrid_share`).
    pub gpu_hybrid_yielded: u64,
    /// Host-to-device copies of the hardware engine's bitstreams (`gpu_bitstream = device`:
    /// one per batch whose bytes lie in one place; 0 while the engine reads host bytes).
    pub bitstream_copies: u64,
    /// Batches (not images) whose hardware-engine calls were queued on the engine's thread
    /// while the batch before them decoded (`gpu_engine_ahead`); 0 without it.
    pub engine_queued_ahead: u64,
}

impl DecoderCounts {
    /// Samples decoded by any decoder.
    pub fn total(&self) -> u64 {
        self.hardware + self.cuda + self.gpu_hybrid_batched + self.cpu
    }
}

impl std::ops::AddAssign for DecoderCounts {
    fn add_assign(&mut self, o: Self) {
        self.hardware += o.hardware;
        self.cuda += o.cuda;
        self.gpu_hybrid_batched += o.gpu_hybrid_batched;
        self.cpu += o.cpu;
        self.retried += o.retried;
        self.gpu_hybrid_yielded += o.gpu_hybrid_yielded;
        self.bitstream_copies += o.bitstream_copies;
        self.engine_queued_ahead += o.engine_queued_ahead;
    }
}

/// One batch of augmented samples.
#[derive(Debug)]
pub struct Batch {
    /// The tensor.
    pub images: Images,
    /// Class labels, one per slot.
    pub labels: Vec<i64>,
    /// `[N, 3, H, W]` (NCHW) or `[N, H, W, 3]` (NHWC): the shape of the first view (the only
    /// one without `views`).
    pub shape: [usize; 4],
    /// The view groups in the images, one after another, each view-major
    /// ([`crate::augment::views`]); one group of one view without `views`.
    pub groups: Vec<GroupShape>,
    /// Element type.
    pub dtype: DType,
    /// Memory layout.
    pub layout: Layout,
    /// Epoch.
    pub epoch: u64,
    /// Step within the epoch.
    pub step: u64,
    /// Epoch position of each slot.
    pub positions: Vec<u64>,
    /// Dataset index of the sample whose pixels are in each slot.
    pub indices: Vec<usize>,
    /// Augment parameters applied to each slot: [`Batch::views`] per slot, slot by slot (one
    /// per slot without `views`).
    pub params: Vec<AugParams>,
    /// Slots whose sample was replaced.
    pub substitutes: Vec<Substitute>,
    /// Stream mode: the key of the sample whose pixels are in each slot (there is no
    /// per-sample index to look `indices` up in). Empty otherwise: use
    /// [`crate::pipeline::Pipeline::dataset`].
    pub keys: Vec<String>,
    /// Which decoder decoded how many of this batch's samples.
    pub decoders: DecoderCounts,
    /// Soft targets `[N, num_classes]` (row-major f32) when Mixup/CutMix is on
    /// ([`crate::config::MixupSpec`]); empty otherwise (the labels are then the targets).
    pub targets: Vec<f32>,
    /// Columns of `targets` (0 when empty).
    pub num_classes: usize,
}

impl Batch {
    /// An empty host batch of `dtype`/`layout` (buffers grow on first use, then are reused).
    pub fn new_host(dtype: DType, layout: Layout) -> Self {
        Self {
            images: Images::Host(HostImages::new(dtype)),
            labels: Vec::new(),
            shape: [0; 4],
            groups: Vec::new(),
            dtype,
            layout,
            epoch: 0,
            step: 0,
            positions: Vec::new(),
            indices: Vec::new(),
            params: Vec::new(),
            substitutes: Vec::new(),
            keys: Vec::new(),
            decoders: DecoderCounts::default(),
            targets: Vec::new(),
            num_classes: 0,
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.shape[0]
    }

    /// True when the batch holds no sample.
    pub fn is_empty(&self) -> bool {
        self.shape[0] == 0
    }

    /// Output `(height, width)`.
    pub fn image_size(&self) -> (usize, usize) {
        match self.layout {
            Layout::Nchw => (self.shape[2], self.shape[3]),
            Layout::Nhwc => (self.shape[1], self.shape[2]),
        }
    }

    /// Bytes of one sample of the first view (the only one without `views`).
    pub fn sample_bytes(&self) -> usize {
        self.shape[1] * self.shape[2] * self.shape[3] * self.dtype.size()
    }

    /// Views of each sample (1 without `views`).
    pub fn views(&self) -> usize {
        self.groups.iter().map(|g| g.count).sum::<usize>().max(1)
    }

    /// Where each view lies in the images ([`crate::augment::views::view_offsets`]).
    pub fn view_places(&self) -> Vec<ViewPlace> {
        view_offsets(&self.groups, self.len(), self.dtype.size())
    }

    /// Bytes of all the images: every view of every sample.
    pub fn images_bytes(&self) -> usize {
        self.groups.iter().map(|g| g.count * self.len() * g.sample_elements()).sum::<usize>() * self.dtype.size()
    }

    /// The shape of a tensor of `n` images of `w × h` in this batch's layout.
    pub fn shape_of(&self, n: usize, w: usize, h: usize) -> [usize; 4] {
        match self.layout {
            Layout::Nchw => [n, 3, h, w],
            Layout::Nhwc => [n, h, w, 3],
        }
    }

    /// The tensor bytes when the batch is on the host (`None` for a device batch, and for a
    /// host batch whose images a tensor took, `Batch::take_candle`, feature `candle`): every
    /// view, group after group.
    pub fn host_bytes(&self) -> Option<&[u8]> {
        match &self.images {
            Images::Host(v) => v.get(..self.images_bytes()),
            Images::Device(_) => None,
        }
    }

    /// Bring a device batch to the host (waits for it to be ready, copies the tensor, returns
    /// the ring slot); a host batch is left as it is. For tools that read pixels on the CPU
    /// (`dump`, `preview`) whatever backend made the batch.
    pub fn make_host(&mut self) -> crate::error::Result<()> {
        if let Images::Device(d) = &self.images {
            let v = d.to_host_images()?;
            d.copy_targets_to_host(&mut self.targets)?;
            self.images = Images::Host(v);
        }
        Ok(())
    }

    /// The device tensor when the batch is on the GPU.
    pub fn device(&self) -> Option<&DeviceImages> {
        match &self.images {
            Images::Device(d) => Some(d),
            Images::Host(_) => None,
        }
    }

    /// Sample `i`'s value at channel `c`, row `y`, column `x` as f32 (host batches only).
    pub fn value(&self, i: usize, c: usize, y: usize, x: usize) -> Option<f32> {
        let (h, w) = self.image_size();
        let e = match self.layout {
            Layout::Nchw => ((i * 3 + c) * h + y) * w + x,
            Layout::Nhwc => ((i * h + y) * w + x) * 3 + c,
        };
        let b = self.host_bytes()?;
        Some(match self.dtype {
            DType::F32 => f32::from_le_bytes(b[4 * e..4 * e + 4].try_into().ok()?),
            DType::F16 => half::f16::from_le_bytes([b[2 * e], b[2 * e + 1]]).to_f32(),
            DType::Bf16 => half::bf16::from_le_bytes([b[2 * e], b[2 * e + 1]]).to_f32(),
            DType::U8 => b[e] as f32,
        })
    }

    /// Set the shape for `n` samples of one view of `w × h` in this batch's layout.
    pub fn set_shape(&mut self, n: usize, w: usize, h: usize) {
        self.set_views(n, &[GroupShape { count: 1, width: w, height: h }]);
    }

    /// Set the shape for `n` samples of the views of `groups` (the first view's shape is
    /// `shape`).
    pub fn set_views(&mut self, n: usize, groups: &[GroupShape]) {
        let first = groups.first().copied().unwrap_or_default();
        self.shape = self.shape_of(n, first.width, first.height);
        self.groups.clear();
        self.groups.extend_from_slice(groups);
    }
}
