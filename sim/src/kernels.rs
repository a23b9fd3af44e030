//! Modules and launches. `cuModuleLoadData` takes what stoke loads on a GPU (the fatbin
//! build.rs embeds, or NVRTC's PTX) and checks it is one; `cuModuleGetFunction` finds the
//! entry by name in that image and in the host-compiled table of the same `kernels/*.cu`
//! (sim/build.rs); `cuLaunchKernel` makes a GPU's launch checks, then queues the whole grid
//! on the stream (sim/cpp/runtime.cpp runs it).

use crate::dev::{self, Access, CUresult, Enqueue, OpError, Stream};
use crate::mem::{self, Want};
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex};

#[repr(C)]
struct SimKernel {
    name: *const c_char,
    nparams: u32,
    sizes: *const usize,
    kinds: *const u8,
    max_threads: u32,
    invoke: Option<unsafe extern "C" fn(*mut *mut c_void)>,
}

extern "C" {
    fn stoke_sim_kernel_count() -> u32;
    fn stoke_sim_kernel(i: u32) -> *const SimKernel;
    fn stoke_sim_launch(
        index: u32,
        grid: *const u32,
        block: *const u32,
        params: *mut *mut c_void,
        err: *mut c_char,
        err_len: usize,
        fault_addr: *mut usize,
        fault_block: *mut u32,
        fault_thread: *mut u32,
    ) -> i32;
}

/// One host-compiled kernel's signature.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    pub index: u32,
    pub name: String,
    pub sizes: Vec<usize>,
    /// 0 value, 1 pointer, 2 pointer to const.
    pub kinds: Vec<u8>,
    pub max_threads: u32,
}

fn table() -> &'static [KernelInfo] {
    static T: std::sync::OnceLock<Vec<KernelInfo>> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        // SAFETY: the table is static data in this library, `i` below its length.
        (0..unsafe { stoke_sim_kernel_count() })
            .map(|i| unsafe {
                let k = &*stoke_sim_kernel(i);
                let n = k.nparams as usize;
                KernelInfo {
                    index: i,
                    name: CStr::from_ptr(k.name).to_string_lossy().into_owned(),
                    sizes: std::slice::from_raw_parts(k.sizes, n).to_vec(),
                    kinds: std::slice::from_raw_parts(k.kinds, n).to_vec(),
                    max_threads: k.max_threads,
                }
            })
            .collect()
    })
}

pub struct Module {
    image: Vec<u8>,
    ptx: bool,
}

pub struct Function {
    pub kernel: KernelInfo,
}

static MODULES: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// PTX ISA versions a CUDA 13.0 driver (R580) loads: up to 9.0.
pub const MAX_PTX_ISA: (u32, u32) = (9, 0);

/// Check `image` is a fatbin or PTX text and keep a copy. Errors are the driver's codes with
/// a sentence.
///
/// # Safety
/// `image` points to a fatbin (its header gives its length) or NUL-terminated text.
pub unsafe fn load(image: *const c_void) -> Result<usize, (CUresult, String)> {
    if image.is_null() {
        return Err((dev::INVALID_VALUE, "cuModuleLoadData: image is null".into()));
    }
    // SAFETY: at least 16 readable bytes in either format (the caller's contract).
    let head = unsafe { std::slice::from_raw_parts(image as *const u8, 16) };
    let magic = u32::from_le_bytes(head[..4].try_into().unwrap());
    let (bytes, ptx) = if magic == FATBIN_MAGIC {
        let header = u16::from_le_bytes(head[6..8].try_into().unwrap()) as usize;
        let size = u64::from_le_bytes(head[8..16].try_into().unwrap()) as usize;
        // SAFETY: the fatbin header states its own length.
        (unsafe { std::slice::from_raw_parts(image as *const u8, header + size) }.to_vec(), false)
    } else {
        // SAFETY: NUL-terminated text (the caller's contract).
        let text = unsafe { CStr::from_ptr(image as *const c_char) }.to_bytes().to_vec();
        let s = String::from_utf8_lossy(&text);
        if !s.contains(".version") || !s.contains(".target") {
            return Err((dev::INVALID_IMAGE, "cuModuleLoadData: the image is neither a fatbin nor PTX".into()));
        }
        if let Some(v) = s.split(".version").nth(1).and_then(|r| r.split_whitespace().next()) {
            let mut it = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
            let ver = (it.next().unwrap_or(0), it.next().unwrap_or(0));
            if ver > MAX_PTX_ISA {
                return Err((
                    222,
                    format!(
                        "cuModuleLoadData: PTX ISA {}.{} is newer than this driver's {}.{}",
                        ver.0, ver.1, MAX_PTX_ISA.0, MAX_PTX_ISA.1
                    ),
                ));
            }
        }
        (text, true)
    };
    let m = Box::new(Module { image: bytes, ptx });
    let h = Box::into_raw(m) as usize;
    MODULES.lock().unwrap().push(h);
    Ok(h)
}

fn module(h: usize) -> Option<&'static Module> {
    // SAFETY: registered handles come from Box::into_raw in `load` and are removed before
    // being freed in `unload`.
    MODULES.lock().unwrap().contains(&h).then(|| unsafe { &*(h as *const Module) })
}

pub fn unload(h: usize) -> bool {
    let mut m = MODULES.lock().unwrap();
    let Some(i) = m.iter().position(|x| *x == h) else { return false };
    m.remove(i);
    // Functions taken from it keep their own copy of the signature: nothing dangles. The
    // module itself is dropped.
    // SAFETY: from Box::into_raw in `load`, removed from the registry just now.
    drop(unsafe { Box::from_raw(h as *mut Module) });
    true
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The entry `name` of module `h`: present in the image (a PTX `.entry`, or a symbol of the
/// fatbin) and in the host-compiled table.
pub fn function(h: usize, name: &str) -> Result<usize, CUresult> {
    let Some(m) = module(h) else {
        crate::report("invalid handle", format!("cuModuleGetFunction({name}): module {h:#x} is not loaded"));
        return Err(dev::INVALID_HANDLE);
    };
    let in_image = if m.ptx {
        contains(&m.image, format!(".entry {name}(").as_bytes()) || contains(&m.image, format!(".entry {name} (").as_bytes())
    } else {
        contains(&m.image, format!("\0{name}\0").as_bytes()) || contains(&m.image, format!(".{name}\0").as_bytes())
    };
    let Some(k) = table().iter().find(|k| k.name == name) else { return Err(dev::NOT_FOUND) };
    if !in_image {
        return Err(dev::NOT_FOUND);
    }
    Ok(Box::into_raw(Box::new(Function { kernel: k.clone() })) as usize)
}

/// The largest kernel parameter block a launch takes (CUDA 12.1+ on Volta and newer).
pub const MAX_PARAM_BYTES: usize = 32764;
/// Dynamic shared memory a launch may ask for without opting in per function.
pub const MAX_DYNAMIC_SHARED: u32 = 48 * 1024;

fn launch_fail(name: &str, msg: String) -> CUresult {
    crate::report("launch", format!("cuLaunchKernel({name}): {msg}"));
    dev::INVALID_VALUE
}

/// Check the launch as a GPU does, copy the parameters, check every pointer among them, and
/// queue the grid on `s`.
///
/// # Safety
/// `f` is a handle from [`function`]; `params` holds one pointer per kernel parameter, each
/// to that parameter's value.
pub unsafe fn launch(
    f: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    s: &Arc<Stream>,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    // SAFETY: the caller's contract (a handle from `function`, never freed).
    let k = unsafe { &(*(f as *const Function)).kernel }.clone();
    let name = k.name.as_str();
    if grid.contains(&0) || block.contains(&0) {
        return launch_fail(name, format!("a zero dimension in grid {grid:?} / block {block:?}"));
    }
    if block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
        return launch_fail(name, format!("block {block:?} over the limits (1024, 1024, 64)"));
    }
    let threads = block[0] as u64 * block[1] as u64 * block[2] as u64;
    if threads > 1024 {
        return launch_fail(name, format!("{threads} threads per block (at most 1024)"));
    }
    if threads > k.max_threads as u64 {
        crate::report(
            "launch",
            format!("cuLaunchKernel({name}): {threads} threads per block over its __launch_bounds__({})", k.max_threads),
        );
        return dev::LAUNCH_OUT_OF_RESOURCES;
    }
    if grid[0] > i32::MAX as u32 || grid[1] > 65535 || grid[2] > 65535 {
        return launch_fail(name, format!("grid {grid:?} over the limits (2^31-1, 65535, 65535)"));
    }
    if shared > MAX_DYNAMIC_SHARED {
        return launch_fail(name, format!("{shared} bytes of dynamic shared memory (at most {MAX_DYNAMIC_SHARED} without opting in)"));
    }
    if !extra.is_null() {
        return launch_fail(name, "parameters through `extra` are not used by stoke and not simulated".into());
    }
    let total: usize = k.sizes.iter().sum();
    if total > MAX_PARAM_BYTES {
        return launch_fail(name, format!("{total} bytes of parameters (at most {MAX_PARAM_BYTES})"));
    }
    if params.is_null() && !k.sizes.is_empty() {
        return launch_fail(name, format!("no parameter array for {} parameters", k.sizes.len()));
    }
    // The values now, as the driver copies them at the call.
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(k.sizes.len());
    let mut accesses = Vec::new();
    for (i, (&size, &kind)) in k.sizes.iter().zip(&k.kinds).enumerate() {
        // SAFETY: params[i] points to parameter i's value of `size` bytes (the caller's contract).
        let p = unsafe { *params.add(i) };
        if p.is_null() {
            return launch_fail(name, format!("parameter {i}'s value pointer is null"));
        }
        // SAFETY: as above.
        let v = unsafe { std::slice::from_raw_parts(p as *const u8, size) }.to_vec();
        if kind != 0 {
            let ptr = usize::from_le_bytes(v[..8].try_into().unwrap());
            if ptr != 0 {
                match mem::check(ptr, 0, Want::DeviceOrPinned, &format!("cuLaunchKernel({name})"), &format!("parameter {i}")) {
                    Ok(Some(a)) => {
                        let end = a.end();
                        // Pinned memory is reached through the device's view.
                        let view = a.device_view(ptr);
                        let mut v2 = v.clone();
                        v2[..8].copy_from_slice(&view.to_le_bytes());
                        values.push(v2);
                        accesses.push(Access::new(a, ptr, end, kind == 1, format!("kernel {name} (parameter {i})")));
                    }
                    Ok(None) => unreachable!("only Want::Host accepts unknown memory"),
                    Err(msg) => {
                        crate::report("invalid pointer", msg);
                        return dev::INVALID_VALUE;
                    }
                }
                continue;
            }
        }
        values.push(v);
    }
    LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let index = k.index;
    let name = k.name.clone();
    dev::enqueue(
        s,
        Enqueue::work(accesses, move || {
            let mut values = values;
            let mut ptrs: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr() as *mut c_void).collect();
            let mut err = vec![0 as c_char; 512];
            let mut fault = 0usize;
            let mut fb = [0u32; 3];
            let mut ft = [0u32; 3];
            // SAFETY: the parameter values were copied at the launch and checked; the kernel
            // is the table's own entry.
            let r = unsafe {
                stoke_sim_launch(
                    index,
                    grid.as_ptr(),
                    block.as_ptr(),
                    ptrs.as_mut_ptr(),
                    err.as_mut_ptr(),
                    err.len(),
                    &mut fault,
                    fb.as_mut_ptr(),
                    ft.as_mut_ptr(),
                )
            };
            match r {
                0 => Ok(()),
                2 => Err(OpError {
                    code: dev::ILLEGAL_ADDRESS,
                    kind: "fault",
                    message: format!(
                        "kernel {name} block {fb:?} thread {ft:?} of grid {grid:?} x block {block:?}: an access at {fault:#x}, {}",
                        mem::describe(fault)
                    ),
                }),
                _ => Err(OpError {
                    code: dev::LAUNCH_FAILED,
                    kind: "launch",
                    // SAFETY: the runtime wrote a NUL-terminated message into `err`.
                    message: format!("kernel {name}: {}", unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy()),
                }),
            }
        }),
    );
    dev::SUCCESS
}

pub fn launches() -> u64 {
    LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The kernels the host build holds, comma-separated (for the stand-in's own checks).
pub fn names() -> Vec<String> {
    table().iter().map(|k| k.name.clone()).collect()
}
