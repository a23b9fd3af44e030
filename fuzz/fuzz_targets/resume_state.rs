//! Fuzz the resume-state reader (src/state.rs, `ResumeState::from_json`), then what a pipeline
//! does with a state it accepted: split its rest over worlds of several sizes (src/sampler/
//! rest.rs). No panic or overflow; a state that reads survives its own JSON; every share's
//! positions are positions of the rest or padding past it, and the rest after any progress is
//! again a valid rest, no longer than the world's shares.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoke::sampler::rest::{Layout, Split};
use stoke::ResumeState;

fuzz_target!(init: stoke::fuzzing::seeds_from_env("resume_state"), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(state) = ResumeState::from_json(text) else { return };
    assert_eq!(ResumeState::from_json(&state.to_json()).as_ref().ok(), Some(&state), "a state does not survive its JSON");
    state.order.check(&state.order).expect("an order matches itself");
    let rest = &state.rest;
    let is_position = |p: u64| p >= rest.next_pad || rest.ranges.iter().any(|&(a, b)| a <= p && p < b);
    for world in [1usize, 2, 3, 8] {
        for split in [Split::Strided, Split::Blocks] {
            for drop_last in [false, true] {
                for rank in [0, world - 1] {
                    let share = Layout { split, rank, world_size: world, drop_last }.share(rest.clone()).expect("a checked rest splits");
                    let n = share.len();
                    assert!(n <= rest.len().div_ceil(world as u64));
                    for i in [0, n / 2, n.saturating_sub(1)] {
                        if i < n {
                            assert!(is_position(share.position(i)), "position {} is neither in the rest nor padding", share.position(i));
                        }
                    }
                    for r in share.ranges_from(n.saturating_sub(2)) {
                        assert!(r.0 < r.1);
                    }
                    for d in [0, 1, n / 2, n, n + 1] {
                        let after = share.after(d);
                        after.check().expect("the rest after progress is a valid rest");
                        // What no rank delivered yet: at most the world's share of the rest
                        // (padding included), none of it earlier than the rest's positions.
                        assert!(after.len() <= n * world as u64 && after.next_pad >= rest.next_pad);
                    }
                }
            }
        }
    }
});
