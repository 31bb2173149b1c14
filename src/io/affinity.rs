//! Pinning the receive thread to a CPU core.
//!
//! A busy-spinning receive loop belongs on a core of its own (ideally one isolated from the
//! scheduler with `isolcpus`/`nohz_full`), so it is never preempted and its caches stay warm.
//! Pinning is per thread: call [`pin_current_thread`] from the thread that runs the loop.
//!
//! The cores listed as available are those in the calling thread's current affinity mask
//! (`sched_getaffinity`), which is what a container's cpuset or `taskset` leaves it.

use super::IoError;

/// The cores the calling thread may run on, in ascending order (empty if the OS does not
/// report an affinity mask).
pub fn available_cores() -> Vec<usize> {
    let mut cores: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    cores.sort_unstable();
    cores
}

/// The core the calling thread is pinned to, if its affinity mask holds exactly one core.
#[cfg(test)]
pub fn pinned_core() -> Option<usize> {
    match available_cores().as_slice() {
        [only] => Some(*only),
        _ => None,
    }
}

/// The highest core number the affinity calls can express (`CPU_SETSIZE - 1`); larger numbers
/// are refused before reaching the OS.
pub fn max_core() -> usize {
    usize::try_from(libc::CPU_SETSIZE).map_or(0, |n| n.saturating_sub(1))
}

/// Pins the calling thread to `core`.
///
/// Fails with [`IoError::NoSuchCore`], listing the available cores, when the core does not
/// exist or this thread may not run on it. A thread already pinned elsewhere may still move to
/// any core its cgroup allows: that request goes to the OS, which has the last word.
pub fn pin_current_thread(core: usize) -> Result<(), IoError> {
    let available = available_cores();
    let no_such_core = || IoError::NoSuchCore {
        core,
        available: format_cores(&available),
    };
    // Beyond CPU_SETSIZE the cpu_set_t cannot express the core: refuse before the call.
    if core > max_core() {
        return Err(no_such_core());
    }
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(no_such_core())
    }
}

/// Pins the calling thread if a core is configured; returns the core it is now pinned to.
pub fn pin_if_configured(core: Option<usize>) -> Result<Option<usize>, IoError> {
    match core {
        Some(core) => pin_current_thread(core).map(|()| Some(core)),
        None => Ok(None),
    }
}

/// Formats a core list compactly, with runs as ranges: `0-3, 6, 8-9`; `none` when empty.
pub fn format_cores(cores: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while let Some(&start) = cores.get(i) {
        let mut end = start;
        let mut j = i + 1;
        while let Some(&next) = cores.get(j) {
            if Some(next) != end.checked_add(1) {
                break;
            }
            end = next;
            j += 1;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i = j;
    }
    if out.is_empty() {
        out.push_str("none");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    /// Runs `f` on a fresh thread so a pin never outlives the test that made it.
    fn on_fresh_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        thread::spawn(f).join().ok()
    }

    #[test]
    fn available_cores_include_core_zero_here() {
        let cores = available_cores();
        assert!(!cores.is_empty());
        assert!(cores.windows(2).all(|w| w[0] < w[1]));
        assert!(cores.contains(&0), "available: {cores:?}");
    }

    #[test]
    fn pinning_to_core_zero_works() {
        let result = on_fresh_thread(|| {
            let pinned = pin_current_thread(0).map_err(|e| e.to_string());
            (pinned, pinned_core(), available_cores())
        });
        let Some((pinned, now, cores)) = result else {
            panic!("the pinning thread panicked");
        };
        assert_eq!(pinned, Ok(()));
        assert_eq!(now, Some(0));
        assert_eq!(cores, vec![0]);
    }

    #[test]
    fn pinning_to_a_missing_core_fails_with_the_list() {
        let result = on_fresh_thread(|| {
            let expected = format_cores(&available_cores());
            (
                pin_current_thread(9999).map_err(|e| e.to_string()),
                expected,
            )
        });
        let Some((result, expected)) = result else {
            panic!("the pinning thread panicked");
        };
        let Err(message) = result else {
            panic!("core 9999 was accepted");
        };
        assert_eq!(
            message,
            format!(
                "cannot pin to core 9999: no such core for this thread (available: {expected})"
            )
        );
    }

    #[test]
    fn cores_past_cpu_setsize_are_refused_before_the_os_call() {
        let result = on_fresh_thread(|| {
            (
                pin_current_thread(usize::MAX).is_err(),
                pin_current_thread(max_core() + 1).is_err(),
            )
        });
        assert_eq!(result, Some((true, true)));
    }

    #[test]
    fn optional_pinning_does_nothing_without_a_core() {
        let result = on_fresh_thread(|| {
            (
                pin_if_configured(None).map_err(|e| e.to_string()),
                pin_if_configured(Some(0)).map_err(|e| e.to_string()),
            )
        });
        assert_eq!(result, Some((Ok(None), Ok(Some(0)))));
    }

    #[test]
    fn core_lists_are_compact() {
        assert_eq!(format_cores(&[]), "none");
        assert_eq!(format_cores(&[0]), "0");
        assert_eq!(format_cores(&[0, 1]), "0-1");
        assert_eq!(format_cores(&[0, 1, 2, 3, 6, 8, 9]), "0-3, 6, 8-9");
        assert_eq!(format_cores(&[5, usize::MAX]), "5, 18446744073709551615");
    }
}
