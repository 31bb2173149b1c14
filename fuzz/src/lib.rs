//! libFuzzer targets for gapless. The logic of every target is in [`targets`], as plain
//! functions of `&[u8]`; `fuzz_targets/` only hands libFuzzer's input to them.

pub mod targets;
