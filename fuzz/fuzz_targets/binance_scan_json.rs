#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gapless_fuzz::targets::binance_scan_json(data));
