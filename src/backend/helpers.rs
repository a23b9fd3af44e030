//! Threads a batch hands work to and waits for (the CUDA backend's next batch staged ahead,
//! its CUDA decoders' lanes), started once with the backend and kept ([`Helpers`]).
//!
//! They were scoped threads spawned per batch: three thread creations a batch, ~200 a second
//! at full rate, ~10^8 over a week-long run, each of which could fail mid-run where the process
//! meets its thread limit (a trainer's DataLoader workers count against the same limit). Made
//! once, a failure is the backend's build error, and a run creates no thread after its start.

/// One job for [`Helpers::many_beside`], borrowing for `'a`.
pub(crate) type Job<'a, A> = Box<dyn FnOnce() -> A + Send + 'a>;

/// `threads` persistent threads named `name` (`top` and `stoke bench`'s cores by thread tell
/// them apart by it), each job borrowing from the caller's stack while the caller works beside
/// it and waits for it before returning (rayon's `in_place_scope` on a pool of our own).
pub(crate) struct Helpers {
    pool: rayon::ThreadPool,
}

impl Helpers {
    /// Start `threads` (at least one) threads named `name`; the message says why they could not
    /// be.
    pub(crate) fn new(name: &'static str, threads: usize) -> Result<Self, String> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |_| name.to_string())
            .build()
            .map_err(|e| format!("cannot start {threads} {name} thread(s): {e}"))?;
        Ok(Self { pool })
    }

    /// Run `there` on a helper thread while `here` runs on the calling thread; both results,
    /// once both are done. A panic in either is resumed here after both have finished.
    pub(crate) fn beside<'a, A: Send, B>(&self, there: impl FnOnce() -> A + Send + 'a, here: impl FnOnce() -> B) -> (A, B) {
        let (mut a, b) = self.many_beside(vec![Box::new(there) as Job<'a, A>], here);
        (a.pop().expect("one job, one result"), b)
    }

    /// [`Self::beside`] with any number of jobs for the helpers (each on a helper thread as
    /// one is free); their results in the order given.
    pub(crate) fn many_beside<A: Send, B>(&self, there: Vec<Job<'_, A>>, here: impl FnOnce() -> B) -> (Vec<A>, B) {
        let mut slots: Vec<Option<A>> = there.iter().map(|_| None).collect();
        let b = self.pool.in_place_scope(|s| {
            for (job, slot) in there.into_iter().zip(slots.iter_mut()) {
                s.spawn(move |_| *slot = Some(job()));
            }
            here()
        });
        (slots.into_iter().map(|s| s.expect("a scope returns after its jobs")).collect(), b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn tid() -> i64 {
        // SAFETY: gettid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_gettid) }
    }

    /// The jobs run on the helpers' own threads, named, the same few threads batch after
    /// batch, while the caller works beside them; results come back in order.
    #[test]
    fn jobs_run_on_the_same_named_threads_every_time() {
        let h = Helpers::new("stoke-test-help", 2).unwrap();
        let seen = Mutex::new(std::collections::BTreeSet::new());
        let caller = tid();
        for round in 0..50u64 {
            let borrowed = vec![round; 3];
            let jobs: Vec<Job<'_, (u64, Option<String>)>> = (0..3u64)
                .map(|k| {
                    let (borrowed, seen) = (&borrowed, &seen);
                    Box::new(move || {
                        seen.lock().unwrap().insert(tid());
                        (borrowed[k as usize] * 10 + k, std::thread::current().name().map(str::to_string))
                    }) as Job<'_, _>
                })
                .collect();
            let (out, mine) = h.many_beside(jobs, tid);
            assert_eq!(mine, caller, "`here` runs on the calling thread");
            for (k, (v, name)) in out.into_iter().enumerate() {
                assert_eq!(v, round * 10 + k as u64);
                assert_eq!(name.as_deref(), Some("stoke-test-help"));
            }
            let (a, b) = h.beside(tid, || round);
            assert_ne!(a, caller);
            assert_eq!(b, round);
        }
        let seen = seen.into_inner().unwrap();
        assert!(!seen.contains(&caller));
        assert!((1..=2).contains(&seen.len()), "150 jobs on the pool's 2 threads, not a thread each: {seen:?}");
    }

    /// A job's panic reaches the caller, after the caller's own work has run.
    #[test]
    fn a_helpers_panic_is_resumed_in_the_caller() {
        let h = Helpers::new("stoke-test-help", 1).unwrap();
        let ran_here = std::sync::atomic::AtomicBool::new(false);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.beside(|| panic!("the helper's job failed"), || ran_here.store(true, std::sync::atomic::Ordering::SeqCst))
        }));
        let msg = r.unwrap_err().downcast::<&str>().map(|s| s.to_string()).unwrap_or_default();
        assert_eq!(msg, "the helper's job failed");
        assert!(ran_here.load(std::sync::atomic::Ordering::SeqCst));
        // The pool still works after it.
        assert_eq!(h.beside(|| 1, || 2), (1, 2));
    }
}
