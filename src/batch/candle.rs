//! A batch as candle tensors (feature `candle`).
//!
//! `(images, targets)`: the images `[N, 3, H, W]` (NCHW) or `[N, H, W, 3]` (NHWC) in the
//! batch's element type (`U8`, `F16`, `BF16`, `F32`), and the targets: the labels `[N]` as
//! `I64`, or under Mixup/CutMix the soft targets `[N, classes]` as `F32` (what timm's `Mixup`
//! returns in place of the labels; train with a soft cross-entropy).

use super::{Batch, HostImages, Images};
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
        let (n, bytes, dtype) = (self.len(), self.len() * self.sample_bytes(), self.dtype);
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
        let shape = self.shape.to_vec();
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
        let n = self.len();
        let (bytes, elements) = (n * self.sample_bytes(), n * self.sample_bytes() / self.dtype.size());
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
        let shape = self.shape.to_vec();
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

/// A CPU tensor that takes `v` (its first `elements` values) without a copy.
fn cpu_tensor<T: candle_core::WithDType>(mut v: Vec<T>, elements: usize, shape: Vec<usize>) -> candle_core::Result<Tensor> {
    v.truncate(elements);
    Tensor::from_vec(v, shape, &Device::Cpu)
}
