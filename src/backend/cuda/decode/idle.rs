//! The host marks [`crate::backend::EngineIdle`] is measured from ([`IdleMarks`]) and its
//! parts from them ([`idle_parts`]).

use std::time::Instant;

/// When the backend started the batch being decoded and returned the one before it, and when
/// the last batch that called the engine was decoded: the ends of
/// [`crate::backend::EngineIdle`]'s parts that lie outside [`super::GpuDecoder::decode_routed`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IdleMarks {
    returned: Option<Instant>,
    prev_returned: Option<Instant>,
    started: Option<Instant>,
    decoded: Option<Instant>,
}

impl IdleMarks {
    /// The backend starts a batch at `at`.
    pub(super) fn start(&mut self, at: Instant) {
        self.prev_returned = self.returned.take();
        self.started = Some(at);
        self.decoded = None;
    }

    /// When the batch being decoded was started, if the backend said.
    pub(super) fn started(&self) -> Option<Instant> {
        self.started
    }

    /// The backend hands its batch over at `at`: the seconds since its decode returned when it
    /// called the engine (the `tail` part), else 0.
    pub(super) fn hand_over(&mut self, at: Instant) -> f64 {
        self.returned = Some(at);
        between(self.decoded.take(), Some(at))
    }

    /// The batch that called the engine is decoded now: its parts, from its marks in the
    /// producer's order (first call, last call's return, CUDA route joined, CPU route done,
    /// canaries checked), the seconds it waited for its arena and those of the batched
    /// GPU-hybrid call before its first engine call ([`idle_parts`]).
    pub(super) fn decoded(&mut self, arena_wait: f64, hybrid: f64, marks: [Instant; 5]) -> crate::backend::EngineIdle {
        let now = Instant::now();
        let [first_call, engine_end, joined, cpu_done, checked] = marks;
        self.decoded = Some(now);
        idle_parts(self.prev_returned, self.started, (arena_wait, hybrid), [first_call, engine_end, joined, cpu_done, checked, now])
    }
}

/// Seconds from `a` to `b`, 0 when either mark is missing (or `b` is not after `a`).
fn between(a: Option<Instant>, b: Option<Instant>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
        _ => 0.0,
    }
}

/// The engine's idle parts of a batch that called it ([`crate::backend::EngineIdle`], but
/// `tail`, which the backend measures): from its marks in the producer's order — the previous
/// batch's return from the backend, this batch's start, its first engine call, the last call's
/// return, the CUDA route joined, the CPU route done, the canaries checked, the decode done —
/// and the seconds the batch waited for its arena, then spent in the batched GPU-hybrid call,
/// between its start and its first call (`(arena, hybrid)`, each carved out of the head).
pub(super) fn idle_parts(
    prev_returned: Option<Instant>,
    started: Option<Instant>,
    (arena_wait, hybrid_call): (f64, f64),
    marks: [Instant; 6],
) -> crate::backend::EngineIdle {
    let [first_call, engine_end, joined, cpu_done, checked, decoded] = marks.map(Some);
    let head = between(started, first_call);
    // Within the head when the batch started (the decoder alone has no start mark: all head).
    let arena = if started.is_some() { arena_wait.min(head) } else { 0.0 };
    let hybrid = if started.is_some() { hybrid_call.min(head - arena) } else { 0.0 };
    crate::backend::EngineIdle {
        outside: between(prev_returned, started),
        arena,
        hybrid,
        head: head - arena - hybrid,
        join: between(engine_end, joined),
        cpu: between(joined, cpu_done),
        check: between(cpu_done, checked),
        retry: between(checked, decoded),
        tail: 0.0,
        worker: 0.0,
        batches: 1.0,
    }
}
