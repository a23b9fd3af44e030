//! A batch's compressed bytes: a growable buffer whose memory is the heap's, or a backend's
//! when the backend gives the readers memory of its own ([`HostMemory`]: the CUDA backend's
//! pinned pool, so nvJPEG reads the bytes where the readers put them and no staging copy is
//! made).
//!
//! # Invariants
//! - A pooled buffer never grows in place: a batch larger than its allocation (a file that grew
//!   after it was indexed) moves the buffer to the heap, and the backend then copies that batch
//!   as it copies any caller's bytes. So the pool's memory is what it allocated, never more.
//! - A pooled allocation is initialised once (zeroed) when it is made, so every byte of it may
//!   be handed out as `&mut [u8]`; only `len` changes after that.
//! - [`HostBytes::clear`] is the one place a refill begins: it waits until nothing outside the
//!   host still reads the buffer's last contents ([`HostMemory::wait_unused`]), so a reader
//!   never writes bytes a queued device copy has yet to read. Freeing waits the same way.

use std::collections::TryReserveError;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::Arc;

/// Memory a backend lends the readers for batches' bytes (the CUDA backend's pinned pool).
/// Every method may be called from any reader thread.
pub trait HostMemory: Send + Sync {
    /// `bytes` of memory, or `None` when there is none to give (the buffer then uses the
    /// heap). The memory stays valid until [`HostMemory::free`].
    fn alloc(&self, bytes: usize) -> Option<NonNull<u8>>;
    /// Return once nothing outside the host (a queued copy or decode) still reads the
    /// allocation at `ptr`: its contents may then be overwritten.
    fn wait_unused(&self, ptr: NonNull<u8>);
    /// Give back the allocation at `ptr` (after waiting as [`HostMemory::wait_unused`]).
    fn free(&self, ptr: NonNull<u8>, bytes: usize);
}

/// Where new batches' buffers come from: the heap (the default), or a backend's
/// [`HostMemory`] in allocations of `capacity` bytes (the largest batch the index allows).
#[derive(Clone, Default)]
pub struct BytesSource {
    pool: Option<Pool>,
}

#[derive(Clone)]
struct Pool {
    mem: Arc<dyn HostMemory>,
    capacity: usize,
    align: usize,
}

impl std::fmt::Debug for BytesSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.pool {
            Some(p) => write!(f, "BytesSource::Pool({} bytes, samples at multiples of {})", p.capacity, p.align),
            None => f.write_str("BytesSource::Heap"),
        }
    }
}

impl BytesSource {
    /// Buffers of `capacity` bytes from `memory`, each sample starting at a multiple of
    /// `align` (a power of two) from the allocation's start.
    pub fn pool(memory: Arc<dyn HostMemory>, capacity: usize, align: usize) -> Self {
        assert!(align.is_power_of_two(), "alignment {align} is not a power of two");
        Self { pool: Some(Pool { mem: memory, capacity: capacity.max(1), align }) }
    }

    /// Whether buffers come from a backend's memory.
    pub fn is_pool(&self) -> bool {
        self.pool.is_some()
    }

    /// A new, empty buffer: pooled when the pool has memory to give, else on the heap.
    pub fn new_bytes(&self) -> HostBytes {
        match &self.pool {
            Some(p) => HostBytes { store: p.store().unwrap_or(Store::Heap(Vec::new())), origin: None },
            None => HostBytes::default(),
        }
    }
}

impl Pool {
    /// An empty pooled store, `None` when the pool has no memory to give.
    fn store(&self) -> Option<Store> {
        let ptr = self.mem.alloc(self.capacity)?;
        // SAFETY: `alloc` returned `capacity` writable bytes that nothing else uses; they are
        // zeroed once here so the whole allocation is initialised (module invariants).
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, self.capacity) };
        Some(Store::Pool { mem: self.mem.clone(), ptr, cap: self.capacity, len: 0, align: self.align })
    }
}

enum Store {
    Heap(Vec<u8>),
    Pool { mem: Arc<dyn HostMemory>, ptr: NonNull<u8>, cap: usize, len: usize, align: usize },
}

/// A batch's bytes ([`super::ReadBatch::data`]); reads as a `[u8]`. See the module docs.
pub struct HostBytes {
    store: Store,
    // The pool a buffer that outgrew its allocation came from: its next refill goes back there.
    origin: Option<Pool>,
}

// SAFETY: a pooled buffer owns its allocation exclusively (nothing else writes it; the device
// only reads it between a backend's use and the wait in `clear`/`drop`), and `HostMemory` is
// `Send + Sync`; the heap variant is a `Vec`.
unsafe impl Send for HostBytes {}
// SAFETY: shared access only reads the bytes.
unsafe impl Sync for HostBytes {}

impl Default for HostBytes {
    fn default() -> Self {
        Self { store: Store::Heap(Vec::new()), origin: None }
    }
}

impl std::fmt::Debug for HostBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_pooled() { "pooled" } else { "heap" };
        write!(f, "HostBytes({} bytes, {kind})", self.len())
    }
}

impl HostBytes {
    /// Whether the bytes live in a backend's memory.
    pub fn is_pooled(&self) -> bool {
        matches!(self.store, Store::Pool { .. })
    }

    /// Start a refill: wait until nothing outside the host reads the last contents, then
    /// empty the buffer (its memory is kept; a buffer that outgrew its pooled allocation goes
    /// back to the pool when the pool has memory to give).
    pub fn clear(&mut self) {
        if let (Store::Heap(_), Some(pool)) = (&self.store, &self.origin) {
            if let Some(store) = pool.store() {
                self.store = store;
                self.origin = None;
            }
        }
        match &mut self.store {
            Store::Heap(v) => v.clear(),
            Store::Pool { mem, ptr, len, .. } => {
                mem.wait_unused(*ptr);
                *len = 0;
            }
        }
    }

    /// Where the next sample begins: a pooled buffer pads with zeros to its pool's alignment
    /// (each sample on its own cache lines, as a staging slot places it) while that fits;
    /// heap buffers stay packed.
    pub fn start_sample(&mut self) {
        if let Store::Pool { cap, len, align, .. } = &self.store {
            let to = len.next_multiple_of(*align);
            if to <= *cap {
                let n = to - len;
                self.grow_zeroed(n);
            }
        }
    }

    /// The bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        self[..].to_vec()
    }

    /// Make room for `additional` more bytes: a pooled buffer that cannot hold them moves to
    /// the heap (it never grows in place).
    fn reserve(&mut self, additional: usize) -> Result<(), TryReserveError> {
        match &mut self.store {
            Store::Heap(v) => v.try_reserve(additional),
            Store::Pool { mem, ptr, cap, len, align } => {
                if len.checked_add(additional).is_some_and(|end| end <= *cap) {
                    return Ok(());
                }
                let mut v = Vec::new();
                v.try_reserve(len.saturating_add(additional).max(*cap))?;
                // SAFETY: the first `len` bytes of the allocation are initialised (module
                // invariants) and ours.
                v.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) });
                mem.free(*ptr, *cap);
                log::debug!("a batch of {} bytes outgrew its pooled buffer of {cap}: it moves to the heap", *len + additional);
                self.origin = Some(Pool { mem: mem.clone(), capacity: *cap, align: *align });
                self.store = Store::Heap(v);
                Ok(())
            }
        }
    }

    /// Append `n` zero bytes (a sample's padding).
    fn grow_zeroed(&mut self, n: usize) {
        self.reserve(n).expect("the buffer could not grow");
        let start = self.len();
        match &mut self.store {
            Store::Heap(v) => v.resize(start + n, 0),
            Store::Pool { ptr, len, .. } => {
                // SAFETY: `reserve` left room for `n` bytes inside the allocation; they may
                // hold an earlier batch's bytes, so they are zeroed as a heap buffer's would be.
                unsafe { std::ptr::write_bytes(ptr.as_ptr().add(start), 0, n) };
                *len = start + n;
            }
        }
    }
}

/// `pread` of exactly `n` bytes of `file` at `offset` into `dst` (as `FileExt::read_exact_at`,
/// retried on `EINTR`, `UnexpectedEof` when the file ends first), through a raw pointer so
/// `dst` may be memory nothing has initialised yet (a `Vec`'s spare capacity): the kernel
/// writes it, and no `&[u8]` of it exists before it did.
///
/// # Safety
/// `dst .. dst + n` is writable memory that nothing else reads or writes meanwhile.
unsafe fn pread_exact(file: &File, dst: *mut u8, n: usize, offset: u64) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < n {
        let at = i64::try_from(offset + done as u64).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: `dst + done .. dst + n` is writable and ours (the caller's contract).
        let r = unsafe { libc::pread(file.as_raw_fd(), dst.add(done).cast(), n - done, at) };
        match r {
            0 => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "failed to fill whole buffer")),
            r if r > 0 => done += r as usize,
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

impl std::ops::Deref for HostBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.store {
            Store::Heap(v) => v,
            // SAFETY: `len ≤ cap` bytes of our allocation, initialised (module invariants).
            Store::Pool { ptr, len, .. } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl std::ops::DerefMut for HostBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.store {
            Store::Heap(v) => v,
            // SAFETY: as `deref`, and `&mut self` makes the access exclusive.
            Store::Pool { ptr, len, .. } => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), *len) },
        }
    }
}

impl Drop for HostBytes {
    fn drop(&mut self) {
        if let Store::Pool { mem, ptr, cap, .. } = &self.store {
            mem.free(*ptr, *cap);
        }
    }
}

/// What the sources append a sample's bytes to: a `Vec<u8>`, or a batch's [`HostBytes`].
pub trait ByteSink {
    /// Bytes held.
    fn len(&self) -> usize;
    /// Whether it holds none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Drop the bytes from `len` on (an append that failed part-way).
    fn truncate(&mut self, len: usize);
    /// Append `bytes`.
    fn extend_from_slice(&mut self, bytes: &[u8]);
    /// Make room for `n` more bytes; an error when the memory cannot be had (a damaged index
    /// asking for terabytes).
    fn try_reserve_more(&mut self, n: usize) -> Result<(), TryReserveError>;
    /// Append the `n` bytes of `file` at `offset`, read straight into the buffer's memory (a
    /// tar member's bytes): never zeroed first (a second pass over every sample's bytes: in a
    /// profile of the reader bench the zeroing took half the samples the read's copy did;
    /// BENCHMARKS.md). On an error nothing is appended.
    fn append_read_at(&mut self, file: &File, offset: u64, n: usize) -> std::io::Result<()>;
    /// Append everything `r` has left, as `Read::read_to_end`.
    fn read_to_end_from(&mut self, r: &mut dyn Read) -> std::io::Result<usize>;
    /// One `read(2)` at `file`'s position straight into the buffer's memory (not zeroed
    /// first) of at most `max` bytes, with room made for at least `min` of them (`min <=
    /// max`; a pooled buffer reads fewer than `max` when only that much room is left in its
    /// allocation); `EINTR` is retried. Returns the bytes appended, 0 at the file's end.
    fn append_read(&mut self, file: &File, min: usize, max: usize) -> std::io::Result<usize>;

    /// Append the whole of `file` from its position (a file just opened: all of it), where
    /// `expect` is the length its index recorded. A file still that long costs one `read(2)`
    /// (of `expect + 1` bytes, so that a file that grew since fills it and is read on to its
    /// end): std's `read_to_end` makes three more system calls a file (`statx` and `lseek` for
    /// a size hint, a last read that returns 0), about 7 % of a reader's time a photo into heap
    /// buffers (BENCHMARKS.md, "The readers alone"). A file that shrank, or a read that stops
    /// short, is read on until a read returns 0; one that stops exactly at `expect` ends there.
    /// When `expect` cannot be had in memory (a damaged index), the file's own size is read
    /// instead. On an error the bytes appended so far stay: the caller truncates.
    fn append_file(&mut self, file: &File, expect: usize) -> std::io::Result<()> {
        if self.try_reserve_more(expect).is_err() {
            return self.read_to_end_from(&mut &*file).map(drop);
        }
        let start = self.len();
        loop {
            let got = self.len() - start;
            if got > expect {
                return self.read_to_end_from(&mut &*file).map(drop);
            }
            let n = self.append_read(file, (expect - got).max(1), (expect - got).saturating_add(1))?;
            if n == 0 || self.len() - start == expect {
                return Ok(());
            }
        }
    }
}

/// One `read(2)` of up to `n` bytes at `file`'s position into `dst`, retried on `EINTR`,
/// through a raw pointer as [`pread_exact`] (memory nothing has initialised yet).
///
/// # Safety
/// `dst .. dst + n` is writable memory that nothing else reads or writes meanwhile.
unsafe fn read_once(file: &File, dst: *mut u8, n: usize) -> std::io::Result<usize> {
    loop {
        // SAFETY: `dst .. dst + n` is writable and ours (the caller's contract).
        let r = unsafe { libc::read(file.as_raw_fd(), dst.cast(), n) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl ByteSink for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes)
    }
    fn try_reserve_more(&mut self, n: usize) -> Result<(), TryReserveError> {
        self.try_reserve(n)
    }
    fn append_read_at(&mut self, file: &File, offset: u64, n: usize) -> std::io::Result<()> {
        self.try_reserve(n).map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))?;
        let start = Vec::len(self);
        // SAFETY: `try_reserve` left `n` bytes of spare capacity after `start`, which only the
        // read writes; the length covers them only once all were read.
        unsafe {
            pread_exact(file, self.as_mut_ptr().add(start), n, offset)?;
            self.set_len(start + n);
        }
        Ok(())
    }
    fn read_to_end_from(&mut self, r: &mut dyn Read) -> std::io::Result<usize> {
        r.read_to_end(self)
    }
    fn append_read(&mut self, file: &File, _min: usize, max: usize) -> std::io::Result<usize> {
        self.try_reserve(max).map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))?;
        let start = Vec::len(self);
        // SAFETY: `try_reserve` left `max` bytes of spare capacity after `start`, which only the
        // read writes; the length covers what it wrote.
        unsafe {
            let n = read_once(file, self.as_mut_ptr().add(start), max)?;
            self.set_len(start + n);
            Ok(n)
        }
    }
}

impl ByteSink for HostBytes {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn truncate(&mut self, to: usize) {
        match &mut self.store {
            Store::Heap(v) => v.truncate(to),
            Store::Pool { len, .. } => *len = (*len).min(to),
        }
    }
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.reserve(bytes.len()).expect("the buffer could not grow");
        match &mut self.store {
            Store::Heap(v) => v.extend_from_slice(bytes),
            Store::Pool { ptr, len, .. } => {
                // SAFETY: `reserve` left room for `bytes` inside the allocation, which `bytes`
                // (a borrow of other memory: `&mut self` is exclusive) does not overlap. Copied
                // straight in, not zeroed first: this is every cached or fetched sample's path.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.as_ptr().add(*len), bytes.len()) };
                *len += bytes.len();
            }
        }
    }
    fn try_reserve_more(&mut self, n: usize) -> Result<(), TryReserveError> {
        self.reserve(n)
    }
    fn append_read_at(&mut self, file: &File, offset: u64, n: usize) -> std::io::Result<()> {
        self.reserve(n).map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))?;
        match &mut self.store {
            Store::Heap(v) => v.append_read_at(file, offset, n),
            Store::Pool { ptr, len, .. } => {
                // SAFETY: `reserve` left room for `n` bytes after `len` inside the allocation
                // (initialised: module invariants, here an earlier batch's bytes, overwritten);
                // `&mut self` makes the access exclusive; `len` covers them once all were read.
                unsafe { pread_exact(file, ptr.as_ptr().add(*len), n, offset)? };
                *len += n;
                Ok(())
            }
        }
    }
    fn read_to_end_from(&mut self, r: &mut dyn Read) -> std::io::Result<usize> {
        if let Store::Heap(v) = &mut self.store {
            return r.read_to_end(v);
        }
        // Straight into the pooled allocation's room; when it is full, a small read says
        // whether there is more before the buffer moves to the heap for it.
        let start = self.len();
        loop {
            let (room, at) = match &mut self.store {
                Store::Pool { ptr, cap, len, .. } => {
                    // SAFETY: bytes `len..cap` of our allocation, initialised (module
                    // invariants); `&mut self` makes the access exclusive.
                    (unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr().add(*len), *cap - *len) }, *len)
                }
                Store::Heap(v) => {
                    r.read_to_end(v)?;
                    return Ok(v.len() - start);
                }
            };
            if room.is_empty() {
                let mut probe = [0u8; 64];
                let n = loop {
                    match r.read(&mut probe) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        other => break other?,
                    }
                };
                if n == 0 {
                    return Ok(self.len() - start);
                }
                self.extend_from_slice(&probe[..n]);
                continue;
            }
            let n = match r.read(room) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => other?,
            };
            if n == 0 {
                return Ok(self.len() - start);
            }
            if let Store::Pool { len, .. } = &mut self.store {
                *len = at + n;
            }
        }
    }
    fn append_read(&mut self, file: &File, min: usize, max: usize) -> std::io::Result<usize> {
        self.reserve(min).map_err(|e| std::io::Error::new(std::io::ErrorKind::OutOfMemory, e))?;
        match &mut self.store {
            Store::Heap(v) => v.append_read(file, min, max),
            Store::Pool { ptr, cap, len, .. } => {
                let n = max.min(*cap - *len);
                // SAFETY: bytes `len .. len + n` lie inside the allocation (`reserve` left at
                // least `min`, `n` is bounded by what is left), initialised (module
                // invariants); `&mut self` makes the access exclusive.
                let got = unsafe { read_once(file, ptr.as_ptr().add(*len), n)? };
                *len += got;
                Ok(got)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A pool on the heap that records what it was asked, and whether a buffer was written
    /// while it was marked busy (as a queued device read would be).
    #[derive(Default)]
    struct Recorder {
        log: Mutex<Vec<String>>,
        live: Mutex<Vec<(usize, usize)>>,
        budget: Mutex<usize>,
    }

    impl HostMemory for Recorder {
        fn alloc(&self, bytes: usize) -> Option<NonNull<u8>> {
            let mut b = self.budget.lock().unwrap();
            if *b == 0 {
                return None;
            }
            *b -= 1;
            let p = Box::leak(vec![0xAAu8; bytes].into_boxed_slice()).as_mut_ptr();
            self.live.lock().unwrap().push((p as usize, bytes));
            self.log.lock().unwrap().push(format!("alloc {bytes}"));
            NonNull::new(p)
        }
        fn wait_unused(&self, _ptr: NonNull<u8>) {
            self.log.lock().unwrap().push("wait".into());
        }
        fn free(&self, ptr: NonNull<u8>, bytes: usize) {
            let mut live = self.live.lock().unwrap();
            let i = live.iter().position(|&(p, n)| p == ptr.as_ptr() as usize && n == bytes).expect("freed what it allocated");
            live.remove(i);
            // SAFETY: leaked from a boxed slice of `bytes` in `alloc`.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr.as_ptr(), bytes)) });
            self.log.lock().unwrap().push(format!("free {bytes}"));
        }
    }

    fn recorder(budget: usize) -> Arc<Recorder> {
        let r = Arc::new(Recorder::default());
        *r.budget.lock().unwrap() = budget;
        r
    }

    #[test]
    fn a_pooled_buffer_fills_in_place_and_waits_before_each_refill_and_its_free() {
        let r = recorder(1);
        let src = BytesSource::pool(r.clone(), 256, 64);
        let mut b = src.new_bytes();
        assert!(b.is_pooled());
        let base = b.as_ptr();
        assert_eq!(b.len(), 0);
        b.extend_from_slice(b"abc");
        b.start_sample();
        assert_eq!(b.len(), 64);
        let f = tempfile_with(b"xx0123456789yy");
        b.append_read_at(&f, 2, 10).unwrap();
        assert_eq!(&b[..3], b"abc");
        assert!(b[3..64].iter().all(|&x| x == 0), "padding is zeros");
        assert_eq!(&b[64..], b"0123456789");
        assert_eq!(b.as_ptr(), base, "no copy: the bytes are where the pool put them");
        b.truncate(2);
        assert_eq!(&b[..], b"ab");
        b.clear();
        assert!(b.is_empty());
        drop(b);
        assert_eq!(*r.log.lock().unwrap(), ["alloc 256", "wait", "free 256"]);
        assert!(r.live.lock().unwrap().is_empty());
    }

    #[test]
    fn a_batch_larger_than_its_pooled_buffer_moves_to_the_heap_with_its_bytes() {
        let r = recorder(1);
        let mut b = BytesSource::pool(r.clone(), 8, 64).new_bytes();
        b.extend_from_slice(b"12345");
        b.extend_from_slice(b"6789");
        assert!(!b.is_pooled());
        assert_eq!(&b[..], b"123456789");
        assert!(r.live.lock().unwrap().is_empty(), "the pooled allocation went back");
        // Its next refill is in the pool again (while the pool has memory to give).
        *r.budget.lock().unwrap() = 1;
        b.clear();
        assert!(b.is_pooled() && b.is_empty());
        b.extend_from_slice(b"12");
        assert_eq!(&b[..], b"12");
        // Padding never moves a buffer: past the allocation it is not added.
        let mut p = BytesSource::pool(recorder(1), 8, 64).new_bytes();
        p.extend_from_slice(b"1234567");
        p.start_sample();
        assert!(p.is_pooled() && p.len() == 7);
    }

    #[test]
    fn reading_a_file_fills_the_pooled_room_and_moves_only_when_there_is_more() {
        let data: Vec<u8> = (0..200u8).collect();
        for (cap, pooled) in [(200usize, true), (256, true), (199, false), (64, false)] {
            let mut b = BytesSource::pool(recorder(1), cap, 64).new_bytes();
            // A reader that hands out at most 7 bytes a call.
            struct Trickle<'a>(&'a [u8]);
            impl Read for Trickle<'_> {
                fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                    let n = out.len().min(7).min(self.0.len());
                    out[..n].copy_from_slice(&self.0[..n]);
                    self.0 = &self.0[n..];
                    Ok(n)
                }
            }
            let n = b.read_to_end_from(&mut Trickle(&data)).unwrap();
            assert_eq!((n, &b[..]), (200, &data[..]), "capacity {cap}");
            assert_eq!(b.is_pooled(), pooled, "capacity {cap}");
        }
    }

    #[test]
    fn a_pool_with_nothing_to_give_and_the_default_source_make_heap_buffers() {
        let mut b = BytesSource::pool(recorder(0), 64, 64).new_bytes();
        assert!(!b.is_pooled());
        b.extend_from_slice(b"x");
        b.start_sample();
        assert_eq!(&b[..], b"x", "heap buffers stay packed");
        assert!(!BytesSource::default().new_bytes().is_pooled());
    }

    /// A file holding `bytes`, open for reading (its name is gone already).
    fn tempfile_with(bytes: &[u8]) -> File {
        use std::io::{Seek, Write};
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f.rewind().unwrap();
        f
    }

    #[test]
    fn vec_and_host_bytes_append_alike() {
        let f = tempfile_with(b"..cde..");
        let mut v: Vec<u8> = Vec::new();
        let mut h = HostBytes::default();
        let mut p = BytesSource::pool(recorder(1), 64, 1).new_bytes();
        for s in [&mut v as &mut dyn ByteSink, &mut h, &mut p] {
            s.extend_from_slice(b"ab");
            s.try_reserve_more(3).unwrap();
            s.append_read_at(&f, 2, 3).unwrap();
            s.read_to_end_from(&mut &b"fg"[..]).unwrap();
            s.truncate(6);
            assert_eq!(s.len(), 6);
        }
        assert!(p.is_pooled());
        assert_eq!(v, h.to_vec());
        assert_eq!(v, p.to_vec());
        assert_eq!(v, b"abcdef");
    }

    /// A read past the file's end (a truncated shard) or at an offset no file has is an error
    /// and appends nothing, to a heap buffer and to a pooled one whose room holds an earlier
    /// batch's bytes; the bytes read into that room are the file's, not what was there.
    #[test]
    fn a_read_at_past_the_end_appends_nothing_and_a_read_overwrites_the_stale_room() {
        let f = tempfile_with(b"0123456789");
        let mut v: Vec<u8> = b"ab".to_vec();
        let e = v.append_read_at(&f, 8, 4).unwrap_err();
        assert_eq!((e.kind(), &v[..]), (std::io::ErrorKind::UnexpectedEof, &b"ab"[..]));
        assert!(v.append_read_at(&f, u64::MAX - 1, 4).is_err());
        assert_eq!(v, b"ab");
        let mut p = BytesSource::pool(recorder(1), 64, 1).new_bytes();
        p.extend_from_slice(&[0xEE; 40]);
        p.clear();
        p.extend_from_slice(b"ab");
        assert_eq!(p.append_read_at(&f, 7, 5).unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(&p[..], b"ab", "a failed read appends nothing");
        p.append_read_at(&f, 3, 6).unwrap();
        assert_eq!(&p[..], b"ab345678");
        assert!(p.is_pooled());
    }

    #[test]
    fn a_file_is_read_whole_whatever_its_indexed_length_says() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        let f = tempfile_with(&data);
        // (indexed length: exact, the file grew since, shrank since, empty index, a damaged one)
        for expect in [data.len(), 100, data.len() + 900, 0, usize::MAX] {
            let mut v: Vec<u8> = b"ab".to_vec();
            let mut fr = &f;
            std::io::Seek::rewind(&mut fr).unwrap();
            v.append_file(&f, expect).unwrap();
            assert_eq!((&v[..2], &v[2..]), (&b"ab"[..], &data[..]), "heap, indexed {expect}");
            for cap in [8192, data.len() + 2, data.len() + 3, 64] {
                // Room for the probe byte or not, and a pool too small for the file.
                let mut p = BytesSource::pool(recorder(1), cap, 1).new_bytes();
                p.extend_from_slice(b"ab");
                std::io::Seek::rewind(&mut fr).unwrap();
                p.append_file(&f, expect).unwrap();
                assert_eq!(&p[2..], &data[..], "pooled in {cap}, indexed {expect}");
                // It leaves the pool only when the file or its indexed length does not fit (a
                // length memory cannot hold is not reserved: the file's own size is read).
                let fits = cap >= data.len() + 2 && (expect == usize::MAX || expect + 2 <= cap);
                assert_eq!(p.is_pooled(), fits, "pooled in {cap}, indexed {expect}");
            }
        }
        let empty = tempfile_with(b"");
        for expect in [0, 10] {
            let mut v = Vec::new();
            v.append_file(&empty, expect).unwrap();
            assert!(v.is_empty());
        }
    }

    #[test]
    fn a_pooled_buffer_refuses_a_length_past_the_address_space_instead_of_wrapping() {
        // A crafted index's length near usize::MAX: `len + n` wrapped and the pool said it had
        // room (a read into it would then write past the allocation); now it is refused, and
        // the buffer is left as it was.
        let mut p = BytesSource::pool(recorder(1), 64, 1).new_bytes();
        p.extend_from_slice(b"abc");
        for n in [usize::MAX, usize::MAX - 2, usize::MAX - 60] {
            assert!(p.try_reserve_more(n).is_err(), "{n}");
            assert!(p.is_pooled() && &p[..] == b"abc");
        }
        let f = tempfile_with(b"0123456789");
        assert!(p.append_read_at(&f, 0, usize::MAX - 1).is_err());
        assert_eq!(&p[..], b"abc");
    }
}
