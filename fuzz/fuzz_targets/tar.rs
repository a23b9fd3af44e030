//! Fuzz the tar shard reader (src/source/tar.rs) on a shard held in memory, as a shard read
//! from a store is, with each image's header parsed, and the streaming index's facts of it
//! (src/source/shards.rs). No panic, no allocation past its caps; an `Ok` listing names only
//! bytes inside the shard, on block boundaries, under distinct keys; a header parsed from a
//! prefix is the whole member's; the facts agree with the listing, are ones the sidecar reader
//! accepts, and survive the sidecar's JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use stoke::fuzzing::{plausible, shard_facts, sidecar, tar_shard};

fuzz_target!(init: stoke::fuzzing::seeds_from_env("tar"), |data: &[u8]| {
    let listing = tar_shard(data);
    let facts = shard_facts(data);
    assert_eq!(listing.is_ok(), facts.is_ok(), "the listing and the facts disagree: {:?} / {:?}", listing.as_ref().err(), facts.as_ref().err());
    let Ok((samples, _ignored)) = listing else { return };
    let mut keys = HashSet::new();
    for s in &samples {
        assert!(s.offset >= 512 && s.offset % 512 == 0, "{s:?}: data not after a header block");
        assert!(s.offset.checked_add(s.len).is_some_and(|e| e <= data.len() as u64), "{s:?}: past the end of the shard");
        assert!(s.label >= -1);
        assert!(keys.insert(s.key.clone()), "duplicate key {:?}", s.key);
        if let Ok(info) = &s.header {
            let member = &data[s.offset as usize..(s.offset + s.len) as usize];
            assert_eq!(stoke::codec::parse_info(member).as_ref(), Ok(info), "{s:?}: the prefix's header is not the member's");
        }
    }
    let f = facts.unwrap();
    assert_eq!(f.samples, samples.len() as u64);
    assert_eq!(f.bytes, data.len() as u64);
    assert!(plausible(&f), "facts of a real shard refused by the sidecar check: {f:?}");
    let json = stoke::source::shards::sidecar_json(std::slice::from_ref(&f));
    assert_eq!(sidecar(json.as_bytes()), Some(vec![f]), "the sidecar's JSON does not read back");
});
