//! A page's OOB record and its slot entries (`crates/ftl/src/oob.rs`). Any input: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ftl::fuzzing::oob(data);
});
