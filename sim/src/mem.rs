//! Device and pinned memory: host memory, every allocation tracked.
//!
//! Each allocation is its own mapping: a guard page, the allocation (its end rounded up to
//! 256 bytes, placed so that it ends where the second guard page starts), a guard page. A
//! kernel that reads or writes past the end (or before the start) faults on a guard page, and
//! [`describe`] names the allocation. A freed allocation's pages are dropped and made
//! inaccessible, and its addresses are never handed out again (while the quarantine lasts), so
//! a late use faults or is refused by name rather than reading someone else's bytes.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What an allocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Device,
    Pinned,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Device => "device",
            Kind::Pinned => "pinned host",
        }
    }
}

/// One allocation.
#[derive(Clone, Debug)]
pub struct Alloc {
    pub id: u64,
    pub base: usize,
    pub len: usize,
    pub kind: Kind,
    /// The context it was made in.
    pub ctx: usize,
    /// The call that made it.
    pub call: &'static str,
    map: usize,
    map_len: usize,
    /// Pinned memory: the device's view of the same pages (0 for device memory).
    alias: usize,
    /// The stream-ordered pool it came from (`cuMemAllocFromPoolAsync`; 0: none).
    pub pool: usize,
}

impl Alloc {
    pub fn end(&self) -> usize {
        self.base + self.len
    }
    /// The address the device side (a stream's copy, a kernel) uses for `p` inside this
    /// allocation: `p` itself for device memory, the device's view for pinned memory.
    pub fn device_view(&self, p: usize) -> usize {
        if self.alias == 0 {
            p
        } else {
            self.alias + (p - (self.map + PAGE))
        }
    }
    /// The host-view pages that `[start, end)` covers (page-aligned bounds).
    pub fn pages(start: usize, end: usize) -> (usize, usize) {
        (start & !(PAGE - 1), round_up(end, PAGE))
    }
    pub fn label(&self) -> String {
        format!("{} allocation #{} ({:#x}, {} bytes, from {})", self.kind.name(), self.id, self.base, self.len, self.call)
    }
}

#[derive(Default)]
struct Registry {
    live: BTreeMap<usize, Alloc>,
    /// Memory pools by handle (`cuMemPoolCreate`).
    pools: BTreeMap<usize, Pool>,
    next_pool: usize,
    freed: BTreeMap<usize, Alloc>,
    freed_order: std::collections::VecDeque<usize>,
    freed_bytes: usize,
    next_id: u64,
    device_bytes: u64,
    pinned_bytes: u64,
    device_count: u64,
    pinned_count: u64,
    peak_device: u64,
    peak_pinned: u64,
    total_device_allocs: u64,
    total_pinned_allocs: u64,
}

/// A stream-ordered memory pool: what it has handed out and not had back.
#[derive(Default)]
struct Pool {
    /// Allocations made from it and not yet freed, by base address.
    outstanding: BTreeMap<usize, usize>,
    /// `CU_MEMPOOL_ATTR_USED_MEM_CURRENT`: bytes of `outstanding`, counted when a free is
    /// *called* (the pages go when the stream reaches it).
    used: u64,
    used_high: u64,
    release_threshold: u64,
    /// `cuMemPoolDestroy` was called with allocations outstanding: it goes with the last one,
    /// as the driver's does; nothing may allocate from it meanwhile.
    destroyed: bool,
}

static REG: Mutex<Option<Registry>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = REG.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Registry::default))
}

const PAGE: usize = 4096;
/// What a fresh allocation holds.
pub const UNWRITTEN: u8 = 0xFF;
/// Freed address ranges kept out of reuse: up to this many bytes of address space.
const QUARANTINE: usize = 256 << 30;

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Allocate `len` bytes of `kind` in context `ctx`. `Err(())` when the device's configured
/// memory would be exceeded (device) or the host refuses the mapping.
#[allow(clippy::result_unit_err)] // one failure: out of memory
pub fn alloc(kind: Kind, len: usize, ctx: usize, call: &'static str) -> Result<usize, ()> {
    let user = round_up(len.max(1), 256);
    let body = round_up(user, PAGE);
    let map_len = body + 2 * PAGE;
    if kind == Kind::Device {
        let over = with(|r| r.device_bytes + len as u64 > crate::config().memory);
        if over {
            return Err(());
        }
    }
    // SAFETY: a fresh anonymous mapping, no fixed address.
    let map = unsafe {
        libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    if map == libc::MAP_FAILED {
        return Err(());
    }
    let map = map as usize;
    // Pinned memory has two views of the same pages: the host's (the address the caller gets)
    // and the device's (what copies and kernels use). The host's view is what the hazard
    // checker protects while a stream still uses the bytes (`dev::guard`), without stopping
    // the stream's own access.
    let alias = if kind == Kind::Pinned {
        match shared_views(map + PAGE, body) {
            Some(a) => a,
            None => {
                // SAFETY: the mapping made above.
                unsafe { libc::munmap(map as *mut _, map_len) };
                return Err(());
            }
        }
    } else {
        // SAFETY: inside the mapping made above.
        if unsafe { libc::mprotect((map + PAGE) as *mut _, body, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(map as *mut _, map_len) };
            return Err(());
        }
        0
    };
    let base = map + PAGE + body - user;
    // Committed now, as on a GPU (so a host's memory figures do not drift as pages are first
    // touched later), and not zero: what a kernel or copy reads before anything wrote it is
    // 0xFF bytes (NaN as f16/f32), not a lucky 0.
    let view = if alias != 0 { alias + (base - (map + PAGE)) } else { base };
    // SAFETY: `view .. view + len` lies inside the mapping (or its device view) made above.
    unsafe { std::ptr::write_bytes(view as *mut u8, UNWRITTEN, len) };
    with(|r| {
        r.next_id += 1;
        let a = Alloc { id: r.next_id, base, len, kind, ctx, call, map, map_len, alias, pool: 0 };
        match kind {
            Kind::Device => {
                r.device_bytes += len as u64;
                r.device_count += 1;
                r.total_device_allocs += 1;
                r.peak_device = r.peak_device.max(r.device_bytes);
            }
            Kind::Pinned => {
                r.pinned_bytes += len as u64;
                r.pinned_count += 1;
                r.total_pinned_allocs += 1;
                r.peak_pinned = r.peak_pinned.max(r.pinned_bytes);
            }
        }
        r.live.insert(base, a);
    });
    Ok(base)
}

/// Free the allocation that starts at `ptr`. The error is the finding's sentence: a double
/// free, a pointer inside (not at the start of) an allocation, the wrong kind, or nothing.
pub fn free(ptr: usize, kind: Kind, call: &str) -> Result<Alloc, String> {
    with(|r| {
        let Some(a) = r.live.get(&ptr).cloned() else {
            if let Some(f) = lookup(&r.freed, ptr) {
                return Err(format!("{call}({ptr:#x}): double free of {}", f.label()));
            }
            if let Some(l) = lookup(&r.live, ptr) {
                return Err(format!("{call}({ptr:#x}): not the start of {} (offset {})", l.label(), ptr - l.base));
            }
            return Err(format!("{call}({ptr:#x}): no {} allocation starts here", kind.name()));
        };
        if a.kind != kind {
            return Err(format!("{call}({ptr:#x}): frees {} with the {} call", a.label(), kind.name()));
        }
        r.live.remove(&ptr);
        match kind {
            Kind::Device => {
                r.device_bytes -= a.len as u64;
                r.device_count -= 1;
            }
            Kind::Pinned => {
                r.pinned_bytes -= a.len as u64;
                r.pinned_count -= 1;
            }
        }
        // SAFETY: the allocation's own mapping: its pages are dropped and made inaccessible;
        // the addresses stay reserved (quarantine). Pinned: the device's view goes, and the
        // host's view is replaced by reserved, inaccessible anonymous memory.
        unsafe {
            if a.alias != 0 {
                libc::munmap(a.alias as *mut _, a.map_len - 2 * PAGE);
                libc::mmap(
                    a.map as *mut _,
                    a.map_len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                );
            } else {
                libc::madvise(a.map as *mut _, a.map_len, libc::MADV_DONTNEED);
                libc::mprotect(a.map as *mut _, a.map_len, libc::PROT_NONE);
            }
        }
        r.freed_bytes += a.map_len;
        r.freed_order.push_back(a.base);
        r.freed.insert(a.base, a.clone());
        while r.freed_bytes > QUARANTINE {
            let Some(old) = r.freed_order.pop_front() else { break };
            if let Some(o) = r.freed.remove(&old) {
                r.freed_bytes -= o.map_len;
                // SAFETY: a quarantined mapping nothing refers to any more.
                unsafe { libc::munmap(o.map as *mut _, o.map_len) };
            }
        }
        Ok(a)
    })
}

/// A new memory pool's handle.
pub fn pool_create() -> usize {
    with(|r| {
        r.next_pool += 1;
        // Handles that are not small integers, so a pool passed where a stream or pointer is
        // expected is refused rather than taken for one.
        let h = 0x5000_0000 + r.next_pool * 0x10;
        r.pools.insert(h, Pool::default());
        h
    })
}

/// `Err` names what is wrong with `pool` (unknown, or destroyed).
fn live_pool<'a>(r: &'a mut Registry, pool: usize, call: &str) -> Result<&'a mut Pool, String> {
    match r.pools.get_mut(&pool) {
        Some(p) if !p.destroyed => Ok(p),
        Some(_) => Err(format!("{call}: memory pool {pool:#x} was destroyed")),
        None => Err(format!("{call}: {pool:#x} is not a memory pool")),
    }
}

/// `Err` names why `pool` cannot be used by `call` (unknown, or destroyed).
pub fn pool_check(pool: usize, call: &str) -> Result<(), String> {
    with(|r| live_pool(r, pool, call).map(|_| ()))
}

/// Record that the allocation at `base` (of `len` bytes) came from `pool`.
pub fn pool_adopt(pool: usize, base: usize, len: usize, call: &str) -> Result<(), String> {
    with(|r| {
        let p = live_pool(r, pool, call)?;
        p.outstanding.insert(base, len);
        p.used += len as u64;
        p.used_high = p.used_high.max(p.used);
        if let Some(a) = r.live.get_mut(&base) {
            a.pool = pool;
        }
        Ok(())
    })
}

/// A free of `base` was called: its pool (if any) stops counting it. A destroyed pool goes
/// with its last allocation.
pub fn pool_release(base: usize) {
    with(|r| {
        let Some(pool) = r.live.get(&base).map(|a| a.pool).filter(|&p| p != 0) else { return };
        let Some(p) = r.pools.get_mut(&pool) else { return };
        if let Some(len) = p.outstanding.remove(&base) {
            p.used -= len as u64;
        }
        if p.destroyed && p.outstanding.is_empty() {
            r.pools.remove(&pool);
        }
    })
}

/// `cuMemPoolDestroy`: gone now, or with its last outstanding allocation.
pub fn pool_destroy(pool: usize) -> Result<(), String> {
    with(|r| {
        let p = live_pool(r, pool, "cuMemPoolDestroy")?;
        if p.outstanding.is_empty() {
            r.pools.remove(&pool);
        } else {
            p.destroyed = true;
        }
        Ok(())
    })
}

/// A pool's attribute (`CUmemPool_attribute`): 4 release threshold, 5/6 reserved bytes (the
/// stand-in reserves exactly what is in use), 7/8 used bytes now / at most.
pub fn pool_attribute(pool: usize, attr: i32) -> Result<Option<u64>, String> {
    with(|r| {
        let p = live_pool(r, pool, "cuMemPoolGetAttribute")?;
        Ok(match attr {
            4 => Some(p.release_threshold),
            5 | 7 => Some(p.used),
            6 | 8 => Some(p.used_high),
            _ => None,
        })
    })
}

/// Set the release threshold (attribute 4); the reuse flags (1..=3) are accepted and change
/// nothing (the stand-in never reuses memory).
pub fn pool_set_attribute(pool: usize, attr: i32, value: u64) -> Result<bool, String> {
    with(|r| {
        let p = live_pool(r, pool, "cuMemPoolSetAttribute")?;
        Ok(match attr {
            4 => {
                p.release_threshold = value;
                true
            }
            1..=3 => true,
            _ => false,
        })
    })
}

/// Map `len` bytes of one memfd twice: at `at` (fixed, the host's view) and anywhere (the
/// device's view, returned).
fn shared_views(at: usize, len: usize) -> Option<usize> {
    // SAFETY: a fresh memfd sized to `len`, mapped over our own reserved range at `at` and once
    // more; the descriptor is closed once both mappings hold the pages.
    unsafe {
        let fd = libc::memfd_create(c"stoke-sim pinned".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let ok = libc::ftruncate(fd, len as libc::off_t) == 0
            && libc::mmap(at as *mut _, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_FIXED, fd, 0)
                != libc::MAP_FAILED;
        let alias = if ok {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        (alias != libc::MAP_FAILED).then_some(alias as usize)
    }
}

/// Set the host view's protection of pages `[start, end)` (page-aligned, inside a pinned
/// allocation): the hazard checker's guard.
pub fn protect(start: usize, end: usize, prot: i32) {
    // SAFETY: pages of a live pinned allocation's host view, which this library mapped.
    unsafe { libc::mprotect(start as *mut _, end - start, prot) };
}

fn lookup(m: &BTreeMap<usize, Alloc>, p: usize) -> Option<&Alloc> {
    m.range(..=p).next_back().map(|(_, a)| a).filter(|a| p < a.end().max(a.base + 1))
}

/// What a pointer handed to a call must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    Device,
    Pinned,
    /// A kernel parameter (device memory, or pinned memory, which is mapped for the device).
    DeviceOrPinned,
    /// A host pointer: pinned or pageable memory, never device memory.
    Host,
}

/// The allocation that holds `[p, p + len)`, checked against `want`. `Ok(None)`: a pageable
/// host pointer where `want` is `Host`. The error is the finding's sentence; `call` and `role`
/// ("destination", "parameter 3") name where the pointer came from.
pub fn check(p: usize, len: usize, want: Want, call: &str, role: &str) -> Result<Option<Alloc>, String> {
    with(|r| {
        let hit = lookup(&r.live, p).cloned();
        match (hit, want) {
            (Some(a), _) if p + len > a.end() => {
                Err(format!("{call}: {role} {p:#x} + {len} bytes runs {} bytes past the end of {}", p + len - a.end(), a.label()))
            }
            (Some(a), Want::Host) if a.kind == Kind::Device => {
                Err(format!("{call}: {role} {p:#x} is device memory ({}) where a host pointer belongs", a.label()))
            }
            (Some(a), Want::Device) if a.kind != Kind::Device => {
                Err(format!("{call}: {role} {p:#x} is {} where device memory belongs", a.label()))
            }
            (Some(a), Want::Pinned) if a.kind != Kind::Pinned => {
                Err(format!("{call}: {role} {p:#x} is {} where pinned host memory belongs", a.label()))
            }
            (Some(a), _) => Ok(Some(a)),
            (None, _) => {
                if let Some(f) = lookup(&r.freed, p) {
                    return Err(format!("{call}: {role} {p:#x} is in freed {} (use after free)", f.label()));
                }
                if want == Want::Host {
                    return Ok(None);
                }
                Err(format!("{call}: {role} {p:#x} lies in no live {} allocation{}", want_name(want), nearest(r, p)))
            }
        }
    })
}

fn want_name(w: Want) -> &'static str {
    match w {
        Want::Device => "device",
        Want::Pinned => "pinned host",
        Want::DeviceOrPinned => "device or pinned",
        Want::Host => "host",
    }
}

fn nearest(r: &Registry, p: usize) -> String {
    match r.live.range(..=p).next_back() {
        Some((_, a)) if p - a.end() < 1 << 20 => format!(" ({} bytes past the end of {})", p - a.end(), a.label()),
        _ => String::new(),
    }
}

/// A sentence naming what `addr` is: inside, before or after a live allocation, in a freed
/// one, or none (for a fault inside a kernel).
pub fn describe(addr: usize) -> String {
    with(|r| {
        for (m, state) in [(&r.live, ""), (&r.freed, "freed ")] {
            for a in m.values() {
                if addr >= a.map && addr < a.map + a.map_len {
                    return if addr >= a.end() {
                        format!("{} bytes past the end of {state}{}", addr - a.end(), a.label())
                    } else if addr < a.base {
                        format!("{} bytes before the start of {state}{}", a.base - addr, a.label())
                    } else {
                        format!("inside {state}{} (use after free)", a.label())
                    };
                }
            }
        }
        "not in or beside any allocation".to_string()
    })
}

/// Live allocations made in context `ctx`.
pub fn live_in(ctx: usize) -> Vec<Alloc> {
    with(|r| r.live.values().filter(|a| a.ctx == ctx).cloned().collect())
}

/// Device bytes in use (what `cuMemGetInfo` subtracts from the total).
pub fn device_bytes() -> u64 {
    with(|r| r.device_bytes)
}

/// The allocation holding `p`, if live.
pub fn find(p: usize) -> Option<Alloc> {
    with(|r| lookup(&r.live, p).cloned())
}

pub(crate) fn stats_json() -> String {
    with(|r| {
        format!(
            "\"device_allocs\":{},\"device_bytes\":{},\"peak_device_bytes\":{},\"device_allocs_total\":{},\
             \"pinned_allocs\":{},\"pinned_bytes\":{},\"peak_pinned_bytes\":{},\"pinned_allocs_total\":{}",
            r.device_count,
            r.device_bytes,
            r.peak_device,
            r.total_device_allocs,
            r.pinned_count,
            r.pinned_bytes,
            r.peak_pinned,
            r.total_pinned_allocs
        )
    })
}
