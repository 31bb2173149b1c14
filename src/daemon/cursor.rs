//! Resume cursors kept across restarts: each stream's epoch and the next sequence its
//! consumers need, in files of the state directory.
//!
//! Where the daemon has a nats sink, a stream's cursor is where JetStream's
//! acknowledgements have got to (the slowest sink's, with several); otherwise it is what the
//! fan-out delivered, read from a consumer queue of its own. The rx thread never waits on
//! any of it.
//!
//! Two files, each written whole to a temporary file and renamed over the old one, so that
//! a reader finds the old file or the new one, never a mix:
//!
//! - `cursors`, by the keeper thread at most every [`WRITE_EVERY`] while anything moved,
//!   not synced: after a process crash (a kill, a panic, the OOM killer) the kernel still
//!   has it, at most [`WRITE_EVERY`] old;
//! - `cursors.synced`, the same text synced to the disk (file and directory) by a thread of
//!   its own at most every [`SYNC_EVERY`]: what survives a power loss. A disk slow to sync
//!   (seconds, seen here under load) delays only this one.
//!
//! Each text carries a serial number, higher for each write across restarts, and ends with
//! an end line. At start the daemon reads both and takes the newest whole one: a torn or
//! empty `cursors` after a power loss is passed over for `cursors.synced`. Any cursor either
//! holds was true when written (a stream's acknowledged position only moves forward within
//! its epoch), so an older one only means more to recover, never a hole.
//!
//! Each MoldUDP64 and IEX-TP stream is given its cursor: if the first session the feed
//! shows is the cursor's, the stream resumes at the cursor and whatever was sent while the
//! daemon was down is a gap recovered from the re-request servers (or, past what they
//! hold, an explicit gap); in another session, the cursor is ignored.
//!
//! # The files
//!
//! Text, one stream a line, tab-separated: venue, stream, epoch label, next sequence. Lines
//! starting with `#` are comments, among them `# serial N` and, last, `# end`; a line that
//! does not parse is ignored with a warning. A file with neither (written before these
//! lines existed) is read as whole.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::log::{Throttle, held_note};
use crate::publish::jsonl::StreamNames;
use crate::publish::{Consumer, Event};
use crate::venue::Resume;

/// The file written at most every [`WRITE_EVERY`], not synced.
pub const FILE_NAME: &str = "cursors";
/// The copy synced to the disk at most every [`SYNC_EVERY`].
pub const SYNCED_NAME: &str = "cursors.synced";
/// `cursors` is written at most this often.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);
/// `cursors.synced` is written at most this often.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);
/// The last line of a whole file.
const END: &str = "# end";
/// The line before the cursors that numbers the write.
const SERIAL: &str = "# serial ";
/// A write (with its sync) that takes this long is logged.
const SLOW_WRITE: Duration = Duration::from_secs(1);
/// Slow writes are logged at most this often.
const SLOW_LOG_EVERY: Duration = Duration::from_secs(60);

/// One stream's position: the epoch label and the next sequence needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The epoch label (`Event::Epoch`).
    pub label: String,
    /// The next sequence consumers need; 0 while none was delivered in the epoch.
    pub next: u64,
}

/// Cursors one source has reached, by consumer stream id.
#[derive(Debug)]
pub struct CursorSet {
    cursors: Mutex<Vec<Option<Cursor>>>,
    changed: AtomicBool,
}

impl CursorSet {
    /// No cursor yet for any of `streams` streams.
    pub fn new(streams: usize) -> Self {
        Self {
            cursors: Mutex::new(vec![None; streams]),
            changed: AtomicBool::new(false),
        }
    }

    /// A new epoch begins on `stream` (the same one again, after a restart, keeps its
    /// position).
    pub fn epoch(&self, stream: u16, label: &str) {
        self.update(stream, |c| {
            if c.as_ref().is_none_or(|c| c.label != label) {
                *c = Some(Cursor {
                    label: label.to_string(),
                    next: 0,
                });
            }
        });
    }

    /// Everything below `next` on `stream` is done with, in its current epoch.
    pub fn advance(&self, stream: u16, next: u64) {
        self.update(stream, |c| {
            if let Some(c) = c {
                c.next = c.next.max(next);
            }
        });
    }

    fn update(&self, stream: u16, f: impl FnOnce(&mut Option<Cursor>)) {
        let mut cursors = self.cursors.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = cursors.get_mut(usize::from(stream)) {
            f(c);
            self.changed.store(true, Ordering::Release);
        }
    }

    fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::AcqRel)
    }

    fn snapshot(&self) -> Vec<Option<Cursor>> {
        self.cursors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Follows one delivered event.
    pub fn track(&self, event: &Event<'_>) {
        match *event {
            Event::Epoch { stream, label } => self.epoch(stream, &String::from_utf8_lossy(label)),
            Event::Message {
                stream,
                seq,
                snapshot: false,
                ..
            } => self.advance(stream, seq.saturating_add(1)),
            Event::Range { stream, last, .. } => self.advance(stream, last.saturating_add(1)),
            Event::Gap { stream, to, .. } => self.advance(stream, to.saturating_add(1)),
            Event::SnapshotEnd { stream, next } => self.advance(stream, next),
            _ => {}
        }
    }
}

/// Per stream, the cursor all sources agree is done: the lowest among those of the same
/// epoch as the first source's.
fn merged(sources: &[Arc<CursorSet>], streams: usize) -> Vec<Option<Cursor>> {
    let snapshots: Vec<Vec<Option<Cursor>>> = sources.iter().map(|s| s.snapshot()).collect();
    (0..streams)
        .map(|i| {
            let mut best: Option<Cursor> = None;
            for c in snapshots.iter().filter_map(|s| s.get(i).cloned().flatten()) {
                best = match best {
                    None => Some(c),
                    Some(b) if b.label == c.label && c.next < b.next => Some(c),
                    Some(b) => Some(b),
                };
            }
            best.filter(|c| c.next > 0)
        })
        .collect()
}

/// `cursors`, where a saved cursor is further on in the same epoch (or a stream has none
/// yet), with the saved one.
fn with_floor(cursors: Vec<Option<Cursor>>, floor: &[Option<Resume>]) -> Vec<Option<Cursor>> {
    cursors
        .into_iter()
        .zip(floor)
        .map(|(c, f)| match (c, f) {
            (Some(c), Some(f)) if c.label == f.label && c.next < f.next => Some(Cursor {
                label: f.label.clone(),
                next: f.next,
            }),
            (None, Some(f)) => Some(Cursor {
                label: f.label.clone(),
                next: f.next,
            }),
            (c, _) => c,
        })
        .collect()
}

/// The file's text for `cursors`, numbered `serial`.
fn render(names: &StreamNames, cursors: &[Option<Cursor>], serial: u64) -> String {
    let mut text = String::from("# gapless resume cursors: venue, stream, epoch, next sequence\n");
    text.push_str(&format!("{SERIAL}{serial}\n"));
    for (i, c) in cursors.iter().enumerate() {
        let (Some(c), Ok(id)) = (c, u16::try_from(i)) else {
            continue;
        };
        if c.label.contains(['\t', '\n']) {
            continue;
        }
        let (venue, stream) = names.get(id);
        text.push_str(&format!("{venue}\t{stream}\t{}\t{}\n", c.label, c.next));
    }
    text.push_str(END);
    text.push('\n');
    text
}

/// Writes `text` to `path` by a temporary file renamed over it; with `sync`, the file's
/// data before the rename and the directory after it.
fn write_atomically(path: &Path, text: &str, sync: bool) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    if sync {
        file.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if sync && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// One file as read: its serial (0 for a file without one) and cursors, when whole.
struct Read {
    serial: u64,
    cursors: HashMap<(String, String), Resume>,
}

/// Reads one cursor file; `None` when it is missing, unreadable or torn.
fn read(path: &Path) -> Option<Read> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => {
            crate::log_warn!("resume cursors {}: not read: {e}", path.display());
            return None;
        }
    };
    let serial = text
        .lines()
        .find_map(|l| l.strip_prefix(SERIAL))
        .map(|n| n.trim().parse::<u64>().ok());
    let whole = text.lines().last() == Some(END);
    let serial = match (serial, whole) {
        (Some(Some(serial)), true) => serial,
        // Written before serials and end lines: whole, as it was synced.
        (None, false) => 0,
        _ => {
            crate::log_warn!(
                "resume cursors {}: not whole (cut short by a crash or a power loss): ignored",
                path.display()
            );
            return None;
        }
    };
    let mut cursors = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        let parsed = match fields.as_slice() {
            [venue, stream, label, next] => next.parse::<u64>().ok().map(|next| {
                (
                    ((*venue).to_string(), (*stream).to_string()),
                    Resume {
                        label: (*label).to_string(),
                        next,
                    },
                )
            }),
            _ => None,
        };
        match parsed {
            Some((key, resume)) => {
                cursors.insert(key, resume);
            }
            None => crate::log_warn!(
                "resume cursors {}: line {} ignored: not venue, stream, epoch and next",
                path.display(),
                n + 1
            ),
        }
    }
    if serial == 0 && cursors.is_empty() {
        // Neither a serial nor a cursor: a file cut short before its serial line, not one
        // of the older format.
        return None;
    }
    Some(Read { serial, cursors })
}

/// The newest whole file of `dir`'s two, if any.
fn newest(dir: &Path) -> Option<Read> {
    [read(&dir.join(FILE_NAME)), read(&dir.join(SYNCED_NAME))]
        .into_iter()
        .flatten()
        .max_by_key(|r| r.serial)
}

/// Reads the cursors saved in `dir`, by `(venue, stream)`, from the newest whole file;
/// none when there is none.
pub fn load(dir: &Path) -> HashMap<(String, String), Resume> {
    newest(dir).map(|r| r.cursors).unwrap_or_default()
}

/// The keeper thread: merges its sources' cursors and writes the files.
pub struct CursorKeeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CursorKeeper {
    /// Starts keeping `dir/cursors` (and `dir/cursors.synced`) from `sources`, and from
    /// `input` (a consumer queue of its own, tracked into a source of its own) when there
    /// is one.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created or a thread cannot start.
    ///
    /// `floor` holds, per stream id, the cursor read at start: it stands until the stream
    /// moves past it in the same epoch, or into another epoch.
    pub fn start(
        dir: &Path,
        names: StreamNames,
        floor: Vec<Option<Resume>>,
        mut sources: Vec<Arc<CursorSet>>,
        input: Option<Consumer>,
    ) -> io::Result<Self> {
        let streams = floor.len();
        std::fs::create_dir_all(dir)?;
        let serial = newest(dir).map_or(0, |r| r.serial);
        let path = dir.join(FILE_NAME);
        let slot = Arc::new(SyncSlot::default());
        let synced_path = dir.join(SYNCED_NAME);
        let syncer_slot = Arc::clone(&slot);
        let syncer = thread::Builder::new()
            .name("gapless-cursors-sync".into())
            .spawn(move || sync_loop(&synced_path, &syncer_slot))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let own = input.map(|i| (i, Arc::new(CursorSet::new(streams))));
        if let Some((_, set)) = &own {
            sources.push(Arc::clone(set));
        }
        let keeper = Keeper {
            path,
            names,
            floor,
            sources,
            serial,
            slot: Arc::clone(&slot),
        };
        let thread = thread::Builder::new()
            .name("gapless-cursors".into())
            .spawn(move || keeper.run(own, &flag, syncer));
        match thread {
            Ok(thread) => Ok(Self {
                stop,
                thread: Some(thread),
            }),
            Err(e) => {
                // The syncing thread has nothing to wait for.
                slot.stop();
                Err(e)
            }
        }
    }

    /// Writes the cursors a last time (both files) and ends the threads.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            crate::log_error!("the resume cursor keeper panicked");
        }
    }
}

impl Drop for CursorKeeper {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the keeper hands the syncing thread: the latest text, and whether to stop.
#[derive(Default)]
struct SyncSlot {
    pending: Mutex<(Option<String>, bool)>,
    wake: Condvar,
}

impl SyncSlot {
    fn hand(&self, text: String, stop: bool) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.0 = Some(text);
        pending.1 |= stop;
        self.wake.notify_one();
    }

    fn stop(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.1 = true;
        self.wake.notify_one();
    }
}

/// The syncing thread: writes the latest text handed to it to `path`, synced, at most
/// every [`SYNC_EVERY`]; at stop, what is pending once more.
fn sync_loop(path: &Path, slot: &SyncSlot) {
    let mut last: Option<Instant> = None;
    let mut failing = false;
    let mut slow_logged = Throttle::new(SLOW_LOG_EVERY);
    loop {
        let (text, stop) = {
            let mut pending = slot.pending.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                let wait =
                    last.map_or(Duration::ZERO, |at| SYNC_EVERY.saturating_sub(at.elapsed()));
                if pending.1 || (pending.0.is_some() && wait.is_zero()) {
                    break;
                }
                // Bounded, so a lost wake-up costs a second at most.
                let wait = if pending.0.is_some() {
                    wait
                } else {
                    SYNC_EVERY
                };
                pending = slot
                    .wake
                    .wait_timeout(pending, wait)
                    .map_or_else(|e| e.into_inner().0, |(guard, _)| guard);
            }
            (pending.0.take(), pending.1)
        };
        if let Some(text) = text {
            let started = Instant::now();
            let written = write_atomically(path, &text, true);
            let took = started.elapsed();
            last = Some(Instant::now());
            let slow_line = if took >= SLOW_WRITE {
                slow_logged.admit()
            } else {
                None
            };
            if let Some(held) = slow_line {
                crate::log_warn!(
                    "resume cursors {}: a synced write took {:.1} s (the disk is slow to \
                     sync); the unsynced copy stays current, and a power loss meanwhile \
                     would resume from an older cursor and recover more{}",
                    path.display(),
                    took.as_secs_f64(),
                    held_note(held)
                );
            }
            report_write(path, written, &mut failing);
        }
        if stop {
            break;
        }
    }
}

/// Logs a write that failed, once until one succeeds again.
fn report_write(path: &Path, written: io::Result<()>, failing: &mut bool) {
    match written {
        Ok(()) => {
            if *failing {
                crate::log_info!("resume cursors {}: written again", path.display());
            }
            *failing = false;
        }
        Err(e) => {
            if !*failing {
                crate::log_warn!(
                    "resume cursors {}: not written: {e}; a restart resumes from the last \
                     cursors written",
                    path.display()
                );
            }
            *failing = true;
        }
    }
}

/// The keeper thread's state.
struct Keeper {
    path: PathBuf,
    names: StreamNames,
    floor: Vec<Option<Resume>>,
    sources: Vec<Arc<CursorSet>>,
    /// The last serial written (or read at start).
    serial: u64,
    slot: Arc<SyncSlot>,
}

impl Keeper {
    fn run(
        mut self,
        mut own: Option<(Consumer, Arc<CursorSet>)>,
        stop: &AtomicBool,
        syncer: JoinHandle<()>,
    ) {
        let mut last_write = Instant::now();
        let mut failing = false;
        loop {
            let stopping = stop.load(Ordering::Acquire);
            if let Some((input, set)) = &mut own {
                while input.pop(|event| set.track(&event)).is_some() {}
            }
            let changed = self
                .sources
                .iter()
                .fold(false, |any, s| s.take_changed() | any);
            if changed {
                self.serial += 1;
                let cursors = with_floor(merged(&self.sources, self.floor.len()), &self.floor);
                let text = render(&self.names, &cursors, self.serial);
                let written = write_atomically(&self.path, &text, false);
                report_write(&self.path, written, &mut failing);
                self.slot.hand(text, stopping);
                last_write = Instant::now();
            }
            if stopping {
                self.slot.stop();
                break;
            }
            let next = last_write + WRITE_EVERY;
            thread::sleep(
                next.saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(10)),
            );
        }
        if syncer.join().is_err() {
            crate::log_error!("the resume cursor syncing thread panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> StreamNames {
        let mut names = StreamNames::new();
        names.set(0, "sim", "a");
        names.set(1, "sim", "b");
        names
    }

    #[test]
    fn cursors_follow_events_and_round_trip_through_the_file() {
        let set = Arc::new(CursorSet::new(2));
        set.track(&Event::Message {
            stream: 0,
            seq: 4,
            recv_ns: 0,
            snapshot: false,
            payload: b"x",
        });
        assert_eq!(
            merged(&[Arc::clone(&set)], 2),
            vec![None, None],
            "no epoch yet"
        );
        set.track(&Event::Epoch {
            stream: 0,
            label: b"SESSION01",
        });
        for seq in [1, 2, 3] {
            set.track(&Event::Message {
                stream: 0,
                seq,
                recv_ns: 0,
                snapshot: false,
                payload: b"x",
            });
        }
        set.track(&Event::Gap {
            stream: 0,
            from: 4,
            to: 9,
        });
        let dir = std::env::temp_dir().join(format!("gapless-cursor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = render(&names(), &merged(&[Arc::clone(&set)], 2), 1);
        write_atomically(&dir.join(FILE_NAME), &text, true).unwrap();
        let saved = load(&dir);
        assert_eq!(
            saved.get(&("sim".to_string(), "a".to_string())),
            Some(&Resume {
                label: "SESSION01".to_string(),
                next: 10
            })
        );
        assert_eq!(saved.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_same_epoch_again_keeps_its_position() {
        let set = CursorSet::new(1);
        set.epoch(0, "E");
        set.advance(0, 50);
        set.epoch(0, "E");
        assert_eq!(set.snapshot()[0].as_ref().map(|c| c.next), Some(50));
        set.epoch(0, "F");
        assert_eq!(set.snapshot()[0].as_ref().map(|c| c.next), Some(0));
    }

    #[test]
    fn a_saved_cursor_stands_until_the_stream_moves_past_it() {
        let resume = |label: &str, next| {
            Some(Resume {
                label: label.to_string(),
                next,
            })
        };
        let at = |label: &str, next| {
            Some(Cursor {
                label: label.to_string(),
                next,
            })
        };
        let floor = [resume("E", 100), resume("E", 100), resume("E", 100)];
        let now = vec![None, at("E", 40), at("F", 3)];
        assert_eq!(
            with_floor(now, &floor),
            vec![at("E", 100), at("E", 100), at("F", 3)]
        );
        assert_eq!(
            with_floor(vec![at("E", 140)], &floor[..1]),
            vec![at("E", 140)]
        );
    }

    #[test]
    fn the_slowest_source_of_an_epoch_decides() {
        let (fast, slow) = (Arc::new(CursorSet::new(1)), Arc::new(CursorSet::new(1)));
        for s in [&fast, &slow] {
            s.epoch(0, "E");
        }
        fast.advance(0, 100);
        slow.advance(0, 40);
        let m = merged(&[Arc::clone(&fast), Arc::clone(&slow)], 1);
        assert_eq!(m[0].as_ref().map(|c| c.next), Some(40));
    }

    #[test]
    fn a_bad_line_is_skipped_and_the_rest_read() {
        let dir = std::env::temp_dir().join(format!("gapless-cursor-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(FILE_NAME),
            "# header\nsim\ta\tE\tnot-a-number\nsim\tb\tE\t7\ngarbage\n",
        )
        .unwrap();
        let saved = load(&dir);
        assert_eq!(saved.len(), 1);
        assert_eq!(saved[&("sim".to_string(), "b".to_string())].next, 7);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("gapless-cursor-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn cursor_text(serial: u64, next: u64) -> String {
        let set = CursorSet::new(1);
        set.epoch(0, "E");
        set.advance(0, next);
        render(&names(), &set.snapshot(), serial)
    }

    fn next_of(dir: &Path) -> Option<u64> {
        load(dir)
            .get(&("sim".to_string(), "a".to_string()))
            .map(|r| r.next)
    }

    #[test]
    fn the_newest_whole_file_is_read_and_a_torn_one_passed_over() {
        let dir = temp("newest");
        std::fs::write(dir.join(SYNCED_NAME), cursor_text(4, 40)).unwrap();
        std::fs::write(dir.join(FILE_NAME), cursor_text(5, 50)).unwrap();
        assert_eq!(next_of(&dir), Some(50), "the fresher file");
        // Cut short (a power loss before the data reached the disk): the synced copy.
        let torn = cursor_text(6, 60);
        std::fs::write(dir.join(FILE_NAME), &torn[..torn.len() - 4]).unwrap();
        assert_eq!(next_of(&dir), Some(40));
        std::fs::write(dir.join(FILE_NAME), "").unwrap();
        assert_eq!(next_of(&dir), Some(40));
        std::fs::write(dir.join(FILE_NAME), cursor_text(3, 30)).unwrap();
        assert_eq!(
            next_of(&dir),
            Some(40),
            "the higher serial, not the file's name"
        );
        std::fs::remove_file(dir.join(SYNCED_NAME)).unwrap();
        assert_eq!(next_of(&dir), Some(30));
        // The older format (no serial, no end line) is read; an empty file is not a file
        // of it.
        std::fs::write(dir.join(FILE_NAME), "sim\ta\tE\t70\n").unwrap();
        assert_eq!(next_of(&dir), Some(70));
        std::fs::write(dir.join(FILE_NAME), "").unwrap();
        assert!(newest(&dir).is_none(), "an empty file is torn, not read");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_keeper_writes_both_files_and_numbers_on_across_restarts() {
        let dir = temp("keeper");
        let serial_of = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix(SERIAL).map(|n| n.parse::<u64>().unwrap()))
                .unwrap()
        };
        let mut last = 0;
        for (round, next) in [(0, 100), (1, 250)] {
            let set = Arc::new(CursorSet::new(2));
            let floor = vec![None, None];
            let keeper =
                CursorKeeper::start(&dir, names(), floor, vec![Arc::clone(&set)], None).unwrap();
            set.epoch(0, "E");
            set.advance(0, next);
            // The last cursors go to both files at stop.
            keeper.stop();
            let fresh = std::fs::read_to_string(dir.join(FILE_NAME)).unwrap();
            let synced = std::fs::read_to_string(dir.join(SYNCED_NAME)).unwrap();
            assert_eq!(fresh, synced, "round {round}");
            assert_eq!(next_of(&dir), Some(next));
            assert!(
                serial_of(FILE_NAME) > last,
                "round {round}: the serial moves on"
            );
            last = serial_of(FILE_NAME);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
