//! Contexts, streams, events, and the hazard checker.
//!
//! **Streams.** Every stream is a worker thread with a queue. Before each op it sleeps a
//! random time drawn from the stream's own seeded generator, so nothing is done when the host
//! call returns and the interleaving of streams changes from seed to seed. An op may depend on
//! other streams' progress (an event wait; the legacy stream's implicit synchronisation with
//! blocking streams), and runs only after it.
//!
//! **Happens-before.** Every actor — each stream, and the host (one actor for all host
//! threads: their own synchronisation is invisible here, and treating them as one never
//! reports a false hazard) — has a vector clock. Enqueueing an op on a stream joins the host's
//! clock into the stream's (the host enqueued it after everything it knows of); an event
//! captures its stream's clock when recorded; a wait joins the event's clock into the waiting
//! stream's; a completed synchronize, event synchronize or successful query joins into the
//! host's. Access A (actor X at X's count a) happens before access B iff B's clock has
//! X ≥ a. All of this is decided when the host makes the calls, so what the checker reports
//! does not depend on the random delays.
//!
//! **Hazards.** Every op declares the byte ranges it reads and writes (copies and memsets
//! exactly; kernels: from each pointer parameter to the end of its allocation, read for
//! `const` pointees, read and write otherwise; nvJPEG: each decoded image's rows). Two accesses
//! to overlapping bytes of one allocation, at least one a write, neither happening before the
//! other, are a hazard. That covers a stream reading what another still writes (no event
//! between them), two streams writing the same memory, the host's nvJPEG hardware decode
//! writing what a kernel still queued on its stream will overwrite, and freeing memory a
//! stream still uses.

use crate::mem::{self, Alloc};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub type CUresult = i32;
pub const SUCCESS: CUresult = 0;
pub const INVALID_VALUE: CUresult = 1;
pub const OUT_OF_MEMORY: CUresult = 2;
pub const NOT_INITIALIZED: CUresult = 3;
pub const INVALID_DEVICE: CUresult = 101;
pub const INVALID_IMAGE: CUresult = 200;
pub const INVALID_CONTEXT: CUresult = 201;
pub const INVALID_HANDLE: CUresult = 400;
pub const NOT_FOUND: CUresult = 500;
pub const NOT_READY: CUresult = 600;
pub const ILLEGAL_ADDRESS: CUresult = 700;
pub const LAUNCH_OUT_OF_RESOURCES: CUresult = 701;
pub const LAUNCH_FAILED: CUresult = 719;
pub const NOT_SUPPORTED: CUresult = 801;

mod guards;
pub use guards::guards_forget;
use guards::{guard_add, guards_release};

// ---- contexts --------------------------------------------------------------------------

/// The device's primary context. One device, so one; retained and released by count, and
/// checked for leaks when the count returns to zero.
pub struct Ctx {
    refs: Mutex<u32>,
    /// The error a failed kernel leaves behind: every later call returns it, as on a GPU.
    sticky: Mutex<Option<CUresult>>,
    /// `cuCtxGetFlags` / `cuCtxSetFlags`: starts as `CU_CTX_MAP_HOST` (8) with automatic
    /// scheduling, so a setter that overwrites the bits it did not mean to change is seen.
    pub flags: std::sync::atomic::AtomicU32,
}

pub fn primary() -> &'static Ctx {
    static P: OnceLock<Ctx> = OnceLock::new();
    P.get_or_init(|| Ctx { refs: Mutex::new(0), sticky: Mutex::new(None), flags: std::sync::atomic::AtomicU32::new(8) })
}

impl Ctx {
    pub fn handle(&'static self) -> usize {
        self as *const Ctx as usize
    }
    pub fn retain(&'static self) -> usize {
        *self.refs.lock().unwrap() += 1;
        self.handle()
    }
    /// Release one reference; at zero the context is destroyed: what is still allocated in it
    /// (memory, streams, events, modules) is a leak, reported and then freed as the driver
    /// frees it.
    pub fn release(&'static self) -> CUresult {
        let mut r = self.refs.lock().unwrap();
        if *r == 0 {
            crate::report("invalid handle", "cuDevicePrimaryCtxRelease: the primary context is not retained".into());
            return INVALID_CONTEXT;
        }
        *r -= 1;
        if *r > 0 {
            return SUCCESS;
        }
        drop(r);
        self.destroy();
        SUCCESS
    }

    fn destroy(&'static self) {
        let h = self.handle();
        // Work still queued finishes first (the driver waits too).
        for s in streams_of(h) {
            s.drain();
        }
        let leaks = mem::live_in(h);
        if !leaks.is_empty() {
            let bytes: usize = leaks.iter().map(|a| a.len).sum();
            let list: Vec<String> = leaks.iter().take(8).map(Alloc::label).collect();
            crate::report(
                "leak",
                format!(
                    "context destroyed with {} allocation(s) ({bytes} bytes) never freed: {}{}",
                    leaks.len(),
                    list.join("; "),
                    if leaks.len() > 8 { format!("; and {} more", leaks.len() - 8) } else { String::new() }
                ),
            );
            for a in leaks {
                let _ = mem::free(a.base, a.kind, "context destruction");
                forget_access(a.id);
            }
        }
        let left: Vec<Arc<Stream>> = streams_of(h).into_iter().filter(|s| !s.is_default()).collect();
        if !left.is_empty() {
            crate::report("leak", format!("context destroyed with {} stream(s) never destroyed", left.len()));
            for s in left {
                destroy_stream(&s);
            }
        }
        let ev = events_alive();
        if ev > 0 {
            crate::report("leak", format!("context destroyed with {ev} event(s) never destroyed"));
            EVENTS.lock().unwrap().clear();
        }
        *self.sticky.lock().unwrap() = None;
    }

    pub fn active(&self) -> bool {
        *self.refs.lock().unwrap() > 0
    }
}

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

pub fn current_handle() -> usize {
    CURRENT.with(|c| c.get())
}

pub fn set_current(h: usize) {
    CURRENT.with(|c| c.set(h));
}

/// The calling thread's current context, as every call that works in one requires. No
/// current context (or a destroyed one) is a finding and `CUDA_ERROR_INVALID_CONTEXT`; a
/// context a failed kernel poisoned returns that kernel's error.
pub fn require(call: &str) -> Result<&'static Ctx, CUresult> {
    let h = current_handle();
    let p = primary();
    if h == 0 {
        crate::report(
            "no current context",
            format!("{call} on a thread with no current context (thread {:?})", std::thread::current().id()),
        );
        return Err(INVALID_CONTEXT);
    }
    if h != p.handle() || !p.active() {
        crate::report("no current context", format!("{call}: the thread's current context {h:#x} was destroyed"));
        return Err(INVALID_CONTEXT);
    }
    if let Some(e) = *p.sticky.lock().unwrap() {
        return Err(e);
    }
    Ok(p)
}

fn poison(code: CUresult) {
    let mut s = primary().sticky.lock().unwrap();
    if s.is_none() {
        *s = Some(code);
    }
}

// ---- clocks ----------------------------------------------------------------------------

type Clock = Vec<u64>;

fn join(a: &mut Clock, b: &Clock) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

fn at(c: &Clock, actor: usize) -> u64 {
    c.get(actor).copied().unwrap_or(0)
}

fn tick(c: &mut Clock, actor: usize, v: u64) {
    if c.len() <= actor {
        c.resize(actor + 1, 0);
    }
    c[actor] = v;
}

/// One read or write of `[start, end)` in allocation `alloc`.
#[derive(Clone, Debug)]
pub struct Access {
    pub alloc: Alloc,
    pub start: usize,
    pub end: usize,
    pub write: bool,
    pub what: String,
}

impl Access {
    pub fn new(alloc: Alloc, start: usize, end: usize, write: bool, what: impl Into<String>) -> Self {
        Self { alloc, start, end, write, what: what.into() }
    }
}

struct Past {
    actor: usize,
    epoch: u64,
    start: usize,
    end: usize,
    write: bool,
    what: String,
}

#[derive(Default)]
struct Hb {
    host: Clock,
    host_epoch: u64,
    streams: HashMap<usize, Clock>,
    past: HashMap<u64, Vec<Past>>,
    hazards: u64,
}

static HB: Mutex<Option<Hb>> = Mutex::new(None);

fn hb<T>(f: impl FnOnce(&mut Hb) -> T) -> T {
    let mut g = HB.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Hb::default))
}

fn actor_name(actor: usize) -> String {
    if actor == 0 {
        "the host".into()
    } else {
        format!("stream {actor}")
    }
}

const PAST_KEPT: usize = 64;

fn check_accesses(h: &mut Hb, actor: usize, epoch: u64, clock: &Clock, accesses: &[Access]) {
    for a in accesses {
        let list = h.past.entry(a.alloc.id).or_default();
        let mut found = None;
        for p in list.iter() {
            let ordered = p.actor == actor || at(clock, p.actor) >= p.epoch;
            if !ordered && (p.write || a.write) && p.start < a.end && a.start < p.end {
                found = Some(format!(
                    "{} {} bytes {:#x}..{:#x} of {} as {} on {}, while {} on {} {} them with no event or synchronisation between",
                    if a.write { "writes" } else { "reads" },
                    a.end - a.start,
                    a.start,
                    a.end,
                    a.alloc.label(),
                    a.what,
                    actor_name(actor),
                    p.what,
                    actor_name(p.actor),
                    if p.write { "writes" } else { "reads" },
                ));
                break;
            }
        }
        // What this access makes obsolete: earlier accesses it is ordered after and covers,
        // when it writes.
        if a.write {
            list.retain(|p| !((p.actor == actor || at(clock, p.actor) >= p.epoch) && a.start <= p.start && p.end <= a.end));
        }
        list.push(Past { actor, epoch, start: a.start, end: a.end, write: a.write, what: a.what.clone() });
        if list.len() > PAST_KEPT {
            list.remove(0);
        }
        if let Some(msg) = found {
            h.hazards += 1;
            crate::report("hazard", msg);
        }
    }
}

fn forget_access(alloc: u64) {
    hb(|h| {
        h.past.remove(&alloc);
    });
}

/// The host touches device memory now, outside any stream (nvJPEG's hardware decode writes
/// its outputs at call time).
pub fn host_access(accesses: &[Access]) {
    hb(|h| {
        h.host_epoch += 1;
        let e = h.host_epoch;
        tick(&mut h.host, 0, e);
        let c = h.host.clone();
        check_accesses(h, 0, e, &c, accesses);
    });
}

// ---- streams ---------------------------------------------------------------------------

/// The result of an op that failed on the device: the error later calls return, the kind of
/// finding and its sentence.
pub struct OpError {
    pub code: CUresult,
    pub kind: &'static str,
    pub message: String,
}

type Work = Box<dyn FnOnce() -> Result<(), OpError> + Send>;

struct Op {
    seq: u64,
    deps: Vec<(Arc<Stream>, u64)>,
    work: Option<Work>,
    event_time: Option<Arc<Mutex<Option<Instant>>>>,
}

struct Queue {
    ops: VecDeque<Op>,
    enqueued: u64,
    shutdown: bool,
}

pub struct Stream {
    pub actor: usize,
    pub ctx: usize,
    /// Created without `CU_STREAM_NON_BLOCKING` (or the legacy or a per-thread default stream):
    /// synchronises with the legacy stream.
    pub blocking: bool,
    kind: StreamKind,
    q: Mutex<Queue>,
    cv: Condvar,
    completed: AtomicU64,
    /// Events this stream was made to wait on (handles), for tests that observe a consumer.
    pub waited: Mutex<Vec<usize>>,
    /// Events recorded on this stream (handles, in order), for the same tests.
    pub recorded: Mutex<Vec<usize>>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum StreamKind {
    Created,
    Legacy,
    PerThread,
}

static DONE: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
static NEXT_ACTOR: AtomicU64 = AtomicU64::new(1);
static STREAMS: Mutex<Vec<Arc<Stream>>> = Mutex::new(Vec::new());
static OPS_RUN: AtomicU64 = AtomicU64::new(0);

impl Stream {
    fn new(ctx: usize, blocking: bool, kind: StreamKind) -> Arc<Stream> {
        let actor = NEXT_ACTOR.fetch_add(1, Ordering::Relaxed) as usize;
        let s = Arc::new(Stream {
            actor,
            ctx,
            blocking,
            kind,
            q: Mutex::new(Queue { ops: VecDeque::new(), enqueued: 0, shutdown: false }),
            cv: Condvar::new(),
            completed: AtomicU64::new(0),
            waited: Mutex::new(Vec::new()),
            recorded: Mutex::new(Vec::new()),
            worker: Mutex::new(None),
        });
        let w = s.clone();
        let seed = crate::config().seed ^ (actor as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let handle = std::thread::Builder::new()
            .name(format!("stoke-sim stream {actor}"))
            .spawn(move || w.run(seed))
            .expect("stoke-sim: spawning a stream worker");
        *s.worker.lock().unwrap() = Some(handle);
        STREAMS.lock().unwrap().push(s.clone());
        hb(|h| {
            h.streams.insert(actor, Clock::new());
        });
        s
    }

    pub fn handle(self: &Arc<Self>) -> usize {
        match self.kind {
            StreamKind::Legacy => 0,
            _ => Arc::as_ptr(self) as usize,
        }
    }

    fn is_default(&self) -> bool {
        self.kind != StreamKind::Created
    }

    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    pub fn enqueued(&self) -> u64 {
        self.q.lock().unwrap().enqueued
    }

    fn run(self: Arc<Self>, seed: u64) {
        let mut rng = seed | 1;
        let max_delay = crate::config().delay_us;
        loop {
            let op = {
                let mut q = self.q.lock().unwrap();
                loop {
                    if let Some(op) = q.ops.pop_front() {
                        break op;
                    }
                    if q.shutdown {
                        return;
                    }
                    q = self.cv.wait(q).unwrap();
                }
            };
            for (s, seq) in &op.deps {
                wait_for(s, *seq);
            }
            if max_delay > 0 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                std::thread::sleep(Duration::from_micros(rng % (max_delay + 1)));
            }
            if let Some(t) = &op.event_time {
                *t.lock().unwrap() = Some(Instant::now());
            }
            if let Some(work) = op.work {
                if primary().sticky.lock().unwrap().is_none() {
                    if let Err(e) = work() {
                        crate::report(e.kind, e.message);
                        poison(e.code);
                    }
                }
            }
            OPS_RUN.fetch_add(1, Ordering::Relaxed);
            let _g = DONE.0.lock().unwrap();
            self.completed.store(op.seq, Ordering::Release);
            DONE.1.notify_all();
        }
    }

    /// Wait until everything enqueued so far has run.
    fn drain(self: &Arc<Self>) {
        let e = self.enqueued();
        wait_for(self, e);
    }
}

fn wait_for(s: &Arc<Stream>, seq: u64) {
    let mut g = DONE.0.lock().unwrap();
    while s.completed() < seq {
        g = DONE.1.wait(g).unwrap();
    }
}

fn streams_of(ctx: usize) -> Vec<Arc<Stream>> {
    STREAMS.lock().unwrap().iter().filter(|s| s.ctx == ctx).cloned().collect()
}

pub fn create_stream(ctx: usize, non_blocking: bool) -> Arc<Stream> {
    Stream::new(ctx, !non_blocking, StreamKind::Created)
}

fn legacy() -> Arc<Stream> {
    static L: OnceLock<Arc<Stream>> = OnceLock::new();
    L.get_or_init(|| Stream::new(primary().handle(), true, StreamKind::Legacy)).clone()
}

thread_local! {
    static PER_THREAD: std::cell::RefCell<Option<Arc<Stream>>> = const { std::cell::RefCell::new(None) };
}

/// `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD` as handles.
pub const STREAM_LEGACY: usize = 1;
pub const STREAM_PER_THREAD: usize = 2;

/// The stream a handle names: 0 and `CU_STREAM_LEGACY` the legacy stream, `CU_STREAM_PER_THREAD`
/// the calling thread's own default stream, else a created, live stream. Anything else is a
/// finding naming `call`.
pub fn stream(handle: usize, call: &str) -> Result<Arc<Stream>, CUresult> {
    match handle {
        0 | STREAM_LEGACY => Ok(legacy()),
        STREAM_PER_THREAD => {
            Ok(PER_THREAD
                .with(|p| p.borrow_mut().get_or_insert_with(|| Stream::new(primary().handle(), true, StreamKind::PerThread)).clone()))
        }
        h => {
            let found = STREAMS.lock().unwrap().iter().find(|s| s.kind == StreamKind::Created && Arc::as_ptr(s) as usize == h).cloned();
            found.ok_or_else(|| {
                crate::report("invalid handle", format!("{call}: stream {h:#x} is not a live stream"));
                INVALID_HANDLE
            })
        }
    }
}

pub fn destroy_stream(s: &Arc<Stream>) {
    // The driver lets queued work finish after cuStreamDestroy returns; here it finishes first.
    s.drain();
    {
        let mut q = s.q.lock().unwrap();
        q.shutdown = true;
        s.cv.notify_all();
    }
    if let Some(h) = s.worker.lock().unwrap().take() {
        let _ = h.join();
    }
    STREAMS.lock().unwrap().retain(|x| !Arc::ptr_eq(x, s));
}

/// Everything an op is: what it touches (checked for hazards now), extra streams it waits
/// for, and the work to run on the device.
pub struct Enqueue {
    pub accesses: Vec<Access>,
    pub wait: Option<(Arc<Stream>, u64, Clock)>,
    pub work: Option<Work>,
    pub event_time: Option<Arc<Mutex<Option<Instant>>>>,
}

impl Enqueue {
    pub fn work(accesses: Vec<Access>, work: impl FnOnce() -> Result<(), OpError> + Send + 'static) -> Self {
        Self { accesses, wait: None, work: Some(Box::new(work)), event_time: None }
    }
}

/// Put an op on `s`; returns its sequence number and the stream's clock after it.
pub fn enqueue(s: &Arc<Stream>, e: Enqueue) -> (u64, Clock) {
    let mut deps = Vec::new();
    if let Some((w, seq, _)) = &e.wait {
        deps.push((w.clone(), *seq));
    }
    // The legacy stream and blocking streams wait for each other's earlier work.
    let others: Vec<Arc<Stream>> = if s.kind == StreamKind::Legacy {
        streams_of(s.ctx).into_iter().filter(|x| x.blocking && x.kind != StreamKind::Legacy).collect()
    } else if s.blocking {
        vec![legacy()]
    } else {
        vec![]
    };
    // Each queue is locked alone (the legacy stream and a blocking one enqueue concurrently).
    let others: Vec<(Arc<Stream>, u64)> = others
        .into_iter()
        .map(|o| {
            let n = o.enqueued();
            (o, n)
        })
        .collect();
    let mut q = s.q.lock().unwrap();
    let seq = q.enqueued + 1;
    let clock = hb(|h| {
        let mut c = h.streams.get(&s.actor).cloned().unwrap_or_default();
        let host = h.host.clone();
        join(&mut c, &host);
        for (o, n) in &others {
            let n = *n;
            if n > 0 {
                deps.push((o.clone(), n));
                if let Some(oc) = h.streams.get(&o.actor) {
                    let oc = oc.clone();
                    join(&mut c, &oc);
                }
            }
        }
        if let Some((_, _, wc)) = &e.wait {
            join(&mut c, wc);
        }
        tick(&mut c, s.actor, seq);
        check_accesses(h, s.actor, seq, &c, &e.accesses);
        h.streams.insert(s.actor, c.clone());
        c
    });
    guard_add(s.actor, seq, &e.accesses);
    q.enqueued = seq;
    q.ops.push_back(Op { seq, deps, work: e.work, event_time: e.event_time });
    s.cv.notify_all();
    (seq, clock)
}

/// The host waits for everything enqueued on `s` so far, and knows it happened.
pub fn synchronize(s: &Arc<Stream>) {
    let n = s.enqueued();
    let c = hb(|h| h.streams.get(&s.actor).cloned().unwrap_or_default());
    wait_for(s, n);
    host_knows(&c);
}

pub fn host_knows(c: &Clock) {
    let host = hb(|h| {
        join(&mut h.host, c);
        h.host.clone()
    });
    guards_release(&host);
}

/// Every stream of the context, as `cuCtxSynchronize`.
pub fn synchronize_all(ctx: usize) {
    for s in streams_of(ctx) {
        synchronize(&s);
    }
}

/// Whether `s` has run everything enqueued (`cuStreamQuery`); on yes the host knows it.
pub fn query(s: &Arc<Stream>) -> bool {
    let n = s.enqueued();
    let c = hb(|h| h.streams.get(&s.actor).cloned().unwrap_or_default());
    if s.completed() >= n {
        host_knows(&c);
        true
    } else {
        false
    }
}

// ---- events ----------------------------------------------------------------------------

pub struct Event {
    pub timing: bool,
    /// Where it was last recorded: the stream, the op's number, the stream's clock.
    pub rec: Mutex<Option<(Arc<Stream>, u64, Clock)>>,
    pub time: Arc<Mutex<Option<Instant>>>,
}

static EVENTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn events_alive() -> usize {
    EVENTS.lock().unwrap().len()
}

pub fn create_event(timing: bool) -> usize {
    let e = Box::new(Event { timing, rec: Mutex::new(None), time: Arc::new(Mutex::new(None)) });
    let h = Box::into_raw(e) as usize;
    EVENTS.lock().unwrap().push(h);
    h
}

/// The event a handle names, or a finding naming `call`.
pub fn event(h: usize, call: &str) -> Result<&'static Event, CUresult> {
    if EVENTS.lock().unwrap().contains(&h) {
        // SAFETY: `h` came from Box::into_raw in create_event and is still registered (not
        // destroyed), so it points to a live Event.
        Ok(unsafe { &*(h as *const Event) })
    } else {
        crate::report("invalid handle", format!("{call}: event {h:#x} is not a live event"));
        Err(INVALID_HANDLE)
    }
}

pub fn destroy_event(h: usize) -> bool {
    let mut evs = EVENTS.lock().unwrap();
    let Some(i) = evs.iter().position(|x| *x == h) else { return false };
    evs.remove(i);
    // Events are small and a late record or wait by another thread must not touch freed
    // memory: they are kept (leaked) rather than freed.
    true
}

pub fn record(e: &Event, s: &Arc<Stream>, handle: usize) {
    s.recorded.lock().unwrap().push(handle);
    *e.time.lock().unwrap() = None;
    let time = if e.timing { Some(e.time.clone()) } else { None };
    let (seq, clock) = enqueue(s, Enqueue { accesses: vec![], wait: None, work: None, event_time: time });
    *e.rec.lock().unwrap() = Some((s.clone(), seq, clock));
}

pub fn wait_event(s: &Arc<Stream>, e: &Event, handle: usize) {
    s.waited.lock().unwrap().push(handle);
    let rec = e.rec.lock().unwrap().clone();
    if let Some(r) = rec {
        enqueue(s, Enqueue { accesses: vec![], wait: Some(r), work: None, event_time: None });
    }
}

pub fn event_done(e: &Event) -> bool {
    match &*e.rec.lock().unwrap() {
        None => true,
        Some((s, seq, c)) => {
            if s.completed() >= *seq {
                host_knows(c);
                true
            } else {
                false
            }
        }
    }
}

pub fn event_sync(e: &Event) {
    let rec = e.rec.lock().unwrap().clone();
    if let Some((s, seq, c)) = rec {
        wait_for(&s, seq);
        host_knows(&c);
    }
}

pub(crate) fn stats_json() -> String {
    let hazards = hb(|h| h.hazards);
    format!("\"ops_run\":{},\"hazards\":{},\"streams\":{}", OPS_RUN.load(Ordering::Relaxed), hazards, STREAMS.lock().unwrap().len())
}

/// How many times stream `stream` (a handle; 1 the legacy stream, 2 the calling thread's
/// per-thread stream) was made to wait on an event (`cuStreamWaitEvent`), or -1 for a handle
/// that is no stream.
#[no_mangle]
pub extern "C" fn stoke_sim_stream_waits(stream: usize) -> i64 {
    match self::stream(stream, "stoke_sim_stream_waits") {
        Ok(s) => s.waited.lock().unwrap().len() as i64,
        Err(_) => -1,
    }
}

/// How many events were recorded on stream `stream` (`cuEventRecord`), or -1 as above.
#[no_mangle]
pub extern "C" fn stoke_sim_stream_records(stream: usize) -> i64 {
    match self::stream(stream, "stoke_sim_stream_records") {
        Ok(s) => s.recorded.lock().unwrap().len() as i64,
        Err(_) => -1,
    }
}

/// Whether stream `stream` was made to wait on event `event` (handles): 1 yes, 0 no, -1 no
/// such stream.
#[no_mangle]
pub extern "C" fn stoke_sim_stream_waited_on(stream: usize, event: usize) -> i32 {
    match self::stream(stream, "stoke_sim_stream_waited_on") {
        Ok(s) => s.waited.lock().unwrap().contains(&event) as i32,
        Err(_) => -1,
    }
}
