//! The fuzz targets on stable: every committed corpus file (`fuzz/corpus/<target>/`) and
//! every crash reproducer (`fuzz/regressions/<target>/`) runs through the same function
//! libFuzzer calls, so what the fuzzers found stays fixed without nightly.
//!
//! `extract_seeds` (ignored) writes the seed corpora the fuzzers start from, taken from the
//! real captures in `../shared/captures` and the project's own `captures/`:
//! `cargo test --release --test fuzz_corpus -- --ignored extract_seeds`.

// A test fails by panicking: unwrap, expect, panic and indexing are how it says so.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../../fuzz/src/targets.rs"]
mod targets;

mod seeds;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Instant;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs `target` on every file of `dir`; the names of those that panicked.
fn replay(name: &str, target: fn(&[u8]), dir: &Path) -> (usize, Vec<String>) {
    let mut failed = Vec::new();
    let all = files(dir);
    for path in &all {
        let data = std::fs::read(path).unwrap();
        if catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
            failed.push(format!("{name}: {}", path.display()));
        }
    }
    (all.len(), failed)
}

#[test]
fn every_target_has_a_committed_corpus() {
    for (name, _) in targets::ALL {
        let dir = fuzz_dir().join("corpus").join(name);
        assert!(
            !files(&dir).is_empty(),
            "no corpus for target {name} in {}",
            dir.display()
        );
    }
}

#[test]
fn corpora_and_regressions_replay_without_a_failure() {
    let started = Instant::now();
    let mut failed = Vec::new();
    let mut total = 0;
    for (name, target) in targets::ALL {
        for folder in ["corpus", "regressions"] {
            let (n, f) = replay(name, *target, &fuzz_dir().join(folder).join(name));
            total += n;
            failed.extend(f);
        }
    }
    println!("{total} inputs replayed in {:?}", started.elapsed());
    assert!(
        failed.is_empty(),
        "inputs that fail:\n{}",
        failed.join("\n")
    );
}

#[test]
fn regression_folders_name_existing_targets() {
    for dir in files_and_dirs(&fuzz_dir().join("regressions")) {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            targets::by_name(&name).is_some(),
            "fuzz/regressions/{name} names no target"
        );
    }
}

fn files_and_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|e| {
            e.map(|e| e.unwrap().path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "writes fuzz/seeds from the captures; run by hand before a fuzzing campaign"]
fn extract_seeds() {
    let out = fuzz_dir().join("seeds");
    let written = seeds::write_all(&out);
    for (target, n) in &written {
        println!("{target}: {n} seeds");
    }
    // Every seed runs through its target cleanly (a failure here is a finding too).
    for (name, target) in targets::ALL {
        let (_, failed) = replay(name, *target, &out.join(name));
        assert!(failed.is_empty(), "seeds that fail:\n{}", failed.join("\n"));
    }
}

/// Runs the files named by `GAPLESS_FUZZ_INPUT` (`target:path`) through their target, to
/// read a finding with `GAPLESS_FUZZ_TRACE=1`.
#[test]
#[ignore = "reads a finding by hand"]
fn run_one() {
    let Ok(spec) = std::env::var("GAPLESS_FUZZ_INPUT") else {
        return;
    };
    let (name, path) = spec.split_once(':').unwrap();
    let target = targets::by_name(name).unwrap();
    target(&std::fs::read(path).unwrap());
}
