//! Resume cursors kept across restarts: each stream's epoch and the next sequence its
//! consumers need, in a file of the state directory.
//!
//! Where the daemon has a nats sink, a stream's cursor is where JetStream's
//! acknowledgements have got to (the slowest sink's, with several); otherwise it is what the
//! fan-out delivered, read from a consumer queue of its own. A keeper thread writes the file
//! at most every [`WRITE_EVERY`] while anything moved, by writing a temporary file, syncing
//! it and renaming it over the old one: a crash leaves the old file or the new one, never a
//! mix. The rx thread never waits on any of it.
//!
//! At start the daemon reads the file and gives each MoldUDP64 and IEX-TP stream its cursor:
//! if the first session the feed shows is the cursor's, the stream resumes at the cursor and
//! whatever was sent while the daemon was down is a gap recovered from the re-request server
//! (or, past what it holds, an explicit gap); in another session, the cursor is ignored.
//!
//! # The file
//!
//! Text, one stream a line, tab-separated: venue, stream, epoch label, next sequence. Lines
//! starting with `#` are comments; a line that does not parse is ignored with a warning.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::publish::jsonl::StreamNames;
use crate::publish::{Consumer, Event};
use crate::venue::Resume;

/// The file's name in the state directory.
pub const FILE_NAME: &str = "cursors";
/// The file is written at most this often.
pub const WRITE_EVERY: Duration = Duration::from_millis(100);
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

/// The file's text for `cursors`.
fn render(names: &StreamNames, cursors: &[Option<Cursor>]) -> String {
    let mut text = String::from("# gapless resume cursors: venue, stream, epoch, next sequence\n");
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
    text
}

/// Writes `text` to `path` by a synced temporary file renamed over it.
fn write_atomically(path: &Path, text: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_data()?;
    std::fs::rename(&tmp, path)
}

/// Reads the cursors saved in `dir`, by `(venue, stream)`; none when there is no file.
pub fn load(dir: &Path) -> HashMap<(String, String), Resume> {
    let path = dir.join(FILE_NAME);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            crate::log_warn!("resume cursors {}: not read: {e}", path.display());
            return HashMap::new();
        }
    };
    let mut saved = HashMap::new();
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
                saved.insert(key, resume);
            }
            None => crate::log_warn!(
                "resume cursors {}: line {} ignored: not venue, stream, epoch and next",
                path.display(),
                n + 1
            ),
        }
    }
    saved
}

/// The keeper thread: merges its sources' cursors and writes the file.
pub struct CursorKeeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CursorKeeper {
    /// Starts keeping `dir/cursors` from `sources`, and from `input` (a consumer queue of
    /// its own, tracked into a source of its own) when there is one.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created or the thread cannot start.
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
        let path = dir.join(FILE_NAME);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let own = input.map(|i| (i, Arc::new(CursorSet::new(streams))));
        if let Some((_, set)) = &own {
            sources.push(Arc::clone(set));
        }
        let thread = thread::Builder::new()
            .name("gapless-cursors".into())
            .spawn(move || keep(&path, &names, &floor, &sources, own, &flag))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// Writes the cursors a last time and ends the thread.
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

fn keep(
    path: &Path,
    names: &StreamNames,
    floor: &[Option<Resume>],
    sources: &[Arc<CursorSet>],
    mut own: Option<(Consumer, Arc<CursorSet>)>,
    stop: &AtomicBool,
) {
    let mut last_write = Instant::now();
    let mut failing = false;
    let mut slow_logged: Option<Instant> = None;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if let Some((input, set)) = &mut own {
            while input.pop(|event| set.track(&event)).is_some() {}
        }
        let changed = sources.iter().fold(false, |any, s| s.take_changed() | any);
        if changed {
            let text = render(names, &with_floor(merged(sources, floor.len()), floor));
            let started = Instant::now();
            let written = write_atomically(path, &text);
            let took = started.elapsed();
            if took >= SLOW_WRITE
                && slow_logged.is_none_or(|at: Instant| at.elapsed() >= SLOW_LOG_EVERY)
            {
                slow_logged = Some(Instant::now());
                crate::log_warn!(
                    "resume cursors {}: a write took {:.1} s (the disk is slow to sync); \
                     meanwhile a restart would resume from the cursors written before, and \
                     recover more",
                    path.display(),
                    took.as_secs_f64()
                );
            }
            match written {
                Ok(()) => {
                    if failing {
                        crate::log_info!("resume cursors {}: written again", path.display());
                    }
                    failing = false;
                }
                Err(e) => {
                    if !failing {
                        crate::log_warn!(
                            "resume cursors {}: not written: {e}; a restart resumes from \
                             the last cursors written",
                            path.display()
                        );
                    }
                    failing = true;
                }
            }
            last_write = Instant::now();
        }
        if stopping {
            break;
        }
        let next = last_write + WRITE_EVERY;
        thread::sleep(
            next.saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10)),
        );
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
        let text = render(&names(), &merged(&[Arc::clone(&set)], 2));
        write_atomically(&dir.join(FILE_NAME), &text).unwrap();
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
}
