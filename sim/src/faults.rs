//! Fault injection: a chosen call fails, at a chosen use, so the error paths of the code under
//! test run (a failed record, wait, copy, launch or allocation must cost nothing but a named
//! error: no ring slot, no hang).
//!
//! - `stoke_sim_inject(name, skip, times)`: of the calls of `name` from now on, `skip` pass and
//!   the `times` after them fail; `times` 0 disarms `name`. A test arms it in its own process,
//!   after its set-up, so the failure lands where it means to put it.
//! - `STOKE_SIM_FAULTS=name@skip[xtimes],...`: the same from the environment, counted from the
//!   process's first call (`cuEventRecord@40x2`: the 41st and 42nd records fail).
//! - `stoke_sim_inject_random(names, per_million, seed)`: every call of one of `names` (comma
//!   separated) fails with probability `per_million` / 10^6, drawn from a generator seeded with
//!   `seed` (the chaos test: many failures at places nobody chose); `per_million` 0 stops it.
//! - `stoke_sim_injected()`: how many failures were injected so far (a test asserts its fault
//!   happened, or it proves nothing).
//!
//! A failure injected here is not a finding: it is what the test asked for. The call fails
//! before it does anything, with the code the API documents for a failed call of its kind
//! (`CUDA_ERROR_OUT_OF_MEMORY` for an allocation, `CUDA_ERROR_UNKNOWN` otherwise), so what it
//! would have done (a record, a wait) is simply not done, as when a real call fails.

use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// One armed call: calls still to let pass, then calls still to fail.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Armed {
    skip: u64,
    times: u64,
}

/// Whether anything is armed: the calls' fast path when nothing is.
static ANY: AtomicBool = AtomicBool::new(false);

/// Random failures: the calls, the rate per million and the generator's state (splitmix64).
struct Random {
    names: Vec<String>,
    per_million: u64,
    state: u64,
}

static RANDOM: Mutex<Option<Random>> = Mutex::new(None);

impl Random {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn random_failure(name: &str) -> bool {
    let mut r = RANDOM.lock().unwrap_or_else(|p| p.into_inner());
    match r.as_mut() {
        Some(r) if r.names.iter().any(|n| n == name) => r.next() % 1_000_000 < r.per_million,
        _ => false,
    }
}
static INJECTED: AtomicU64 = AtomicU64::new(0);

fn table() -> &'static Mutex<HashMap<String, Armed>> {
    static T: OnceLock<Mutex<HashMap<String, Armed>>> = OnceLock::new();
    T.get_or_init(|| {
        let mut m = HashMap::new();
        if let Ok(list) = std::env::var("STOKE_SIM_FAULTS") {
            for e in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                match parse(e) {
                    Some((name, a)) => {
                        m.insert(name.to_string(), a);
                    }
                    None => eprintln!("stoke-sim: STOKE_SIM_FAULTS entry {e:?} is not name@skip[xtimes]; ignored"),
                }
            }
        }
        ANY.store(!m.is_empty(), Ordering::Release);
        Mutex::new(m)
    })
}

/// `name@skip` or `name@skipxtimes` (times 1 when absent).
fn parse(e: &str) -> Option<(&str, Armed)> {
    let (name, at) = e.split_once('@')?;
    let (skip, times) = match at.split_once('x') {
        Some((s, t)) => (s.parse().ok()?, t.parse().ok()?),
        None => (at.parse().ok()?, 1),
    };
    (!name.is_empty()).then_some((name, Armed { skip, times }))
}

/// Whether this call of `name` fails (counting it against what is armed for `name`).
pub fn inject(name: &str) -> bool {
    crate::note_caller();
    static ENV: OnceLock<()> = OnceLock::new();
    ENV.get_or_init(|| {
        table();
    });
    if !ANY.load(Ordering::Acquire) {
        return false;
    }
    if !armed_failure(name) && !random_failure(name) {
        return false;
    }
    INJECTED.fetch_add(1, Ordering::Relaxed);
    eprintln!("stoke-sim: injected a failure of {name} (asked for by the test)");
    true
}

/// Whether the armed count of `name` makes this call fail (counting it).
fn armed_failure(name: &str) -> bool {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    let Some(a) = t.get_mut(name) else { return false };
    if a.skip > 0 {
        a.skip -= 1;
        return false;
    }
    a.times -= 1;
    if a.times == 0 {
        t.remove(name);
        refresh(&t);
    }
    true
}

/// `ANY` from what is armed now.
fn refresh(t: &HashMap<String, Armed>) {
    let random = RANDOM.lock().unwrap_or_else(|p| p.into_inner()).is_some();
    ANY.store(!t.is_empty() || random, Ordering::Release);
}

/// Arm `name`: of its calls from now on, `skip` pass and the `times` after them fail; `times`
/// 0 disarms it. Returns 0, or 1 when `name` is not a string.
#[no_mangle]
pub unsafe extern "C" fn stoke_sim_inject(name: *const c_char, skip: u64, times: u64) -> i32 {
    if name.is_null() {
        return 1;
    }
    // SAFETY: a NUL-terminated string (the caller's contract).
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else { return 1 };
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    if times == 0 {
        t.remove(name);
    } else {
        t.insert(name.to_string(), Armed { skip, times });
    }
    refresh(&t);
    0
}

/// Fail every call of one of `names` (comma separated) with probability `per_million` / 10^6,
/// from a generator seeded with `seed`; `per_million` 0 stops it. Returns 0, or 1 when `names`
/// is not a string.
#[no_mangle]
pub unsafe extern "C" fn stoke_sim_inject_random(names: *const c_char, per_million: u64, seed: u64) -> i32 {
    if names.is_null() {
        return 1;
    }
    // SAFETY: a NUL-terminated string (the caller's contract).
    let Ok(names) = unsafe { CStr::from_ptr(names) }.to_str() else { return 1 };
    let t = table().lock().unwrap_or_else(|p| p.into_inner());
    *RANDOM.lock().unwrap_or_else(|p| p.into_inner()) = (per_million > 0).then(|| Random {
        names: names.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect(),
        per_million,
        state: seed,
    });
    refresh(&t);
    0
}

/// Failures injected so far in this process.
#[no_mangle]
pub extern "C" fn stoke_sim_injected() -> u64 {
    INJECTED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_with_and_without_a_count() {
        assert_eq!(parse("cuEventRecord@40"), Some(("cuEventRecord", Armed { skip: 40, times: 1 })));
        assert_eq!(parse("cuLaunchKernel@0x3"), Some(("cuLaunchKernel", Armed { skip: 0, times: 3 })));
        assert_eq!(parse("cuEventRecord"), None);
        assert_eq!(parse("@4"), None);
        assert_eq!(parse("x@y"), None);
    }

    #[test]
    fn an_armed_call_fails_after_its_skips_for_its_count_then_passes() {
        let name = c"stokeTestCall";
        // SAFETY: a NUL-terminated literal.
        assert_eq!(unsafe { stoke_sim_inject(name.as_ptr(), 2, 2) }, 0);
        let got: Vec<bool> = (0..6).map(|_| inject("stokeTestCall")).collect();
        assert_eq!(got, [false, false, true, true, false, false]);
        assert!(!inject("stokeOtherCall"));
        // SAFETY: as above; times 0 disarms.
        unsafe {
            stoke_sim_inject(name.as_ptr(), 0, 5);
            stoke_sim_inject(name.as_ptr(), 0, 0);
        }
        assert!(!inject("stokeTestCall"), "disarmed");
    }

    #[test]
    fn random_failures_come_at_about_their_rate_only_for_their_calls_and_stop() {
        let names = c"stokeRandomA,stokeRandomB";
        // SAFETY: NUL-terminated literals.
        assert_eq!(unsafe { stoke_sim_inject_random(names.as_ptr(), 100_000, 7) }, 0);
        let failed = (0..10_000).filter(|_| inject("stokeRandomA")).count();
        assert!((800..1200).contains(&failed), "{failed} of 10000 at 10 %");
        assert!((0..1000).all(|_| !inject("stokeRandomC")), "a call not named never fails");
        // SAFETY: as above; 0 stops it.
        unsafe { stoke_sim_inject_random(names.as_ptr(), 0, 0) };
        assert!((0..1000).all(|_| !inject("stokeRandomB")), "stopped");
    }
}
