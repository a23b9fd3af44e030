//! DLPack export: the C structs of `dlpack.h` (v1.1 layout) and the capsule protocol of the
//! Python array API (`__dlpack__` / `__dlpack_device__`).
//!
//! Ownership: every capsule holds an `Arc` of the batch it points into. The consumer that takes
//! the capsule (torch, NumPy, CuPy) renames it to `used_dltensor[_versioned]` and calls the
//! tensor's `deleter` when its last reference dies; a capsule nobody consumed is freed by its
//! own destructor. Either way the `Arc` is dropped exactly once, and the batch (its ring slot, or
//! its host buffer) goes back to stoke only when the last tensor viewing it is gone.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

/// `DLDeviceType` values stoke produces.
pub const KDL_CPU: i32 = 1;
/// CUDA device memory.
pub const KDL_CUDA: i32 = 2;

/// `DLDataTypeCode` values stoke produces.
pub const KDL_INT: u8 = 0;
/// Unsigned integer (uint8 images).
pub const KDL_UINT: u8 = 1;
/// IEEE float.
pub const KDL_FLOAT: u8 = 2;
/// bfloat16.
pub const KDL_BFLOAT: u8 = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

// The layout the consumers were compiled against (dlpack.h, 64-bit): checked at compile time.
const _: () = assert!(std::mem::size_of::<DLTensor>() == 48);
const _: () = assert!(std::mem::size_of::<DLManagedTensor>() == 64);
const _: () = assert!(std::mem::size_of::<DLManagedTensorVersioned>() == 80);
const _: () = assert!(std::mem::offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);

/// The DLPack version stoke writes in versioned capsules.
pub const VERSION: (u32, u32) = (1, 1);

const NAME: &CStr = c"dltensor";
const NAME_VERSIONED: &CStr = c"dltensor_versioned";

/// What one exported tensor describes; `owner` keeps the memory alive.
pub struct View {
    pub owner: Arc<dyn Send + Sync>,
    pub data: u64,
    pub device: DLDevice,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
}

impl View {
    /// Row-major (C-contiguous) strides in elements.
    fn strides(&self) -> Vec<i64> {
        let mut s = vec![1i64; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * self.shape[i + 1];
        }
        s
    }
}

/// The heap block behind one exported tensor: the managed struct first (its address is the
/// block's), then what its pointers point into.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Arc<dyn Send + Sync>,
}

fn tensor(view: &View, shape: &mut [i64], strides: &mut [i64]) -> DLTensor {
    DLTensor {
        data: view.data as *mut c_void,
        device: view.device,
        ndim: shape.len() as i32,
        dtype: view.dtype,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    }
}

unsafe extern "C" fn delete_legacy(p: *mut DLManagedTensor) {
    if !p.is_null() {
        // SAFETY: `p` is the first field of a leaked `Box<Export<DLManagedTensor>>` (repr(C)),
        // and the protocol calls the deleter once.
        drop(unsafe { Box::from_raw(p as *mut Export<DLManagedTensor>) });
    }
}

unsafe extern "C" fn delete_versioned(p: *mut DLManagedTensorVersioned) {
    if !p.is_null() {
        // SAFETY: as `delete_legacy`, for the versioned block.
        drop(unsafe { Box::from_raw(p as *mut Export<DLManagedTensorVersioned>) });
    }
}

/// The two managed-tensor kinds, freed through their own deleter.
trait Managed {
    /// # Safety
    /// `p` points to a live managed tensor whose deleter was not called yet.
    unsafe fn delete(p: *mut Self);
}

impl Managed for DLManagedTensor {
    unsafe fn delete(p: *mut Self) {
        // SAFETY: the caller's contract.
        if let Some(d) = unsafe { (*p).deleter } {
            unsafe { d(p) }
        }
    }
}

impl Managed for DLManagedTensorVersioned {
    unsafe fn delete(p: *mut Self) {
        // SAFETY: the caller's contract.
        if let Some(d) = unsafe { (*p).deleter } {
            unsafe { d(p) }
        }
    }
}

/// Capsule destructor body: frees the tensor only when no consumer took it (a consumer renames
/// the capsule and owns the tensor from then on). A capsule can die while an exception is in
/// flight (an `except` block, unwinding): as the DLPack spec's reference deleter does, the
/// exception is saved first and restored last, so neither the capsule calls nor their cleanup
/// lose it.
///
/// # Safety
/// `capsule` is a capsule this module made with `name` (or renamed by a consumer).
unsafe fn release_unconsumed<M: Managed>(capsule: *mut ffi::PyObject, name: &CStr) {
    let (mut kind, mut value, mut trace) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: called with the GIL held (a capsule destructor); Fetch takes ownership of the
    // pending exception (if any) into the three locals, Restore gives it back at the end.
    // IsValid/GetPointer only read the capsule; a valid one under our name holds a tensor
    // nobody consumed. What they may raise themselves (a renamed capsule) is cleared.
    unsafe {
        ffi::PyErr_Fetch(&mut kind, &mut value, &mut trace);
        if ffi::PyCapsule_IsValid(capsule, name.as_ptr()) == 1 {
            M::delete(ffi::PyCapsule_GetPointer(capsule, name.as_ptr()) as *mut M);
        }
        ffi::PyErr_Clear();
        ffi::PyErr_Restore(kind, value, trace);
    }
}

unsafe extern "C" fn capsule_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: Python calls this with a capsule `capsule()` made under NAME.
    unsafe { release_unconsumed::<DLManagedTensor>(capsule, NAME) }
}

unsafe extern "C" fn capsule_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as `capsule_legacy`, under NAME_VERSIONED.
    unsafe { release_unconsumed::<DLManagedTensorVersioned>(capsule, NAME_VERSIONED) }
}

/// A capsule for `view`: the versioned kind when the consumer asked for DLPack >= 1.0
/// (`max_version`), else the legacy one every consumer understands.
pub fn capsule(py: Python<'_>, view: View, versioned: bool) -> PyResult<PyObject> {
    let mut shape = view.shape.clone();
    let mut strides = view.strides();
    let (ptr, name, destructor): (*mut c_void, &CStr, unsafe extern "C" fn(*mut ffi::PyObject)) = if versioned {
        let t = tensor(&view, &mut shape, &mut strides);
        let b = Box::new(Export {
            managed: DLManagedTensorVersioned {
                version: DLPackVersion { major: VERSION.0, minor: VERSION.1 },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_versioned),
                flags: 0,
                dl_tensor: t,
            },
            shape,
            strides,
            _owner: view.owner,
        });
        (Box::into_raw(b) as *mut c_void, NAME_VERSIONED, capsule_versioned)
    } else {
        let t = tensor(&view, &mut shape, &mut strides);
        let b = Box::new(Export {
            managed: DLManagedTensor { dl_tensor: t, manager_ctx: std::ptr::null_mut(), deleter: Some(delete_legacy) },
            shape,
            strides,
            _owner: view.owner,
        });
        (Box::into_raw(b) as *mut c_void, NAME, capsule_legacy)
    };
    // The Vecs moved into the box keep their heap buffers, so the shape/strides pointers taken
    // before the move stay valid.
    // SAFETY: `ptr` is a live leaked box; the name is 'static; the destructor matches it.
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(destructor)) };
    if cap.is_null() {
        // SAFETY: nobody else has the box.
        unsafe {
            if versioned {
                delete_versioned(ptr as *mut DLManagedTensorVersioned)
            } else {
                delete_legacy(ptr as *mut DLManagedTensor)
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference from PyCapsule_New.
    Ok(unsafe { PyObject::from_owned_ptr(py, cap) })
}

/// The checks of `__dlpack__`'s keyword arguments that do not depend on the memory.
pub fn check_request(device: DLDevice, dl_device: Option<(i32, i32)>, copy: Option<bool>) -> PyResult<()> {
    if let Some((t, id)) = dl_device {
        if (t, id) != (device.device_type, device.device_id) {
            return Err(PyBufferError::new_err(format!(
                "stoke exports on device {:?} only (no cross-device copy), asked for ({t}, {id})",
                (device.device_type, device.device_id)
            )));
        }
    }
    if copy == Some(true) {
        return Err(PyBufferError::new_err(
            "stoke's batches are exported without a copy (copy=True is not supported); copy on the consumer side",
        ));
    }
    Ok(())
}
