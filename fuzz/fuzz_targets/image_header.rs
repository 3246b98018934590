//! The NAND image header (`nand-model/src/header.rs`). Any input: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nand_model::fuzzing::header(data);
});
