//! Payload lifetime: where a message's bytes are while the sequencer holds it.
//!
//! A message delivered at once never leaves the receive buffer: it is
//! [`Payload::Current`], an offset into the datagram being handled. Only when a message of
//! a datagram must be buffered is the datagram copied, once, into a free slot of the
//! [`PacketArena`]; every buffered message of it is then [`Payload::Stored`] and holds one
//! reference, and the datagram holds one more while its messages are being handled. The
//! slot returns to the free list when its last reference goes. With as many slots as the
//! reorder ring may buffer messages, a free slot always exists when one is needed: every
//! slot in use holds at least one buffered message.

use std::num::NonZeroU32;

/// An arena slot (stored as its index plus one, so a [`Payload`] needs no tag byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotId(NonZeroU32);

impl SlotId {
    fn new(index: u32) -> Option<Self> {
        index.checked_add(1).and_then(NonZeroU32::new).map(Self)
    }

    fn index(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

/// Where a message's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// In the datagram being handled now.
    Current {
        /// Offset of the message in the datagram.
        offset: u16,
        /// Length of the message.
        len: u16,
    },
    /// In an arena slot, which this reference keeps alive.
    Stored {
        /// The slot.
        slot: SlotId,
        /// Offset of the message in the stored datagram.
        offset: u16,
        /// Length of the message.
        len: u16,
    },
}

impl Payload {
    /// The slot this payload keeps alive, if it is stored.
    pub fn slot(self) -> Option<SlotId> {
        match self {
            Self::Current { .. } => None,
            Self::Stored { slot, .. } => Some(slot),
        }
    }
}

/// Fixed-size datagram slots with reference counts.
#[derive(Debug)]
pub struct PacketArena {
    bytes: Box<[u8]>,
    lens: Box<[u16]>,
    recv_ns: Box<[u64]>,
    refs: Box<[u32]>,
    in_use: Box<[bool]>,
    free: Vec<SlotId>,
    slot_size: usize,
}

impl PacketArena {
    /// `slots` slots of `slot_size` bytes each, allocated now and never again.
    pub fn new(slots: usize, slot_size: usize) -> Self {
        let slots = slots.clamp(1, u32::MAX as usize - 1);
        let slot_size = slot_size.clamp(1, u16::MAX as usize);
        Self {
            bytes: vec![0u8; slots * slot_size].into_boxed_slice(),
            lens: vec![0u16; slots].into_boxed_slice(),
            recv_ns: vec![0u64; slots].into_boxed_slice(),
            refs: vec![0u32; slots].into_boxed_slice(),
            in_use: vec![false; slots].into_boxed_slice(),
            free: (0..slots as u32).rev().filter_map(SlotId::new).collect(),
            slot_size,
        }
    }

    /// Slots not in use.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Copies `datagram` into a free slot with no references yet. `None` when none is free
    /// or the datagram is larger than a slot.
    pub fn store(&mut self, datagram: &[u8], recv_ns: u64) -> Option<SlotId> {
        if datagram.len() > self.slot_size {
            return None;
        }
        let id = self.free.pop()?;
        let slot = id.index();
        if let Some(used) = self.in_use.get_mut(slot) {
            *used = true;
        }
        let start = slot * self.slot_size;
        if let Some(dst) = self.bytes.get_mut(start..start + datagram.len()) {
            dst.copy_from_slice(datagram);
        }
        if let Some(len) = self.lens.get_mut(slot) {
            *len = datagram.len() as u16;
        }
        if let Some(t) = self.recv_ns.get_mut(slot) {
            *t = recv_ns;
        }
        Some(id)
    }

    /// Adds a reference to `slot`.
    pub fn retain(&mut self, slot: SlotId) {
        if let Some(r) = self.refs.get_mut(slot.index()) {
            *r += 1;
        }
    }

    /// Drops a reference; the slot is freed with its last one.
    pub fn release(&mut self, slot: SlotId) {
        if let Some(r) = self.refs.get_mut(slot.index())
            && *r > 0
        {
            *r -= 1;
            if *r == 0 {
                self.free_slot(slot);
            }
        }
    }

    fn free_slot(&mut self, slot: SlotId) {
        if let Some(used) = self.in_use.get_mut(slot.index())
            && *used
        {
            *used = false;
            self.free.push(slot);
        }
    }

    /// The bytes of a stored message and its datagram's receive time; `None` for a
    /// payload in the current datagram.
    pub fn get(&self, payload: Payload) -> Option<(&[u8], u64)> {
        let Payload::Stored { slot, offset, len } = payload else {
            return None;
        };
        let slot = slot.index();
        let stored = *self.lens.get(slot)? as usize;
        let (offset, len) = (usize::from(offset), usize::from(len));
        if offset + len > stored {
            return None;
        }
        let start = slot * self.slot_size + offset;
        let bytes = self.bytes.get(start..start + len)?;
        Some((bytes, *self.recv_ns.get(slot)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_retain_release_cycle() {
        let mut arena = PacketArena::new(2, 64);
        let a = arena.store(b"hello world", 7).unwrap();
        arena.retain(a);
        arena.retain(a);
        let msg = Payload::Stored {
            slot: a,
            offset: 6,
            len: 5,
        };
        assert_eq!(arena.get(msg), Some((&b"world"[..], 7)));
        let b = arena.store(b"x", 8).unwrap();
        arena.retain(b);
        arena.release(b);
        assert_eq!(arena.free_slots(), 1);
        arena.release(a);
        assert_eq!(arena.free_slots(), 1);
        arena.release(a);
        assert_eq!(arena.free_slots(), 2);
    }

    #[test]
    fn refuses_oversized_and_when_full() {
        let mut arena = PacketArena::new(1, 4);
        assert_eq!(arena.store(b"too long", 0), None);
        let a = arena.store(b"ok", 0).unwrap();
        arena.retain(a);
        assert_eq!(arena.store(b"no", 0), None);
        let bad = Payload::Stored {
            slot: a,
            offset: 1,
            len: 5,
        };
        assert_eq!(arena.get(bad), None);
        assert_eq!(arena.get(Payload::Current { offset: 0, len: 1 }), None);
    }

    #[test]
    fn a_payload_is_as_small_as_a_bare_reference() {
        // The reorder ring holds one per slot: the enum must cost no tag byte.
        assert_eq!(std::mem::size_of::<Payload>(), 8);
    }
}
