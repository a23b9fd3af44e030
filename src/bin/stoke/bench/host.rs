//! What `stoke bench` measures of the host, whatever the pipeline: quantiles, the process's and
//! each thread's CPU time (from /proc), the cores of each thread group over the window, a
//! trainer's busy step.

use super::secs;
use std::collections::HashMap;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Measurements that do not depend on the pipeline.

/// The `q`-quantile (0..=1) of `v` by the nearest-rank method; `None` for an empty slice.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = (q * s.len() as f64).ceil().max(1.0) as usize;
    Some(s[rank.min(s.len()) - 1])
}

/// User + system CPU time of this process so far (all threads).
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass, which is zero-initialised plain data.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time (user + system) of each thread of this process now, by thread id, with its name
/// (`/proc/self/task/<tid>/stat`, clock ticks; the name as the kernel keeps it, 15 bytes at
/// most). Empty where /proc is not there.
pub fn thread_cpu_times() -> HashMap<u64, (String, Duration)> {
    // SAFETY: sysconf reads a constant.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return out };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u64>().ok()) else { continue };
        // A thread that ended between the listing and the read is skipped.
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        if let Some((name, ticks)) = parse_task_stat(&stat) {
            out.insert(tid, (name, Duration::from_secs_f64(ticks as f64 / tick)));
        }
    }
    out
}

/// (name, utime + stime in clock ticks) from a `/proc/<pid>/task/<tid>/stat` line: the name
/// is between the first `(` and the last `)` (it may hold spaces and parentheses), utime and
/// stime are the 12th and 13th fields after it.
pub(super) fn parse_task_stat(stat: &str) -> Option<(String, u64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let name = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace().skip(11);
    let utime: u64 = rest.next()?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    Some((name, utime + stime))
}

/// A thread's group: its name without a trailing worker number (`stoke-reader-1` →
/// `stoke-reader`).
pub(super) fn thread_group(name: &str) -> String {
    let g = name.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches(['-', '_', ' ']);
    if g.is_empty() {
        name.to_string()
    } else {
        g.to_string()
    }
}

/// CPU cores each group of threads used between two [`thread_cpu_times`] samples `seconds`
/// apart, busiest first; the threads that ended in between are in one row, what the process's
/// CPU time (`process`, same span) holds beyond the rest. (The backends make every thread they
/// use when they start: none of theirs begins and ends inside a window.)
pub(super) fn cpu_by_thread(
    before: &HashMap<u64, (String, Duration)>,
    after: &HashMap<u64, (String, Duration)>,
    process: Duration,
    seconds: f64,
) -> Vec<ThreadCpu> {
    let mut groups: std::collections::BTreeMap<String, (usize, f64)> = std::collections::BTreeMap::new();
    let mut seen = 0.0;
    for (tid, (name, t)) in after {
        // A thread that started in the window counts from zero.
        let d = secs(t.saturating_sub(before.get(tid).map_or(Duration::ZERO, |b| b.1)));
        seen += d;
        let g = groups.entry(thread_group(name)).or_default();
        g.0 += 1;
        g.1 += d;
    }
    let mut rows: Vec<ThreadCpu> =
        groups.into_iter().map(|(name, (threads, cpu))| ThreadCpu { name, threads, cores: cpu / seconds }).collect();
    let ended = secs(process) - seen;
    let ended_threads = before.keys().filter(|t| !after.contains_key(t)).count();
    // Clock-tick rounding of the threads still there can exceed the process's own total a little.
    if ended > 0.0 {
        rows.push(ThreadCpu { name: ENDED_THREADS.into(), threads: ended_threads, cores: ended / seconds });
    }
    rows.sort_by(|a, b| b.cores.total_cmp(&a.cores));
    rows
}

/// [`ThreadCpu::name`] of the threads that ended during the window.
pub const ENDED_THREADS: &str = "(ended in the window)";

/// Busy-wait for `d` (a trainer step that keeps its core busy, as a real one does).
pub fn busy_wait(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// CPU cores a group of threads used over the window.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ThreadCpu {
    /// The threads' name without the worker number, or [`ENDED_THREADS`]: `stoke` (the main
    /// thread, the trainer here), `stoke-pipeline` (the producer), `stoke-reader`, `stoke-cpu`
    /// (the CPU backend's workers), `stoke-gpu-cpu` (the CUDA backend's CPU route),
    /// `stoke-gpu-ahead` (its next batch staged ahead), `stoke-gpu-cuda` and `stoke-gpu-lane`
    /// (the CUDA decoders), the driver's own (`cuda-EvtHandlr` …); a thread a library starts
    /// unnamed carries the name of the thread that started it.
    pub name: String,
    /// Threads in the group (for [`ENDED_THREADS`]: those alive when the window began; the
    /// ones that began and ended inside it are not counted, their time is).
    pub threads: usize,
    /// CPU time over the window's length.
    pub cores: f64,
}
