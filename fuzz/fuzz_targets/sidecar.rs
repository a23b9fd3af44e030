//! Fuzz the stream-mode sidecar reader (`stoke-shards.json`, src/source/shards.rs), checked
//! against the shards the text itself lists. No panic; facts it accepts are plausible ones and
//! survive being written again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoke::fuzzing::{plausible, sidecar};

fuzz_target!(init: stoke::fuzzing::seeds_from_env("sidecar"), |data: &[u8]| {
    if let Some(facts) = sidecar(data) {
        assert!(facts.iter().all(plausible));
        let again = stoke::source::shards::sidecar_json(&facts);
        assert_eq!(sidecar(again.as_bytes()).as_ref(), Some(&facts), "accepted facts do not survive their JSON");
    }
});
