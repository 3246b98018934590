//! A checkpoint body (`crates/ftl/src/checkpoint.rs`, `decode`). Any input: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ftl::fuzzing::checkpoint(data);
});
