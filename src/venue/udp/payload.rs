//! The payload arena: fixed slots that hold a datagram while some of its messages wait in
//! the reorder ring.
//!
//! A message delivered at once never touches the arena: its bytes are read straight from
//! the receive buffer. Only when a message of a datagram must be buffered is the datagram
//! copied, once, into a free slot; every buffered message then refers to `(slot, offset,
//! len)` and holds one reference, and the datagram holds one more while its messages are
//! being handled. The slot returns to the free list when its last reference goes. With as many slots as the reorder ring may buffer messages, a
//! free slot always exists when one is needed: every slot in use holds at least one
//! buffered message.

/// Where a message's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgRef {
    /// Arena slot, or [`MsgRef::CURRENT`] for the datagram being processed.
    pub slot: u32,
    /// Offset of the message in the datagram.
    pub offset: u16,
    /// Length of the message.
    pub len: u16,
}

impl MsgRef {
    /// The slot value naming the datagram being processed right now.
    pub const CURRENT: u32 = u32::MAX;
}

/// Fixed-size datagram slots with reference counts.
#[derive(Debug)]
pub struct PacketArena {
    bytes: Box<[u8]>,
    lens: Box<[u16]>,
    recv_ns: Box<[u64]>,
    refs: Box<[u32]>,
    in_use: Box<[bool]>,
    free: Vec<u32>,
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
            free: (0..slots as u32).rev().collect(),
            slot_size,
        }
    }

    /// Slots not in use.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Copies `datagram` into a free slot with no references yet. `None` when none is free
    /// or the datagram is larger than a slot.
    pub fn store(&mut self, datagram: &[u8], recv_ns: u64) -> Option<u32> {
        if datagram.len() > self.slot_size {
            return None;
        }
        let slot = self.free.pop()?;
        if let Some(used) = self.in_use.get_mut(slot as usize) {
            *used = true;
        }
        let start = slot as usize * self.slot_size;
        if let Some(dst) = self.bytes.get_mut(start..start + datagram.len()) {
            dst.copy_from_slice(datagram);
        }
        if let Some(len) = self.lens.get_mut(slot as usize) {
            *len = datagram.len() as u16;
        }
        if let Some(t) = self.recv_ns.get_mut(slot as usize) {
            *t = recv_ns;
        }
        Some(slot)
    }

    /// Adds a reference to `slot`.
    pub fn retain(&mut self, slot: u32) {
        if let Some(r) = self.refs.get_mut(slot as usize) {
            *r += 1;
        }
    }

    /// Drops a reference; the slot is freed with its last one.
    pub fn release(&mut self, slot: u32) {
        if let Some(r) = self.refs.get_mut(slot as usize)
            && *r > 0
        {
            *r -= 1;
            if *r == 0 {
                self.free_slot(slot);
            }
        }
    }

    fn free_slot(&mut self, slot: u32) {
        if let Some(used) = self.in_use.get_mut(slot as usize)
            && *used
        {
            *used = false;
            self.free.push(slot);
        }
    }

    /// The bytes of a message in a slot, and the slot's receive time.
    pub fn get(&self, msg: MsgRef) -> Option<(&[u8], u64)> {
        let slot = msg.slot as usize;
        let stored = *self.lens.get(slot)? as usize;
        let (offset, len) = (msg.offset as usize, msg.len as usize);
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
        let msg = MsgRef {
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
        let bad = MsgRef {
            slot: a,
            offset: 1,
            len: 5,
        };
        assert_eq!(arena.get(bad), None);
    }
}
