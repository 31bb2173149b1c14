#!/usr/bin/env python3
"""A reader of gapless's shared-memory ring sink, in the Python standard library alone (mmap).

The layout is documented in src/sinks/shm/mod.rs: a header (magic, version, capacity,
generation, tail, intent, head), the stream-name table, then records of a 32-byte header
(length, kind, epoch, index, next-before) and one event in the encoding of
src/publish/event.rs. The reader maps the file read-only and never writes anything: the
producer does not know it exists. A reader lapped by the producer moves to the oldest
whole record, and reports each stream's loss as an overrun event with the lost range
before that stream's next event; a producer restart (a new file at the path) is a
"generation" event. Resume cursors name, per stream, the epoch and the next sequence.

The publication protocol needs the reader's loads to happen in program order (tail, then
the record, then intent): true of x86-64, where this reader is meant to run. Python cannot
issue the fences a weaker memory model would need.

As a library:

    from gapless_shm import Reader
    reader = Reader("/dev/shm/gapless.ring", cursors={0: (epoch, next_seq)})
    for event in reader.events(timeout=30):
        ...  # dicts as gapless_client.py makes, plus "epoch"

As a command, it prints each event as `gapless tail --shm` does:

    python3 gapless_shm.py /dev/shm/gapless.ring --from 0=EPOCH:SEQ --limit 10
"""

import argparse
import json
import mmap
import os
import struct
import sys
import time

from gapless_client import KINDS, STATES

MAGIC = b"GAPLSHM1"
VERSION = 1
NAMES_OFFSET = 256
RECORD_HEADER = 32
KIND_EVENT, KIND_PADDING = 1, 2
U64_MAX = (1 << 64) - 1
REOPEN_CHECK = 0.02


class RingError(Exception):
    """The file is not a ring this reader can read, or a record is malformed."""


def _u64(buf, at):
    return struct.unpack_from("<Q", buf, at)[0]


class _Ring:
    """One mapped ring file."""

    def __init__(self, path):
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            self.identity = (st.st_dev, st.st_ino)
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mm = self.mm
        if len(mm) < NAMES_OFFSET or mm[0:8] != MAGIC:
            raise RingError("not a gapless ring (bad magic)")
        version, align = struct.unpack_from("<II", mm, 8)
        if version != VERSION or align != 8:
            raise RingError(f"ring version {version}, alignment {align}: not readable here")
        self.data, self.capacity, self.generation = (_u64(mm, 16), _u64(mm, 24), _u64(mm, 32))
        names_len, self.max_record = _u64(mm, 48), _u64(mm, 56)
        if self.capacity & (self.capacity - 1) or self.data + self.capacity != len(mm):
            raise RingError("malformed ring header")
        self.names = _names(bytes(mm[NAMES_OFFSET : NAMES_OFFSET + names_len]))
        self.pos = self.head()

    def _word(self, at):
        # An aligned 8-byte field, read until two reads agree (a copy may not be one load).
        while True:
            a = _u64(self.mm, at)
            if _u64(self.mm, at) == a:
                return a

    def tail(self):
        return self._word(128)

    def intent(self):
        return self._word(136)

    def head(self):
        return self._word(144)

    def closed(self):
        return self._word(40) != 0

    def next(self):
        """("record", header, body) | ("empty",) | ("lapped",)."""
        cap, mask = self.capacity, self.capacity - 1
        while True:
            tail = self.tail()
            if tail == self.pos:
                return ("empty",)
            if tail < self.pos:
                raise RingError("the tail went backwards")
            if tail - self.pos > cap:
                return self._lapped()
            at = self.data + (self.pos & mask)
            length, kind = struct.unpack_from("<IH", self.mm, at)
            padded = (length + 7) // 8 * 8
            fits = 8 <= length and padded <= cap - (self.pos & mask)
            if kind == KIND_PADDING and fits:
                if self.intent() > self.pos + cap:
                    return self._lapped()
                self.pos += length
                continue
            if kind != KIND_EVENT or not fits or length < RECORD_HEADER or length > self.max_record:
                if self.intent() > self.pos + cap:
                    return self._lapped()
                raise RingError(f"malformed record at position {self.pos}")
            record = bytes(self.mm[at : at + length])
            if self.intent() > self.pos + cap:
                return self._lapped()
            self.last = self.pos
            self.pos += padded
            epoch, index, next_before = struct.unpack_from("<QQQ", record, 8)
            return ("record", (epoch, index, next_before), record[RECORD_HEADER:])

    def rewind(self):
        self.pos = self.last

    def _lapped(self):
        self.pos = max(self.head(), self.pos)
        return ("lapped",)


def _names(table):
    if table[:4] != b"GPLS":
        raise RingError("bad name table")
    _version, count = struct.unpack_from("<HH", table, 4)
    names, at = [], 8
    for _ in range(count):
        pair = []
        for _ in range(2):
            (n,) = struct.unpack_from("<H", table, at)
            pair.append(table[at + 2 : at + 2 + n].decode("utf-8"))
            at += 2 + n
        names.append(tuple(pair))
    return names


def _decode(body):
    tag = body[0]
    kind = KINDS.get(tag)
    if kind is None:
        raise RingError(f"unknown event tag {tag}")
    name, fmt, fields = kind
    size = struct.calcsize(fmt)
    values = dict(zip(fields, struct.unpack_from(fmt, body, 1)))
    values["payload"] = body[1 + size : 1 + size + values.pop("len")]
    values["event"] = name
    if name == "message":
        values["snapshot"] = bool(values.pop("flags") & 1)
    return values


def _sequenced(ev):
    return (ev["event"] == "message" and not ev["snapshot"]) or ev["event"] in ("range", "gap")


def _next_after(ev, before):
    name = ev["event"]
    if name == "message" and not ev["snapshot"]:
        return ev["seq"] + 1
    if name == "range":
        return ev["last"] + 1
    if name == "gap":
        return ev["to"] + 1
    if name == "snapshot_end":
        return ev["next"]
    return before


class Reader:
    """Reads a ring at its own position, following producer restarts."""

    def __init__(self, path, cursors=None):
        self.path = path
        self.ring = _Ring(path)
        # stream id -> [epoch, next] (None: from wherever it is), and last record index.
        self.at = dict(cursors or {})
        self.index = {}
        self.lapped = 0
        self._announce = True
        self._checked = time.monotonic()

    def _judge(self, header, ev):
        """("deliver",) | ("skip",) | ("lost", from, to, events)."""
        epoch, index, before = header
        s = ev["stream"]
        last = self.index.get(s)
        lost = index - last - 1 if last is not None else 0
        in_order = last is None or index == last + 1
        if s not in self.at:
            self.at[s], self.index[s] = (epoch, _next_after(ev, before)), index
            return ("deliver",)
        c_epoch, c_next = self.at[s]
        if epoch < c_epoch:
            self.index[s] = index
            return ("skip",)
        if epoch > c_epoch:
            if in_order and last is not None:
                self.at[s], self.index[s] = (epoch, _next_after(ev, before)), index
                return ("deliver",)
            self.at[s] = (epoch, before)
            self._set_index(s, index - 1)
            return ("lost", c_next, U64_MAX, lost)
        done = _next_after(ev, before) <= c_next if _sequenced(ev) else before < c_next
        if done:
            self.index[s] = index
            return ("skip",)
        if before > c_next or not in_order:
            lo, hi = (c_next, before - 1) if before > c_next else (U64_MAX, 0)
            self.at[s] = (epoch, max(before, c_next))
            self._set_index(s, index - 1)
            return ("lost", lo, hi, lost)
        self.at[s] = (epoch, max(_next_after(ev, before), c_next))
        self.index[s] = index
        return ("deliver",)

    def _set_index(self, s, i):
        if i < 0:
            self.index.pop(s, None)
        else:
            self.index[s] = i

    def _named(self, ev, epoch):
        s = ev["stream"]
        names = self.ring.names
        ev["venue"], ev["stream_name"] = names[s] if s < len(names) else ("", "")
        ev["stream_id"], ev["epoch"] = s, epoch
        if ev["event"] == "state":
            ev["state"] = STATES[ev["state"]] if ev["state"] < len(STATES) else "?"
        return ev

    def poll(self):
        """The next event (a dict), or None when there is nothing new."""
        if self._announce:
            self._announce = False
            return {"event": "generation", "generation": self.ring.generation}
        while True:
            got = self.ring.next()
            if got[0] == "empty":
                return self._idle()
            if got[0] == "lapped":
                self.lapped += 1
                continue
            _, header, body = got
            ev = _decode(body)
            verdict = self._judge(header, ev)
            if verdict[0] == "skip":
                continue
            if verdict[0] == "lost":
                self.ring.rewind()
                _, lo, hi, events = verdict
                marker = {"event": "overrun", "stream": ev["stream"], "from": lo, "to": hi,
                          "events": events}
                return self._named(marker, header[0])
            return self._named(ev, header[0])

    def _idle(self):
        if not self.ring.closed() and time.monotonic() - self._checked < REOPEN_CHECK:
            return None
        self._checked = time.monotonic()
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if (st.st_dev, st.st_ino) == self.ring.identity:
            return None
        self.ring = _Ring(self.path)
        self.index = {}
        return {"event": "generation", "generation": self.ring.generation}

    def events(self, timeout=30.0):
        """Yields events; stops after `timeout` seconds with nothing new."""
        quiet = time.monotonic()
        pause = 0.00005
        while True:
            ev = self.poll()
            if ev is not None:
                quiet, pause = time.monotonic(), 0.00005
                yield ev
                continue
            if time.monotonic() - quiet > timeout:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.001)


def as_json(ev):
    """The event as `gapless tail --shm` prints it."""
    name = ev["event"]
    if name == "generation":
        return json.dumps({"event": "generation", "generation": ev["generation"]},
                          separators=(",", ":"))
    out = {"venue": ev["venue"], "stream": ev["stream_name"]}
    if name == "message":
        out["seq"] = ev["seq"]
        if ev["recv_ns"]:
            out["recv_ns"] = ev["recv_ns"]
        if ev["snapshot"]:
            out["snapshot"] = True
        out["payload"] = ev["payload"].hex()
    elif name == "range":
        out["first"], out["last"] = ev["first"], ev["last"]
        if ev["recv_ns"]:
            out["recv_ns"] = ev["recv_ns"]
        try:
            out["payload"] = json.loads(ev["payload"])
        except ValueError:
            out["payload_hex"] = ev["payload"].hex()
    else:
        out["event"] = name
        for key in ("from", "to", "state", "next", "events"):
            if key in ev:
                out[key] = ev[key]
        if name == "epoch":
            out["label"] = ev["payload"].decode("utf-8", "replace")
    out["epoch"] = ev["epoch"]
    return json.dumps(out, separators=(",", ":"))


def _cursor(text):
    stream, _, rest = text.partition("=")
    epoch, _, seq = rest.partition(":")
    return int(stream), (int(epoch), int(seq))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print a gapless shared-memory ring as JSON lines.")
    parser.add_argument("path", help="the ring file")
    parser.add_argument("--from", dest="cursors", action="append", default=[],
                        metavar="STREAM=EPOCH:SEQ", help="resume a stream id; repeatable")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many events")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for data")
    args = parser.parse_args(argv)
    try:
        cursors = dict(_cursor(c) for c in args.cursors)
    except ValueError:
        print("gapless_shm: --from takes STREAM=EPOCH:SEQ with a stream id", file=sys.stderr)
        return 2
    count = 0
    try:
        for ev in Reader(args.path, cursors).events(args.timeout):
            if ev["event"] == "heartbeat":
                continue
            print(as_json(ev))
            count += ev["event"] != "generation"
            if args.limit is not None and count >= args.limit:
                break
    except (OSError, RingError) as e:
        print(f"gapless_shm: {args.path}: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
