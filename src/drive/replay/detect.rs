//! Telling a capture's protocol from its first datagrams: each is decoded as MoldUDP64
//! and as IEX-TP, and a protocol is taken when nine in ten of them decode as it.

use std::fmt;

use crate::venue::Wire;
use crate::venue::udp::wire::decode;

/// Bytes of the first payload kept to show what was seen.
const SHOWN: usize = 12;

/// How the datagrams looked at decode as each protocol.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detection {
    /// Datagrams looked at.
    pub datagrams: u64,
    /// Those that decode as MoldUDP64.
    pub moldudp64: u64,
    /// Those that decode as IEX-TP.
    pub iex_tp: u64,
    /// The first bytes of the first datagram.
    pub first_bytes: Vec<u8>,
}

impl Detection {
    /// Adds one datagram's payload.
    pub fn add(&mut self, payload: &[u8]) {
        if self.datagrams == 0 {
            self.first_bytes = payload.iter().take(SHOWN).copied().collect();
        }
        self.datagrams += 1;
        self.moldudp64 += u64::from(decode(Wire::MoldUdp64, payload).is_ok());
        self.iex_tp += u64::from(decode(Wire::IexTp, payload).is_ok());
    }

    /// The protocol nine in ten of the datagrams decode as, if one does (and more than the
    /// other).
    pub fn wire(&self) -> Option<Wire> {
        let most = |n: u64| n > 0 && n * 10 >= self.datagrams * 9;
        if most(self.moldudp64) && self.moldudp64 >= self.iex_tp {
            Some(Wire::MoldUdp64)
        } else if most(self.iex_tp) && self.iex_tp > self.moldudp64 {
            Some(Wire::IexTp)
        } else {
            None
        }
    }

    /// How many of the datagrams decode as `wire`.
    pub fn decoding_as(&self, wire: Wire) -> u64 {
        match wire {
            Wire::MoldUdp64 => self.moldudp64,
            Wire::IexTp => self.iex_tp,
        }
    }
}

impl fmt::Display for Detection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.datagrams == 0 {
            return write!(f, "no UDP datagram");
        }
        write!(
            f,
            "of {} UDP datagrams, {} decode as MoldUDP64 and {} as IEX-TP; the first begins",
            self.datagrams, self.moldudp64, self.iex_tp
        )?;
        for b in &self.first_bytes {
            write!(f, " {b:02X}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nine_in_ten_decide() {
        let mold_heartbeat = b"SESSION001\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00";
        let mut d = Detection::default();
        for _ in 0..9 {
            d.add(mold_heartbeat);
        }
        d.add(b"junk");
        assert_eq!(d.wire(), Some(Wire::MoldUdp64));
        d.add(b"junk");
        assert_eq!(d.wire(), None, "{d}");
        assert!(
            d.to_string()
                .starts_with("of 11 UDP datagrams, 9 decode as MoldUDP64")
        );
        assert!(
            d.to_string()
                .ends_with("53 45 53 53 49 4F 4E 30 30 31 00 00"),
            "{d}"
        );
        assert_eq!(Detection::default().wire(), None);
    }
}
