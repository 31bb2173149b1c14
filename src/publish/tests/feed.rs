//! Feeds for the hand-off tests: a reproducible generator, and MoldUDP64 or IEX-TP
//! datagrams whose messages carry their own sequence.

#![allow(dead_code)]

use crate::protocol::iex_tp::{self, Header};
use crate::protocol::moldudp64::{self, PacketWriter, Session};
use crate::venue::Wire;

/// A deterministic xorshift64 generator, so a failure reproduces.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Message `seq`: its sequence, then up to 36 bytes that depend on it.
pub fn message(seq: u64) -> Vec<u8> {
    let mut m = seq.to_be_bytes().to_vec();
    m.extend(std::iter::repeat_n((seq % 251) as u8, (seq % 37) as usize));
    m
}

/// The MoldUDP64 session named after number `session`.
pub fn mold_session(session: u32) -> Session {
    let name = format!("SESS{session:06}");
    Session::from_ascii(name.as_bytes()).expect("ten ASCII bytes")
}

/// One datagram of `wire` carrying messages `first..first + count` (a heartbeat when
/// `count` is 0) of `session`.
pub fn datagram(wire: Wire, session: u32, first: u64, count: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 9000];
    let len = match wire {
        Wire::MoldUdp64 => {
            let session = mold_session(session);
            if count == 0 {
                moldudp64::encode_heartbeat(&mut buf, session, first).expect("fits")
            } else {
                let mut w = PacketWriter::new(&mut buf, session, first).expect("fits");
                for seq in first..first + count {
                    w.push(&message(seq)).expect("fits");
                }
                w.finish()
            }
        }
        Wire::IexTp => {
            let header = Header {
                session_id: session,
                sequence: first,
                ..Header::default()
            };
            if count == 0 {
                iex_tp::encode_heartbeat(&mut buf, header).expect("fits")
            } else {
                let mut w = iex_tp::PacketWriter::new(&mut buf, header).expect("fits");
                for seq in first..first + count {
                    w.push(&message(seq)).expect("fits");
                }
                w.finish()
            }
        }
    };
    buf.truncate(len);
    buf
}
