#!/bin/sh
# Runs each fuzz target in turn, one fuzzer at a time at low priority, for a bounded time,
# starting from the committed corpus and the extracted seeds; then minimises the corpus.
# Usage (from the repository root): fuzz/campaign.sh [seconds per target] [target...]
# The seeds come first: cargo test --release --test fuzz_corpus -- --ignored extract_seeds
set -eu
secs=${1:-300}
[ $# -gt 0 ] && shift
targets=${*:-$(cargo +nightly fuzz list)}
mkdir -p fuzz/logs
for t in $targets; do
    mkdir -p "fuzz/corpus/$t" "fuzz/seeds/$t"
    case $t in
        udp_session|binance_session) len=16384 ;;
        binance_snapshot|binance_scan|binance_scan_json|capture) len=8192 ;;
        *) len=4096 ;;
    esac
    nice -n 15 cargo +nightly fuzz run --debug-assertions "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -max_len="$len" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 > "fuzz/logs/$t.log" 2>&1 || echo "$t: the fuzzer stopped (a finding?)"
    nice -n 15 cargo +nightly fuzz cmin --debug-assertions "$t" "fuzz/corpus/$t" -- -max_len="$len" \
        > "fuzz/logs/$t.cmin.log" 2>&1 || echo "$t: cmin failed"
    grep -E "^#[0-9]+.*(DONE|pulse|NEW|REDUCE)" "fuzz/logs/$t.log" | tail -1
    grep -E "stat::(number_of_executed_units|average_exec_per_sec)" "fuzz/logs/$t.log" || true
    echo "$t: $(ls "fuzz/corpus/$t" | wc -l) corpus files, $(du -sh "fuzz/corpus/$t" | cut -f1)"
done
