//! The FTL superblock page (`crates/ftl/src/checkpoint.rs`, `SuperBlock::decode`). Any input: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ftl::fuzzing::superblock(data);
});
