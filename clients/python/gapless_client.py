#!/usr/bin/env python3
"""A client for gapless's unix-socket sink, in the Python standard library alone.

Connect, read the hello (the stream names), then one event a record, in order, until the
server stops (EOF) or cuts this client off for falling behind (a cut-off record with the
reason). The wire format is documented in src/publish/wire.rs and src/publish/event.rs:
records are a u32 little-endian length and a body; all integers are little-endian.

As a library:

    from gapless_client import Client
    with Client("/run/gapless/nasdaq.sock") as client:
        for event in client:
            if event["event"] == "message":
                handle(event["venue"], event["stream"], event["seq"], event["payload"])
            elif event["event"] == "gap":
                ...  # from, to: never delivered

A client that stopped (or was cut off) carries on where it was with a resume request:
per stream id, the label of the stream's epoch and the next sequence it needs. The server
replays what its history still holds from there, and reports what it no longer holds as an
"overrun" event with the lost range. `client.cursors()` gives the cursors to carry on from,
kept from the events read:

    with Client(path, cursors={0: ("SIM0000001", 10001)}) as client:
        ...
    later = client.cursors()

As a command, it prints each event as a JSON line, as `gapless tail` does, and with
`--from STREAM=EPOCH:SEQ` (a stream id; repeatable) resumes and prints the cursors to
carry on from on stderr at the end:

    python3 gapless_client.py /run/gapless/nasdaq.sock --limit 10
    python3 gapless_client.py /run/gapless/nasdaq.sock --from 0=SIM0000001:10001
"""

import argparse
import json
import socket
import struct
import sys

HELLO_MAGIC = b"GPLS"
WIRE_VERSION = 1
RESUME_MAGIC = b"GPLR"
RESUME_VERSION = 1
MAX_RESUME_CURSORS = 4096
CUT_OFF_TAG = 0xF0
MAX_RECORD_LEN = 16 * 1024 * 1024

STATES = ["unseen", "synced", "dirty_sync_pending", "recovering", "reset_required", "closed"]

# tag: (name, struct format of the fields after the tag, field names); every header ends with
# the payload length (u32).
KINDS = {
    1: ("message", "<HBQQI", ("stream", "flags", "seq", "recv_ns", "len")),
    2: ("range", "<HQQQI", ("stream", "first", "last", "recv_ns", "len")),
    3: ("gap", "<HQQI", ("stream", "from", "to", "len")),
    4: ("state", "<HBI", ("stream", "state", "len")),
    5: ("snapshot_begin", "<HI", ("stream", "len")),
    6: ("snapshot_end", "<HQI", ("stream", "next", "len")),
    7: ("overrun", "<HQQQI", ("stream", "from", "to", "events", "len")),
    8: ("heartbeat", "<HQI", ("stream", "next", "len")),
    9: ("epoch", "<HI", ("stream", "len")),
}


class ProtocolError(Exception):
    """The server sent something this client cannot read."""


class CutOff(Exception):
    """The server cut this client off (it fell behind); the reason is the message."""


class Client:
    """One connection to a unix-socket sink; iterate over it for events (dicts)."""

    def __init__(self, path, timeout=30.0, cursors=None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Every read has a deadline: a silent server raises socket.timeout.
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        # stream id -> (epoch label, next sequence), from the request and the events read.
        self.progress = dict(cursors or {})
        if cursors is not None:
            # The request must be the first bytes written, before the server's wait for
            # one ends; it does not depend on the hello.
            self.sock.sendall(resume_request(self.progress))
        self.file = self.sock.makefile("rb")
        self.streams = self._hello()

    def cursors(self):
        """The cursors to carry on from: {stream id: (epoch label, next sequence)}."""
        return dict(self.progress)

    def _observe(self, event):
        s = event["stream_id"]
        if event["event"] == "epoch":
            self.progress[s] = (event["label"], 0)
            return
        label, before = self.progress.get(s, ("", 0))
        self.progress[s] = (label, max(before, _next_after(event, before)))

    def close(self):
        self.file.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _exactly(self, n):
        data = self.file.read(n)
        if data is None or len(data) != n:
            return None
        return data

    def _record(self):
        head = self.file.read(4)
        if not head:
            return None  # EOF between records: the server stopped
        if len(head) != 4:
            raise ProtocolError("connection ended inside a record length")
        (length,) = struct.unpack("<I", head)
        if length == 0 or length > MAX_RECORD_LEN:
            raise ProtocolError(f"record length {length} out of range")
        body = self._exactly(length)
        if body is None:
            raise ProtocolError("connection ended inside a record")
        return body

    def _hello(self):
        body = self._record()
        if body is None or body[:4] != HELLO_MAGIC or len(body) < 8:
            raise ProtocolError("no hello from the server")
        version, count = struct.unpack_from("<HH", body, 4)
        if version != WIRE_VERSION:
            raise ProtocolError(f"wire version {version}, this client reads {WIRE_VERSION}")
        names, at = [], 8
        for _ in range(count):
            pair = []
            for _ in range(2):
                if at + 2 > len(body):
                    raise ProtocolError("hello cut short")
                (n,) = struct.unpack_from("<H", body, at)
                pair.append(body[at + 2 : at + 2 + n].decode("utf-8"))
                at += 2 + n
            names.append(tuple(pair))
        return names

    def _decode(self, body):
        tag = body[0]
        if tag == CUT_OFF_TAG:
            (n,) = struct.unpack_from("<H", body, 1)
            raise CutOff(body[3 : 3 + n].decode("utf-8", "replace"))
        kind = KINDS.get(tag)
        if kind is None:
            raise ProtocolError(f"unknown record tag {tag}")
        name, fmt, fields = kind
        size = struct.calcsize(fmt)
        if len(body) < 1 + size:
            raise ProtocolError(f"{name} record cut short")
        values = dict(zip(fields, struct.unpack_from(fmt, body, 1)))
        payload = body[1 + size : 1 + size + values.pop("len")]
        stream = values.pop("stream")
        venue, stream_name = self.streams[stream] if stream < len(self.streams) else ("", "")
        event = {"event": name, "venue": venue, "stream": stream_name, "stream_id": stream}
        event.update(values)
        if name == "message":
            event["snapshot"] = bool(event.pop("flags") & 1)
            event["payload"] = payload
        elif name == "range":
            event["payload"] = payload
        elif name == "state":
            event["state"] = STATES[event["state"]] if event["state"] < len(STATES) else "?"
        elif name == "epoch":
            event["label"] = payload.decode("utf-8", "replace")
        return event

    def __iter__(self):
        while True:
            body = self._record()
            if body is None:
                return
            event = self._decode(body)
            self._observe(event)
            yield event


def resume_request(cursors):
    """A framed resume request for {stream id: (epoch label, next sequence)}."""
    if len(cursors) > MAX_RESUME_CURSORS:
        raise ValueError(f"at most {MAX_RESUME_CURSORS} cursors")
    body = bytearray(RESUME_MAGIC + struct.pack("<HH", RESUME_VERSION, len(cursors)))
    for stream, (label, next_seq) in sorted(cursors.items()):
        text = label.encode("utf-8")
        if len(text) > 255:
            raise ValueError(f"epoch label of stream {stream} longer than 255 bytes")
        body += struct.pack("<HB", stream, len(text)) + text + struct.pack("<Q", next_seq)
    return struct.pack("<I", len(body)) + bytes(body)


def _next_after(event, before):
    """The next sequence after `event`, as the server judges a cursor."""
    name = event["event"]
    if name == "message" and not event["snapshot"]:
        return event["seq"] + 1
    if name == "range":
        return event["last"] + 1
    if name == "gap":
        return event["to"] + 1
    if name == "snapshot_end":
        return event["next"]
    return before


def _cursor(text):
    """STREAM=EPOCH:SEQ, STREAM a stream id."""
    stream, _, rest = text.partition("=")
    label, _, seq = rest.rpartition(":")
    if not stream.isdigit() or not seq.isdigit() or not _:
        raise argparse.ArgumentTypeError(f"{text!r}: expected STREAM=EPOCH:SEQ, STREAM an id")
    return int(stream), (label, int(seq))


def as_json(event):
    """The event as `gapless tail` prints it."""
    out = {"venue": event["venue"], "stream": event["stream"]}
    name = event["event"]
    if name == "message":
        out["seq"] = event["seq"]
        if event["snapshot"]:
            out["snapshot"] = True
        out["payload"] = event["payload"].hex()
    elif name == "range":
        out["first"], out["last"] = event["first"], event["last"]
        try:
            out["payload"] = json.loads(event["payload"])
        except ValueError:
            out["payload_hex"] = event["payload"].hex()
    else:
        out["event"] = name
        for key in ("from", "to", "state", "next", "events", "label"):
            if key in event:
                out[key] = event[key]
    return json.dumps(out, separators=(",", ":"))


def main(argv=None):
    parser = argparse.ArgumentParser(description="Print a gapless unix-socket sink as JSON lines.")
    parser.add_argument("socket", help="the sink's socket path")
    parser.add_argument("--limit", type=int, default=None, help="stop after this many events")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for data")
    parser.add_argument("--from", dest="cursors", action="append", type=_cursor, default=None,
                        metavar="STREAM=EPOCH:SEQ", help="resume a stream id; repeatable")
    args = parser.parse_args(argv)
    count = 0
    cursors = dict(args.cursors) if args.cursors is not None else None
    try:
        with Client(args.socket, args.timeout, cursors) as client:
            for event in client:
                if event["event"] == "heartbeat":
                    continue
                print(as_json(event))
                count += 1
                if args.limit is not None and count >= args.limit:
                    break
            if cursors is not None:
                sys.stdout.flush()
                carry_on = " ".join(
                    f"--from {s}={label}:{n}" for s, (label, n) in sorted(client.cursors().items())
                )
                print(f"gapless_client: to carry on: {carry_on}", file=sys.stderr)
    except CutOff as e:
        print(f"gapless_client: cut off by the server: {e}", file=sys.stderr)
        return 1
    except (OSError, ProtocolError) as e:
        print(f"gapless_client: {args.socket}: {e}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
