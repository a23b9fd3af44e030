//! Fault injection: a chosen call fails, at a chosen use, so the error paths of the code under
//! test run (a failed record, wait, copy, launch or allocation must cost nothing but a named
//! error: no ring slot, no hang).
//!
//! - `stoke_sim_inject(name, skip, times)`: of the calls of `name` from now on, `skip` pass and
//!   the `times` after them fail; `times` 0 disarms `name`. A test arms it in its own process,
//!   after its set-up, so the failure lands where it means to put it.
//! - `STOKE_SIM_FAULTS=name@skip[xtimes],...`: the same from the environment, counted from the
//!   process's first call (`cuEventRecord@40x2`: the 41st and 42nd records fail).
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
    static ENV: OnceLock<()> = OnceLock::new();
    ENV.get_or_init(|| {
        table();
    });
    if !ANY.load(Ordering::Acquire) {
        return false;
    }
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    let Some(a) = t.get_mut(name) else { return false };
    if a.skip > 0 {
        a.skip -= 1;
        return false;
    }
    a.times -= 1;
    if a.times == 0 {
        t.remove(name);
        ANY.store(!t.is_empty(), Ordering::Release);
    }
    INJECTED.fetch_add(1, Ordering::Relaxed);
    eprintln!("stoke-sim: injected a failure of {name} (asked for by the test)");
    true
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
    ANY.store(!t.is_empty(), Ordering::Release);
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
}
