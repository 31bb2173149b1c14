#!/usr/bin/env bash
# Regenerates the captures in this folder with gapless's own tools, on loopback only.
# Run from this folder after `cargo build --release`. The expected JSON lines are what
# `gapless replay` makes of each capture; the golden tests replay and compare.
set -euo pipefail
cd "$(dirname "$0")"
bin=../target/release/gapless

# MoldUDP64: 2,000 synthetic messages from sequence 1 with seeded random and burst loss,
# heartbeats, end of session; recorded by the handler's pcap sink.
rm -f moldudp64-loss.pcap*
"$bin" run --config record-moldudp64.toml &
daemon=$!
sleep 1
"$bin" sim moldudp64 --group 239.255.65.1:46501 --count 2000 --rate 2000 \
    --loss 0.03 --burst-len 4 --burst-every 150 --seed 17 --heartbeat-ms 100 \
    --rerequest-port 46502 --snapshot-port 46503 2> moldudp64-loss.sim.txt
kill -TERM "$daemon"
wait "$daemon" || true
"$bin" replay moldudp64-loss.pcap --from-start \
    --venue sim --jsonl moldudp64-loss.expected.jsonl 2> moldudp64-loss.summary.txt
cat moldudp64-loss.summary.txt

# Binance spot: generated books for btcusdt and ethusdt, 300 events each, with stale
# events after each snapshot and btcusdt's event 120 dropped (a break: that symbol alone
# resyncs from the next snapshot).
"$bin" sim binance-capture --out binance-drop.capture --market spot \
    --symbols btcusdt,ethusdt --events 300 --drop btcusdt:120
"$bin" replay binance-drop.capture --protocol binance --market spot \
    --symbols btcusdt,ethusdt --jsonl binance-drop.expected.jsonl 2> binance-drop.summary.txt
cat binance-drop.summary.txt
