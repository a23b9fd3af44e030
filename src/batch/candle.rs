//! A batch as candle tensors (feature `candle`).
//!
//! `(images, targets)`: the images `[N, 3, H, W]` (NCHW) or `[N, H, W, 3]` (NHWC) in the
//! batch's element type (`U8`, `F16`, `BF16`, `F32`), and the targets: the labels `[N]` as
//! `I64`, or under Mixup/CutMix the soft targets `[N, classes]` as `F32` (what timm's `Mixup`
//! returns in place of the labels; train with a soft cross-entropy).
//!
//! A batch with several views per sample (`views`, [`crate::augment::views`]) gives one tensor
//! per view through the `*_views` methods: each a view (candle `narrow` + `reshape`, no copy)
//! into the one tensor that holds every view's images, group after group.

use super::{Batch, HostImages, Images};
#[cfg(feature = "candle-cuda")]
use crate::config::DType;
use crate::error::{Error, Result};
use candle_core::{Device, Tensor};

impl Batch {
    /// The batch as CPU tensors, **taking** its vectors: candle's CPU storage is a `Vec` of the
    /// element type, and a host batch holds exactly that ([`HostImages`]), so neither the
    /// images nor the targets are copied. The batch keeps its records (`positions`, `keys`,
    /// `substitutes`, ...) but no longer its pixels, labels or soft targets; give it back with
    /// [`crate::Pipeline::recycle`] as usual (its next use allocates new vectors: the tensors
    /// own the old ones).
    ///
    /// A device batch (the CUDA backend) is refused: [`Batch::to_candle`] copies it to the host.
    pub fn take_candle(&mut self) -> Result<(Tensor, Tensor)> {
        self.one_view("take_candle")?;
        self.take_candle_all()
    }

    /// [`Batch::take_candle`] for a batch of several views: one tensor per view, in view order
    /// (views into one CPU tensor; a batch of one view gives one).
    pub fn take_candle_views(&mut self) -> Result<(Vec<Tensor>, Tensor)> {
        let (images, targets) = self.take_candle_all()?;
        Ok((self.views_of(&images)?, targets))
    }

    /// Every view's images in one tensor (`shape` for one view, 1-D for several), and the
    /// targets; what [`Batch::take_candle`] documents.
    fn take_candle_all(&mut self) -> Result<(Tensor, Tensor)> {
        let (n, bytes, dtype) = (self.len(), self.images_bytes(), self.dtype);
        let elements = bytes / dtype.size();
        let images =
            match &mut self.images {
                Images::Host(h) if h.len() >= bytes => std::mem::replace(h, HostImages::new(dtype)),
                Images::Host(_) => return Err(Error::Usage("take_candle: this batch's images were already taken by a tensor".into())),
                Images::Device(_) => return Err(Error::Usage(
                    "take_candle: a device batch (the CUDA backend) cannot become a CPU tensor without a copy; use to_candle(&Device::Cpu)"
                        .into(),
                )),
            };
        let shape = self.images_shape();
        let images = match images {
            HostImages::U8(v) => cpu_tensor(v, elements, shape)?,
            HostImages::F16(v) => cpu_tensor(v, elements, shape)?,
            HostImages::Bf16(v) => cpu_tensor(v, elements, shape)?,
            HostImages::F32(v) => cpu_tensor(v, elements, shape)?,
        };
        let targets = if self.num_classes > 0 {
            let mut t = std::mem::take(&mut self.targets);
            t.truncate(n * self.num_classes);
            Tensor::from_vec(t, (n, self.num_classes), &Device::Cpu)?
        } else {
            let mut l = std::mem::take(&mut self.labels);
            l.truncate(n);
            Tensor::from_vec(l, n, &Device::Cpu)?
        };
        Ok((images, targets))
    }

    /// The batch as tensors on `device`, **copied** (the batch is left as it is): a host batch
    /// with one copy; a device batch is brought to the host first (it waits for the batch to be
    /// ready).
    pub fn to_candle(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        self.one_view("to_candle")?;
        self.to_candle_all(device)
    }

    /// [`Batch::to_candle`] for a batch of several views: one tensor per view, in view order
    /// (views into one tensor on `device`).
    pub fn to_candle_views(&self, device: &Device) -> Result<(Vec<Tensor>, Tensor)> {
        let (images, targets) = self.to_candle_all(device)?;
        Ok((self.views_of(&images)?, targets))
    }

    fn to_candle_all(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let n = self.len();
        let (bytes, elements) = (self.images_bytes(), self.images_bytes() / self.dtype.size());
        let mut copied = None;
        let mut targets = None;
        let host = match &self.images {
            Images::Host(h) if h.len() >= bytes => h,
            Images::Host(_) => return Err(Error::Usage("to_candle: this batch's images were taken by a tensor (take_candle)".into())),
            Images::Device(d) => {
                let h = d.to_host_images()?;
                if self.num_classes > 0 {
                    let mut t = Vec::new();
                    d.copy_targets_to_host(&mut t)?;
                    targets = Some(t);
                }
                copied.insert(h)
            }
        };
        let shape = self.images_shape();
        let images = match host {
            HostImages::U8(v) => Tensor::from_slice(&v[..elements], shape, device)?,
            HostImages::F16(v) => Tensor::from_slice(&v[..elements], shape, device)?,
            HostImages::Bf16(v) => Tensor::from_slice(&v[..elements], shape, device)?,
            HostImages::F32(v) => Tensor::from_slice(&v[..elements], shape, device)?,
        };
        let targets = if self.num_classes > 0 {
            let t = targets.as_ref().unwrap_or(&self.targets);
            let len = n * self.num_classes;
            let t = t
                .get(..len)
                .ok_or_else(|| Error::Usage("to_candle: this batch's soft targets were taken by a tensor (take_candle)".into()))?;
            Tensor::from_slice(t, (n, self.num_classes), device)?
        } else {
            let l = self
                .labels
                .get(..n)
                .ok_or_else(|| Error::Usage("to_candle: this batch's labels were taken by a tensor (take_candle)".into()))?;
            Tensor::from_slice(l, n, device)?
        };
        Ok((images, targets))
    }
}

impl Batch {
    /// An error naming `call` and the `_views` method to use when the batch has several views.
    fn one_view(&self, call: &str) -> Result<()> {
        match self.views() {
            1 => Ok(()),
            v => Err(Error::Usage(format!("{call}: this batch has {v} views of each sample; {call}_views gives one tensor per view"))),
        }
    }

    /// The shape of the tensor of every view's images: `shape` for one view, 1-D for several.
    fn images_shape(&self) -> Vec<usize> {
        if self.views() == 1 {
            self.shape.to_vec()
        } else {
            vec![self.images_bytes() / self.dtype.size()]
        }
    }

    /// Each view of `images` (every view's images, as `images_shape` shapes them) as its own
    /// `[N, C, H, W]` (or NHWC) tensor sharing its storage.
    fn views_of(&self, images: &Tensor) -> Result<Vec<Tensor>> {
        let flat = images.flatten_all()?;
        let size = self.dtype.size();
        self.view_places()
            .iter()
            .map(|p| {
                let shape = self.shape_of(self.len(), p.width, p.height).to_vec();
                Ok(flat.narrow(0, p.offset / size, self.len() * p.sample_bytes / size)?.reshape(shape)?)
            })
            .collect()
    }
}

/// A CPU tensor that takes `v` (its first `elements` values) without a copy.
fn cpu_tensor<T: candle_core::WithDType>(mut v: Vec<T>, elements: usize, shape: Vec<usize>) -> candle_core::Result<Tensor> {
    v.truncate(elements);
    Tensor::from_vec(v, shape, &Device::Cpu)
}

#[cfg(feature = "candle-cuda")]
impl Batch {
    /// A device batch (the CUDA backend) as candle CUDA tensors on `device`, the images
    /// **without a copy**: the image tensor's storage is the batch's own output-ring memory,
    /// which leaves the ring with it (the ring's slot gets a new allocation from the ring's
    /// memory pool) and goes back to that pool when the last tensor using it is dropped (candle
    /// frees it, stream-ordered on its stream). The targets — labels `[N]` `I64`, or the soft
    /// targets `[N, classes]` `F32` under Mixup/CutMix — are copied on the device into memory of
    /// candle's (2 KiB of labels for 256 images; `N × classes × 4` bytes of soft targets).
    ///
    /// Ordering: candle's stream waits (on the device) for the batch's ready event before
    /// anything of candle's reads it; the host does not block.
    ///
    /// Bound: a batch taken this way counts as held until its memory is freed, exactly like a
    /// [`crate::DeviceImages`]: with `ring_depth` batches held, [`crate::Pipeline::next_batch`]
    /// returns [`Error::HeldBatches`] instead of a batch.
    ///
    /// `device` must be a candle CUDA device on the same GPU (its primary context). **Without a
    /// copy only on a device with a stream of its own**, as
    /// `Device::Cuda(candle_core::CudaDevice::new_with_stream(ordinal)?)` makes: the tensor's
    /// memory is freed on that stream wherever it is dropped. `Device::new_cuda(ordinal)` works
    /// on the per-thread default stream, and a free enqueued there goes to the stream of the
    /// thread that drops the tensor — unordered with the work of the thread that used it, and
    /// failing silently on a thread with no current context (the slot would stay held for good).
    /// So on such a device (and on the legacy default stream) the images are **copied** on the
    /// device into memory of candle's (one batch-sized copy, enqueued on candle's stream after it
    /// waited for the batch), and the batch's slot goes back to the ring at once.
    ///
    /// The batch keeps its records; its pixels and targets are gone (recycle it as usual).
    /// Refused, with the batch unchanged: a host batch (use [`Batch::take_candle`]), a CPU or
    /// other device, a device without stream-ordered memory pools.
    pub fn take_candle_cuda(&mut self, device: &Device) -> Result<(Tensor, Tensor)> {
        self.one_view("take_candle_cuda")?;
        self.take_candle_cuda_all(device)
    }

    /// [`Batch::take_candle_cuda`] for a batch of several views: one tensor per view, in view
    /// order, views into the one tensor that owns the batch's memory (or its copy).
    pub fn take_candle_cuda_views(&mut self, device: &Device) -> Result<(Vec<Tensor>, Tensor)> {
        let (images, targets) = self.take_candle_cuda_all(device)?;
        Ok((self.views_of(&images)?, targets))
    }

    fn take_candle_cuda_all(&mut self, device: &Device) -> Result<(Tensor, Tensor)> {
        use candle_core::backend::BackendStorage;
        use candle_core::cuda_backend::{CudaStorage, CudaStorageSlice};
        use candle_core::op::BackpropOp;
        use candle_core::Storage;

        let Device::Cuda(cd) = device else {
            return Err(Error::Usage(format!("take_candle_cuda: {device:?} is not a candle CUDA device; use take_candle for CPU tensors")));
        };
        let d = match &self.images {
            Images::Device(d) => d,
            Images::Host(h) if h.is_empty() => {
                return Err(Error::Usage("take_candle_cuda: this batch's images were already taken by a tensor".into()))
            }
            Images::Host(_) => {
                return Err(Error::Usage(
                    "take_candle_cuda: a host batch (the CPU backend); take_candle gives it as CPU tensors without a copy".into(),
                ))
            }
        };
        let stream = cd.cuda_stream();
        if stream.context().cu_ctx() != d.context().cu_ctx() {
            return Err(Error::Usage(format!(
                "take_candle_cuda: the candle device is CUDA device {} and the batch is on CUDA device {} (another context): make the candle device with Device::new_cuda({})",
                stream.context().ordinal(),
                d.context().ordinal(),
                d.context().ordinal()
            )));
        }
        if !d.can_hand_over() {
            return Err(Error::Usage(
                "take_candle_cuda: this device has no stream-ordered memory pools, so the batch's memory cannot leave the ring; use to_candle (a copy)".into(),
            ));
        }
        let (n, dtype, classes) = (self.len(), self.dtype, self.num_classes);
        let elements = self.images_bytes() / dtype.size();
        let gpu =
            |e: cudarc::driver::DriverError| Error::Gpu(crate::error::GpuError::Cuda { call: "cuMemAllocAsync", message: e.to_string() });
        // Candle's stream waits for the batch, and the slot's release is recorded on it.
        d.wait_on(&stream)?;
        // The targets, copied on candle's stream into candle's own memory.
        let targets = if classes > 0 {
            let src = d.targets_ptr().expect("soft targets with classes > 0");
            // SAFETY (both allocations): uninitialised, and written whole by the copy enqueued
            // right after on the same stream, before anything can read them.
            let mut t = unsafe { stream.alloc::<f32>(n * classes) }.map_err(gpu)?;
            copy_on(&stream, &mut t, src)?;
            CudaStorageSlice::F32(t)
        } else {
            let mut l = unsafe { stream.alloc::<i64>(n) }.map_err(gpu)?;
            copy_on(&stream, &mut l, d.labels_ptr())?;
            CudaStorageSlice::I64(l)
        };
        let targets = CudaStorage { slice: targets, device: cd.clone() };
        let tshape: Vec<usize> = if classes > 0 { vec![n, classes] } else { vec![n] };
        let targets = Tensor::from_storage(Storage::Cuda(targets), tshape, BackpropOp::none(), false);
        if stream_follows_the_thread(&stream) {
            // The images copied into candle's memory, on candle's stream (which waited for the
            // batch above); the slot's release is recorded on that stream when `d` is dropped.
            let images = match dtype {
                DType::U8 => CudaStorageSlice::U8(copied(&stream, d.images_ptr(), elements)?),
                DType::F16 => CudaStorageSlice::F16(copied(&stream, d.images_ptr(), elements)?),
                DType::Bf16 => CudaStorageSlice::BF16(copied(&stream, d.images_ptr(), elements)?),
                DType::F32 => CudaStorageSlice::F32(copied(&stream, d.images_ptr(), elements)?),
            };
            let images = CudaStorage { slice: images, device: cd.clone() };
            let images = Tensor::from_storage(Storage::Cuda(images), self.images_shape(), BackpropOp::none(), false);
            self.images = Images::Host(HostImages::new(dtype));
            if classes > 0 {
                self.targets.clear();
            } else {
                self.labels.clear();
            }
            return Ok((images, targets));
        }
        // The images: the slot's memory itself.
        let Images::Device(d) = std::mem::replace(&mut self.images, Images::Host(HostImages::new(dtype))) else {
            unreachable!("matched above")
        };
        // SAFETY: the memory is freed exactly once: by the slice made from it below when its
        // last tensor is dropped (cuMemFreeAsync on candle's stream, which waited above).
        let ptr = match unsafe { (*d).hand_over(&stream) } {
            Ok(p) => p,
            Err((d, e)) => {
                self.images = Images::Device(Box::new(d));
                return Err(e.into());
            }
        };
        // SAFETY: `ptr` is the start of an allocation of at least `elements` values of the
        // batch's element type (the slot's images), written by the producer before the ready
        // event candle's stream waited on; the slice owns it from here.
        let slice = unsafe {
            match dtype {
                DType::U8 => CudaStorageSlice::U8(stream.upgrade_device_ptr(ptr, elements)),
                DType::F16 => CudaStorageSlice::F16(stream.upgrade_device_ptr(ptr, elements)),
                DType::Bf16 => CudaStorageSlice::BF16(stream.upgrade_device_ptr(ptr, elements)),
                DType::F32 => CudaStorageSlice::F32(stream.upgrade_device_ptr(ptr, elements)),
            }
        };
        let images = CudaStorage { slice, device: cd.clone() };
        debug_assert_eq!(images.dtype().size_in_bytes(), dtype.size());
        let images = Tensor::from_storage(Storage::Cuda(images), self.images_shape(), BackpropOp::none(), false);
        if classes > 0 {
            self.targets.clear();
        } else {
            self.labels.clear();
        }
        Ok((images, targets))
    }
}

/// True for the per-thread default stream and the legacy default stream: handles that name a
/// different stream (or none) on each thread that uses them, so a free enqueued on them when a
/// tensor is dropped is not ordered after the work of the thread that made it.
#[cfg(feature = "candle-cuda")]
fn stream_follows_the_thread(stream: &cudarc::driver::CudaStream) -> bool {
    let s = stream.cu_stream() as usize;
    s == 0 || s == PER_THREAD_STREAM
}

/// `CU_STREAM_PER_THREAD`, the handle of the calling thread's default stream.
#[cfg(feature = "candle-cuda")]
const PER_THREAD_STREAM: usize = 0x2;

/// A new allocation of `len` values on `stream`, filled from the device address `src`.
#[cfg(feature = "candle-cuda")]
fn copied<T: cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    src: cudarc::driver::sys::CUdeviceptr,
    len: usize,
) -> Result<cudarc::driver::CudaSlice<T>> {
    // SAFETY: uninitialised, and written whole by the copy enqueued right after on the same
    // stream, before anything can read it.
    let mut dst = unsafe { stream.alloc::<T>(len) }
        .map_err(|e| Error::Gpu(crate::error::GpuError::Cuda { call: "cuMemAllocAsync", message: e.to_string() }))?;
    copy_on(stream, &mut dst, src)?;
    Ok(dst)
}

/// Copy `dst.len()` values from the device address `src` into `dst`, on `stream`.
#[cfg(feature = "candle-cuda")]
fn copy_on<T>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    dst: &mut cudarc::driver::CudaSlice<T>,
    src: cudarc::driver::sys::CUdeviceptr,
) -> Result<()> {
    use cudarc::driver::DevicePtrMut;
    let bytes = dst.len() * std::mem::size_of::<T>();
    let (d, _record) = dst.device_ptr_mut(stream);
    // SAFETY: `src` holds `bytes` bytes the producer wrote before the ready event `stream`
    // waited on; `d` is a fresh allocation of exactly that size on the same context.
    unsafe { cudarc::driver::result::memcpy_dtod_async(d, src, bytes, stream.cu_stream()) }
        .map_err(|e| Error::Gpu(crate::error::GpuError::Cuda { call: "cuMemcpyDtoDAsync", message: e.to_string() }))
}
