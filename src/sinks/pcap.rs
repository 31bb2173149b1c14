//! The pcap recorder: every datagram the rx thread received, with its receive timestamp,
//! written to pcap files that Wireshark opens, rotating by size.
//!
//! The rx thread only copies each datagram into a lock-free byte queue ([`PcapTap`]);
//! a thread of its own drains the queue into [`RotatingPcapWriter`]. When the queue is
//! full the datagram is not recorded and counted, and the rx thread goes on.
//!
//! Re-request answers are recorded as part of their channel's stream (addressed to its
//! group, from the re-request server): they are that stream's packets, and a replay then
//! sees them where they belong.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rtrb::{Consumer, CopyToUninit, Producer, RingBuffer};

use crate::capture::RotatingPcapWriter;

/// Bytes of a queued datagram's header: length u32, ts u64, src ip u32 + port u16,
/// dst ip u32 + port u16.
const HEADER: usize = 4 + 8 + 6 + 6;

/// Counters of the recorder.
#[derive(Debug, Default)]
pub struct PcapStats {
    /// Datagrams written.
    pub written: AtomicU64,
    /// Datagrams not recorded because the queue was full.
    pub dropped: AtomicU64,
    /// Write errors (the recorder keeps going with the next datagram).
    pub errors: AtomicU64,
}

/// The rx thread's end: copies datagrams into the queue, never blocks.
pub struct PcapTap {
    producer: Producer<u8>,
    stats: Arc<PcapStats>,
}

impl PcapTap {
    /// Queues one datagram; when there is no room it is counted as dropped.
    pub fn record(&mut self, ts_ns: u64, src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) {
        let Ok(len) = u32::try_from(payload.len()) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let total = HEADER + payload.len();
        let Ok(mut chunk) = self.producer.write_chunk_uninit(total) else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..12].copy_from_slice(&ts_ns.to_le_bytes());
        header[12..16].copy_from_slice(&src.ip().octets());
        header[16..18].copy_from_slice(&src.port().to_le_bytes());
        header[18..22].copy_from_slice(&dst.ip().octets());
        header[22..24].copy_from_slice(&dst.port().to_le_bytes());
        let (a, b) = chunk.as_mut_slices();
        let mut filled = 0;
        for part in [&header[..], payload] {
            let mut rest = part;
            while !rest.is_empty() {
                let dst = if filled < a.len() {
                    a.get_mut(filled..)
                } else {
                    b.get_mut(filled - a.len()..)
                };
                let Some(dst) = dst else { break };
                let n = rest.len().min(dst.len());
                let (Some(src), Some(dst), Some(left)) =
                    (rest.get(..n), dst.get_mut(..n), rest.get(n..))
                else {
                    break;
                };
                if n == 0 {
                    break;
                }
                src.copy_to_uninit(dst);
                rest = left;
                filled += n;
            }
        }
        if filled == total {
            // SAFETY: the loop above wrote all `total` slots of the chunk (header then
            // payload, across both pieces), which is what `commit_all` requires.
            unsafe { chunk.commit_all() };
        } else {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The recorder thread.
pub struct PcapSinkHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<PathBuf>>>,
    stats: Arc<PcapStats>,
}

impl PcapSinkHandle {
    /// Drains what is queued, closes the files and returns their paths. Call after the
    /// rx thread dropped its tap.
    pub fn stop(mut self) -> Vec<PathBuf> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }

    /// The recorder's counters.
    pub fn stats(&self) -> &Arc<PcapStats> {
        &self.stats
    }
}

impl Drop for PcapSinkHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts recording to `path` (then `path.1`, `path.2`, ... each at most `rotate_bytes`),
/// with a queue of `queue_bytes` between the rx thread and the writer.
pub fn start(
    path: &Path,
    rotate_bytes: u64,
    queue_bytes: usize,
) -> std::io::Result<(PcapTap, PcapSinkHandle)> {
    let writer = RotatingPcapWriter::create(path, rotate_bytes)?;
    let (producer, consumer) = RingBuffer::new(queue_bytes.max(1 << 16));
    let stats = Arc::new(PcapStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (stats, stop) = (Arc::clone(&stats), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("gapless-pcap-sink".into())
            .spawn(move || drain(consumer, writer, &stats, &stop))?
    };
    Ok((
        PcapTap {
            producer,
            stats: Arc::clone(&stats),
        },
        PcapSinkHandle {
            stop,
            thread: Some(thread),
            stats,
        },
    ))
}

fn drain(
    mut consumer: Consumer<u8>,
    mut writer: RotatingPcapWriter,
    stats: &PcapStats,
    stop: &AtomicBool,
) -> Vec<PathBuf> {
    let mut last_flush = Instant::now();
    let mut payload = Vec::with_capacity(1 << 16);
    loop {
        let mut did = false;
        while let Some((ts, src, dst)) = next_record(&mut consumer, &mut payload) {
            did = true;
            match writer.write_udp(ts, src, dst, &payload) {
                Ok(()) => stats.written.fetch_add(1, Ordering::Relaxed),
                Err(_) => stats.errors.fetch_add(1, Ordering::Relaxed),
            };
        }
        if last_flush.elapsed() >= Duration::from_millis(100) {
            let _ = writer.flush();
            last_flush = Instant::now();
        }
        if !did {
            // The tap is gone (the rx thread ended) or a stop was asked: the queue is
            // drained, so finish.
            if consumer.is_abandoned() || stop.load(Ordering::Relaxed) {
                break;
            }
            // Idle: this thread is off the hot path; a short nap bounds its CPU use.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    writer.finish().unwrap_or_default()
}

/// Takes one queued datagram: its timestamp and addresses, its bytes into `payload`.
fn next_record(
    consumer: &mut Consumer<u8>,
    payload: &mut Vec<u8>,
) -> Option<(u64, SocketAddrV4, SocketAddrV4)> {
    let mut header = [0u8; HEADER];
    {
        // Only looked at: committed together with the payload below, so a record is
        // consumed whole or not at all.
        let chunk = consumer.read_chunk(HEADER).ok()?;
        let (a, b) = chunk.as_slices();
        for (dst, src) in header.iter_mut().zip(a.iter().chain(b.iter())) {
            *dst = *src;
        }
    }
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let chunk = consumer.read_chunk(HEADER + len).ok()?;
    let (a, b) = chunk.as_slices();
    payload.clear();
    payload.extend(a.iter().chain(b.iter()).skip(HEADER));
    chunk.commit_all();
    let ts = u64::from_le_bytes([
        header[4], header[5], header[6], header[7], header[8], header[9], header[10], header[11],
    ]);
    let addr = |at: usize| {
        let &[a, b, c, d, p0, p1] = header.get(at..at + 6)? else {
            return None;
        };
        Some(SocketAddrV4::new(
            Ipv4Addr::new(a, b, c, d),
            u16::from_le_bytes([p0, p1]),
        ))
    };
    Some((ts, addr(12)?, addr(18)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureReader, Stats};

    #[test]
    fn records_every_datagram_in_order_and_counts_drops() {
        let dir = std::env::temp_dir().join(format!("gapless-pcap-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("rec.pcap");
        let (mut tap, handle) = start(&path, 1 << 30, 1 << 20).expect("start");
        let src = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1000);
        let dst = SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 2000);
        for i in 0..500u64 {
            let payload = i.to_be_bytes();
            tap.record(1_700_000_000_000_000_000 + i, src, dst, &payload);
        }
        drop(tap);
        let files = handle.stop();
        assert_eq!(files.len(), 1);
        let mut reader = CaptureReader::open(&files[0]).expect("open");
        let mut link = Stats::default();
        let mut seen = 0u64;
        while let Some(record) = reader.next_record() {
            let record = record.expect("record");
            let d = link.extract(record.link, record.data).expect("udp");
            assert_eq!(d.payload, seen.to_be_bytes());
            assert_eq!((d.src, d.dst), (src, dst));
            assert_eq!(record.ts_ns, 1_700_000_000_000_000_000 + seen);
            seen += 1;
        }
        assert_eq!(seen, 500);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
