//! A bank's frame table as decoded at open (`nand-model/src/bankmem.rs`): every accepted table
//! keeps each page's frame inside the bank. Any input: no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    nand_model::fuzzing::frame_table(data);
});
