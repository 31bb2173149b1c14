//! Fixed storage for the events of one symbol that wait for its snapshot.
//!
//! A byte ring holds the events' JSON back to back, oldest first; an entry ring of the same
//! order holds their ids, receive times and places. Both are allocated once. An event that
//! does not fit the free space at the end of the ring goes to its start when that part is
//! free; when neither is, the oldest events are dropped until it fits. An event larger than
//! the whole ring cannot be kept: everything is dropped, since the events before it can no
//! longer be part of a continuous chain.
//!
//! Each stored event has a handle (a counter that never repeats), so a handle taken before
//! an event was dropped can never read another event's bytes.

use super::rules::Ids;

/// One stored event.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    ids: Ids,
    recv_ns: u64,
    offset: usize,
    len: usize,
}

/// What [`Pending::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The event is stored; `evicted` older events were dropped to make room.
    Kept {
        /// Older events dropped.
        evicted: usize,
    },
    /// The event is larger than the ring: it and every stored event (`evicted`) are dropped.
    TooLarge {
        /// Stored events dropped.
        evicted: usize,
    },
}

/// The events of one symbol, oldest first, in fixed memory.
#[derive(Debug)]
pub(crate) struct Pending {
    bytes: Box<[u8]>,
    entries: Box<[Entry]>,
    /// Index in `entries` of the oldest event.
    head: usize,
    len: usize,
    /// Handle of the oldest event.
    head_handle: u64,
    hwm: usize,
}

impl Pending {
    /// Room for `max_events` events and `max_bytes` bytes (each at least 1).
    pub(crate) fn new(max_events: usize, max_bytes: usize) -> Self {
        Self {
            bytes: vec![0u8; max_bytes.max(1)].into_boxed_slice(),
            entries: vec![Entry::default(); max_events.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
            head_handle: 0,
            hwm: 0,
        }
    }

    /// Events stored now.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is stored.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most events ever stored at once.
    pub(crate) fn hwm(&self) -> usize {
        self.hwm
    }

    fn entry(&self, k: usize) -> Option<&Entry> {
        if k >= self.len {
            return None;
        }
        self.entries.get((self.head + k) % self.entries.len())
    }

    /// The oldest event's handle and ids.
    pub(crate) fn front(&self) -> Option<(u64, Ids)> {
        self.entry(0).map(|e| (self.head_handle, e.ids))
    }

    /// The newest event's ids.
    pub(crate) fn newest(&self) -> Option<Ids> {
        self.len
            .checked_sub(1)
            .and_then(|k| self.entry(k))
            .map(|e| e.ids)
    }

    /// The ids of every stored event, oldest first.
    pub(crate) fn ids(&self) -> impl Iterator<Item = Ids> + '_ {
        (0..self.len).filter_map(|k| self.entry(k).map(|e| e.ids))
    }

    /// The receive time and bytes of the event with `handle`, while it is stored.
    pub(crate) fn get(&self, handle: u64) -> Option<(u64, &[u8])> {
        let k = usize::try_from(handle.checked_sub(self.head_handle)?).ok()?;
        let e = self.entry(k)?;
        let bytes = self.bytes.get(e.offset..e.offset.checked_add(e.len)?)?;
        Some((e.recv_ns, bytes))
    }

    /// Drops the oldest event.
    pub(crate) fn pop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.head = (self.head + 1) % self.entries.len();
        self.len -= 1;
        self.head_handle = self.head_handle.wrapping_add(1);
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// Drops every event.
    pub(crate) fn clear(&mut self) {
        self.head_handle = self.head_handle.wrapping_add(self.len as u64);
        self.head = 0;
        self.len = 0;
    }

    /// Where `n` bytes (`0 < n <= capacity`) can go now, if anywhere.
    fn place(&self, n: usize) -> Option<usize> {
        let cap = self.bytes.len();
        let (Some(oldest), Some(newest)) = (
            self.entry(0),
            self.len.checked_sub(1).and_then(|k| self.entry(k)),
        ) else {
            return Some(0);
        };
        let end = newest.offset + newest.len.max(1);
        if newest.offset >= oldest.offset {
            // In use: [oldest, end). Free: [end, cap) and [0, oldest).
            if end + n <= cap {
                Some(end)
            } else if n <= oldest.offset {
                Some(0)
            } else {
                None
            }
        } else {
            // Wrapped. In use: [oldest, ..) and [0, end). Free: [end, oldest).
            (end + n <= oldest.offset).then_some(end)
        }
    }

    /// Stores an event, dropping the oldest ones when there is no room.
    pub(crate) fn push(&mut self, ids: Ids, recv_ns: u64, bytes: &[u8]) -> Stored {
        // An empty event would sit on top of its neighbour's offset; events are objects, so
        // they are never empty, but one byte of padding keeps the layout unambiguous.
        let n = bytes.len().max(1);
        if n > self.bytes.len() {
            let evicted = self.len;
            self.clear();
            return Stored::TooLarge { evicted };
        }
        let mut evicted = 0;
        let offset = loop {
            if self.len < self.entries.len()
                && let Some(offset) = self.place(n)
            {
                break offset;
            }
            // Not empty here: an empty ring always has room for `n <= capacity`.
            self.pop_front();
            evicted += 1;
        };
        if let Some(dst) = self.bytes.get_mut(offset..offset + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        let index = (self.head + self.len) % self.entries.len();
        if let Some(slot) = self.entries.get_mut(index) {
            *slot = Entry {
                ids,
                recv_ns,
                offset,
                len: bytes.len(),
            };
        }
        self.len += 1;
        self.hwm = self.hwm.max(self.len);
        Stored::Kept { evicted }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(first: u64) -> Ids {
        Ids {
            first,
            last: first,
            prev: None,
        }
    }

    fn payloads(p: &Pending) -> Vec<Vec<u8>> {
        let Some((head, _)) = p.front() else {
            return Vec::new();
        };
        (0..p.len() as u64)
            .filter_map(|k| p.get(head + k).map(|(_, b)| b.to_vec()))
            .collect()
    }

    #[test]
    fn fifo_with_handles() {
        let mut p = Pending::new(4, 64);
        assert_eq!(p.push(ids(1), 10, b"aa"), Stored::Kept { evicted: 0 });
        assert_eq!(p.push(ids(2), 20, b"bbb"), Stored::Kept { evicted: 0 });
        let (h, first) = p.front().unwrap();
        assert_eq!(first.first, 1);
        assert_eq!(p.get(h), Some((10, &b"aa"[..])));
        assert_eq!(p.get(h + 1), Some((20, &b"bbb"[..])));
        assert_eq!(p.get(h + 2), None);
        p.pop_front();
        assert_eq!(p.get(h), None, "a dropped event's handle reads nothing");
        assert_eq!(p.newest().map(|i| i.first), Some(2));
        p.clear();
        assert!(p.is_empty());
        assert_eq!(p.get(h + 1), None);
    }

    #[test]
    fn entry_limit_drops_the_oldest() {
        let mut p = Pending::new(3, 1024);
        for k in 0..3 {
            assert_eq!(p.push(ids(k), 0, b"x"), Stored::Kept { evicted: 0 });
        }
        assert_eq!(p.push(ids(3), 0, b"y"), Stored::Kept { evicted: 1 });
        assert_eq!(p.ids().map(|i| i.first).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(p.hwm(), 3);
    }

    #[test]
    fn byte_ring_wraps_and_evicts() {
        let mut p = Pending::new(16, 10);
        p.push(ids(1), 0, b"aaaa");
        p.push(ids(2), 0, b"bbbb");
        // 2 bytes left at the end; 6 needed: the oldest goes, the event wraps to 0.
        assert_eq!(p.push(ids(3), 0, b"cccccc"), Stored::Kept { evicted: 2 });
        assert_eq!(payloads(&p), [b"cccccc".to_vec()]);
        p.push(ids(4), 0, b"dd");
        p.push(ids(5), 0, b"ee");
        assert_eq!(p.push(ids(6), 0, b"fff"), Stored::Kept { evicted: 1 });
        assert_eq!(
            payloads(&p),
            [b"dd".to_vec(), b"ee".to_vec(), b"fff".to_vec()]
        );
        assert_eq!(
            p.push(ids(7), 0, b"too long event"),
            Stored::TooLarge { evicted: 3 }
        );
        assert!(p.is_empty());
        assert_eq!(
            p.push(ids(8), 0, b"0123456789"),
            Stored::Kept { evicted: 0 }
        );
    }

    #[test]
    fn stored_bytes_never_overlap() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut p = Pending::new(7, 50);
        let mut kept: std::collections::VecDeque<Vec<u8>> = Default::default();
        for k in 0..5000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 1 + (seed % 24) as usize;
            let body = vec![(k % 251) as u8; len];
            match p.push(ids(k), k, &body) {
                Stored::Kept { evicted } => {
                    for _ in 0..evicted {
                        kept.pop_front();
                    }
                    kept.push_back(body);
                }
                Stored::TooLarge { .. } => kept.clear(),
            }
            assert_eq!(payloads(&p), Vec::from(kept.clone()));
        }
    }
}
