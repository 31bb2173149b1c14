#!/usr/bin/env python3
"""Reads a gapless stream from NATS JetStream (nats-py) and prints it as JSON lines.

Every message the nats sink publishes has headers that say what it is (`Gapless-Kind`),
its sequence (`Gapless-Seq`, or `Gapless-First`/`Gapless-Last` for a range frame), its
epoch (`Gapless-Epoch`), its receive time and the publishing instance. JetStream stores a
message once however many instances published it (their `Nats-Msg-Id` is the same), and
each instance publishes in sequence order, so the stream holds each stream's messages once
and in order. This reader still keeps the last sequence per subject and epoch and skips
anything at or below it: it is the one rule that keeps a consumer exact if an instance ever
published out of order (see the README), and it costs a dictionary lookup.

    python3 gapless_nats.py --url nats://127.0.0.1:4222 --stream GAPLESS [--limit N]

Needs `pip install nats-py`.
"""

import argparse
import asyncio
import json
import sys

import nats
from nats.js.api import DeliverPolicy


def header(msg, name):
    return (msg.headers or {}).get(name)


def as_json(msg):
    """The JSON line for one stored publish, in the jsonl sink's shape."""
    parts = msg.subject.split(".")
    venue, stream = (parts[-2], parts[-1]) if len(parts) >= 3 else ("", msg.subject)
    kind = header(msg, "Gapless-Kind") or "unknown"
    out = {"venue": venue, "stream": stream}
    if kind == "message":
        out["seq"] = int(header(msg, "Gapless-Seq"))
        if header(msg, "Gapless-Snapshot") == "1":
            out["snapshot"] = True
        out["payload"] = msg.data.hex()
    elif kind == "range":
        out["first"] = int(header(msg, "Gapless-First"))
        out["last"] = int(header(msg, "Gapless-Last"))
        out["payload"] = msg.data.decode("utf-8", "replace")
    else:
        out["event"] = kind.replace("-", "_")
        for name, key in (("Gapless-From", "from"), ("Gapless-To", "to"),
                          ("Gapless-Next", "next"), ("Gapless-Events", "events")):
            value = header(msg, name)
            if value is not None:
                out[key] = int(value)
        if kind == "state":
            out["state"] = header(msg, "Gapless-State")
        if kind == "epoch":
            out["label"] = header(msg, "Gapless-Epoch")
        out["instance"] = header(msg, "Gapless-Instance")
    return out


def last_of(msg):
    """The last sequence a message or range frame covers; None for other events."""
    kind = header(msg, "Gapless-Kind")
    if kind == "message" and header(msg, "Gapless-Snapshot") != "1":
        return int(header(msg, "Gapless-Seq"))
    if kind == "range":
        return int(header(msg, "Gapless-Last"))
    return None


async def run(url, stream, limit, idle):
    nc = await nats.connect(url)
    js = nc.jetstream()
    # An ordered consumer: flow-controlled, no acks, re-created by the client on a gap.
    sub = await js.subscribe(f"{await subject_of(js, stream)}", ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    last = {}
    printed = 0
    try:
        while limit is None or printed < limit:
            try:
                msg = await sub.next_msg(timeout=idle)
            except nats.errors.TimeoutError:
                break
            seq = last_of(msg)
            key = (msg.subject, header(msg, "Gapless-Epoch"))
            if seq is not None:
                if seq <= last.get(key, 0):
                    continue
                last[key] = seq
            sys.stdout.write(json.dumps(as_json(msg), separators=(",", ":")) + "\n")
            printed += 1
    finally:
        sys.stdout.flush()
        await nc.close()


async def subject_of(js, stream):
    info = await js.stream_info(stream)
    subjects = info.config.subjects or [">"]
    return subjects[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="nats://127.0.0.1:4222")
    p.add_argument("--stream", required=True, help="the JetStream stream name")
    p.add_argument("--limit", type=int, help="stop after this many lines")
    p.add_argument("--idle", type=float, default=5.0,
                   help="stop after this many seconds with nothing new")
    args = p.parse_args()
    asyncio.run(run(args.url, args.stream, args.limit, args.idle))


if __name__ == "__main__":
    main()
