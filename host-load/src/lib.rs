//! How busy the machine's CPUs were during a timed run (`gpupool demo`, the compute-quota tests), so
//! that a missed latency or delivery target can be put down to the host (other work, a hypervisor
//! stealing CPU) or to the pool. It reads /proc only: the `cpu` line of /proc/stat (busy and steal
//! time of all CPUs), /proc/loadavg, and for the run's own processes (daemon, tenants, the driver of
//! the run) /proc/PID/stat (their CPU time, exited threads included) and /proc/PID/task/TID/schedstat
//! (each thread's time runnable but waiting for a CPU). Nothing here judges quotas, and nothing here
//! touches a device. "The demo" below means the run's own processes.

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

/// The host is busy when the hypervisor took at least this share of the CPUs...
pub const BUSY_STEAL_PCT: f64 = 5.0;
/// ...or when other processes used at least this share of the CPUs (all of them together, so a
/// small job on a large machine does not count)...
pub const BUSY_OTHERS_PCT: f64 = 10.0;
/// ...while the demo's threads waited, on average, at least this long each time for a CPU: they
/// queued behind something running. Waking on an idle CPU takes a few microseconds (5 to 11 us a
/// wait measured on the 2-CPU build VM); with three busy loops beside the demo it was 234 us, with a
/// compiler running 109 us. The mean, not the total per second: the total grows with how often the
/// demo's threads wake, idle host or not (about 1 s per s on that VM either way).
pub const BUSY_WAIT_US_EACH: f64 = 50.0;

/// Cumulative time of all CPUs together, from the `cpu` line of /proc/stat, in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq (guest time is already inside user and nice).
    pub busy: u64,
    /// Time the hypervisor ran something else while a CPU of this machine had work.
    pub steal: u64,
    /// Everything: busy, idle, iowait and steal.
    pub total: u64,
}

/// The `cpu` line of /proc/stat, and how many `cpuN` lines (online CPUs) follow it.
pub fn parse_proc_stat(text: &str) -> Option<(CpuTimes, usize)> {
    let mut times = None;
    let mut cpus = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("cpu") => {
                // user nice system idle iowait irq softirq steal guest guest_nice; older kernels
                // stop early, so missing columns are 0.
                let v: Vec<u64> = words.map(str::parse).collect::<Result<_, _>>().ok()?;
                let col = |i: usize| v.get(i).copied().unwrap_or(0);
                if v.len() < 4 {
                    return None;
                }
                times = Some(CpuTimes {
                    busy: col(0) + col(1) + col(2) + col(5) + col(6),
                    steal: col(7),
                    total: (0..8).map(col).sum(),
                });
            }
            Some(w) if w.starts_with("cpu") && w[3..].parse::<u32>().is_ok() => cpus += 1,
            _ => {}
        }
    }
    Some((times?, cpus.max(1)))
}

/// The 1-minute load average, the first field of /proc/loadavg.
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// utime + stime (clock ticks) from /proc/PID/stat: the process's CPU time, exited threads included.
/// The command name (field 2) may hold spaces and parentheses, so fields are counted after the last
/// `)`.
pub fn parse_pid_cpu_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// A thread's run-queue delay (ns spent runnable, waiting for a CPU) and how many times it was put on
/// a CPU, from /proc/PID/task/TID/schedstat: `<ns on a CPU> <ns waiting> <timeslices>`.
pub fn parse_schedstat(text: &str) -> Option<Waits> {
    let mut words = text.split_whitespace();
    words.next()?.parse::<u64>().ok()?;
    Some(Waits { ns: words.next()?.parse().ok()?, times: words.next()?.parse().ok()? })
}

/// A thread's cumulative run-queue delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waits {
    pub ns: u64,
    /// Times it was put on a CPU (each after a wait, however short).
    pub times: u64,
}

impl Waits {
    fn since(self, earlier: Waits) -> Waits {
        Waits { ns: self.ns.saturating_sub(earlier.ns), times: self.times.saturating_sub(earlier.times) }
    }
}

/// One reading of everything, taken at one moment.
#[derive(Clone, Debug)]
struct Reading {
    at: Instant,
    cpu: CpuTimes,
    cpus: usize,
    /// CPU time of each of the run's processes, clock ticks.
    ticks: HashMap<u32, u64>,
    /// Run-queue delay of each live thread of the run's processes.
    waits: HashMap<u32, Waits>,
}

/// Which processes are the run's own.
#[derive(Clone, Debug)]
enum Watched {
    /// These, all alive for the whole run: a reading after one has ended is dropped.
    Pids(Vec<u32>),
    /// This process and all its descendants at each reading: processes come and go.
    Tree(u32),
}

/// The parent of each process in /proc.
fn parents() -> HashMap<u32, u32> {
    let mut parents = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        // A process may end between the listing and the read.
        if let Some(ppid) = std::fs::read_to_string(entry.path().join("stat")).ok().as_deref().and_then(parse_ppid) {
            parents.insert(pid, ppid);
        }
    }
    parents
}

/// The parent pid (field 4) from /proc/PID/stat, counted after the command name's last `)`.
pub fn parse_ppid(text: &str) -> Option<u32> {
    text[text.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// `root` and every process below it in `parents`.
fn tree(root: u32, parents: &HashMap<u32, u32>) -> Vec<u32> {
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|&(_, &pp)| pp == p).map(|(&c, _)| c));
        i += 1;
    }
    found
}

fn read(watched: &Watched) -> Option<Reading> {
    let at = Instant::now();
    let (cpu, cpus) = parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let (pids, all_needed) = match watched {
        Watched::Pids(p) => (p.clone(), true),
        Watched::Tree(root) => (tree(*root, &parents()), false),
    };
    let mut ticks = HashMap::new();
    let mut waits = HashMap::new();
    for pid in pids {
        let Some(t) =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(parse_pid_cpu_ticks)
        else {
            // A process that has gone makes a fixed set's reading incomplete: the caller keeps the
            // last whole one. A tree's process that has gone keeps its last figure.
            if all_needed {
                return None;
            }
            continue;
        };
        ticks.insert(pid, t);
        for entry in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            // A thread may end between the listing and the read; it keeps its last figure.
            if let Some(w) =
                std::fs::read_to_string(entry.path().join("schedstat")).ok().as_deref().and_then(parse_schedstat)
            {
                waits.insert(tid, w);
            }
        }
    }
    Some(Reading { at, cpu, cpus, ticks, waits })
}

/// Samples the host and the run's processes over a run; `figures` sums up first to last sample.
pub struct Sampler {
    watched: Watched,
    first: Option<Reading>,
    last: Option<Reading>,
    /// Each thread's run-queue delay when first seen (0 for threads born after the first sample,
    /// whose whole wait falls in the run) and when last seen.
    threads: HashMap<u32, (Waits, Waits)>,
    /// Each process's CPU time when first seen (0 for one born after the first sample) and when
    /// last seen.
    procs: HashMap<u32, (u64, u64)>,
}

impl Sampler {
    /// Watches these processes (the demo's) and the host; takes the first sample now.
    pub fn start(pids: Vec<u32>) -> Sampler {
        Sampler::watching(Watched::Pids(pids))
    }

    /// Watches `root`, every process it starts (and they start) during the run, and the host;
    /// takes the first sample now. A process that ends between two samples loses what it used
    /// since the last one, so a caller samples often ([`Watch`]).
    pub fn tree(root: u32) -> Sampler {
        Sampler::watching(Watched::Tree(root))
    }

    fn watching(watched: Watched) -> Sampler {
        let mut s = Sampler { watched, first: None, last: None, threads: HashMap::new(), procs: HashMap::new() };
        s.sample();
        s
    }

    /// Takes a sample; for a fixed set of processes, one taken after one of them has ended is
    /// dropped, so the figures cover a span in which all of them ran.
    pub fn sample(&mut self) {
        if let Some(r) = read(&self.watched) {
            self.record(r);
        }
    }

    fn record(&mut self, r: Reading) {
        let born_later = self.first.is_some();
        for (&tid, &w) in &r.waits {
            self.threads.entry(tid).or_insert((if born_later { Waits::default() } else { w }, w)).1 = w;
        }
        for (&pid, &t) in &r.ticks {
            self.procs.entry(pid).or_insert((if born_later { 0 } else { t }, t)).1 = t;
        }
        if self.first.is_none() {
            self.first = Some(r.clone());
        }
        self.last = Some(r);
    }

    /// The figures from the first to the last sample; None before two samples a moment apart.
    pub fn figures(&self) -> Option<HostLoad> {
        let (a, b) = (self.first.as_ref()?, self.last.as_ref()?);
        let wall = b.at.duration_since(a.at).as_secs_f64();
        let total = b.cpu.total.checked_sub(a.cpu.total).filter(|&t| t > 0)? as f64;
        if wall <= 0.0 {
            return None;
        }
        let pct = |ticks: u64| ticks as f64 * 100.0 / total;
        let busy_pct = pct(b.cpu.busy.saturating_sub(a.cpu.busy));
        let demo_ticks = self.procs.values().map(|&(from, to)| to.saturating_sub(from)).sum();
        let demo_pct = pct(demo_ticks).min(busy_pct);
        let waits = self.threads.values().map(|&(from, to)| to.since(from));
        let (wait_ns, times) = waits.fold((0, 0), |(ns, n), w| (ns + w.ns, n + w.times));
        Some(HostLoad {
            wall_s: wall,
            cpus: b.cpus,
            busy_pct,
            demo_pct,
            steal_pct: pct(b.cpu.steal.saturating_sub(a.cpu.steal)),
            load: std::fs::read_to_string("/proc/loadavg").ok().as_deref().and_then(parse_loadavg),
            wait_ms_per_s: wait_ns as f64 / 1e6 / wall,
            wait_us_each: if times == 0 { 0.0 } else { wait_ns as f64 / 1e3 / times as f64 },
        })
    }
}

/// A [`Sampler`] of a process tree sampled every 100 ms on a thread of its own, for a caller that
/// blocks while the run goes on (a test waiting for its clients).
pub struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Sampler>,
}

impl Watch {
    /// Watches this process's tree from now.
    pub fn this_process() -> Watch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let mut sampler = Sampler::tree(std::process::id());
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                sampler.sample();
            }
            sampler
        });
        Watch { stop, thread }
    }

    /// The figures from the start to now.
    pub fn finish(self) -> Option<HostLoad> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut sampler = self.thread.join().ok()?;
        sampler.sample();
        sampler.figures()
    }
}

/// What the machine's CPUs did during the run. Percentages are of all CPUs together.
#[derive(Clone, Debug, PartialEq)]
pub struct HostLoad {
    pub wall_s: f64,
    pub cpus: usize,
    /// Busy time of all CPUs, anyone's.
    pub busy_pct: f64,
    /// The part of it the demo's processes (daemon, tenants, the demo itself) used.
    pub demo_pct: f64,
    pub steal_pct: f64,
    /// The 1-minute load average at the end (it lags a short run; shown, not judged).
    pub load: Option<f64>,
    /// Time the demo's threads spent runnable but waiting for a CPU, summed over threads, per second.
    pub wait_ms_per_s: f64,
    /// The same per time a thread was put on a CPU: the mean wait for one.
    pub wait_us_each: f64,
}

impl HostLoad {
    /// CPU used by processes other than the demo's.
    pub fn others_pct(&self) -> f64 {
        (self.busy_pct - self.demo_pct).max(0.0)
    }

    /// Whether the CPUs were taken from the demo: by the hypervisor, or by other work while the
    /// demo's threads queued for a CPU. The demo's own threads contending with each other do not
    /// make the host busy: that load is the pool's.
    pub fn busy(&self) -> bool {
        self.steal_pct >= BUSY_STEAL_PCT
            || (self.others_pct() >= BUSY_OTHERS_PCT && self.wait_us_each >= BUSY_WAIT_US_EACH)
    }

    /// The figures a verdict quotes: `steal X%, load Y, run-queue delay Z ms per s (W us a wait)`; the
    /// delay is the demo's threads' time runnable but waiting for a CPU, summed over threads.
    pub fn brief(&self) -> String {
        format!(
            "steal {:.1}%, load {}, run-queue delay {:.0} ms per s ({:.0} us a wait)",
            self.steal_pct,
            self.load.map_or("?".into(), |l| format!("{l:.2}")),
            self.wait_ms_per_s,
            self.wait_us_each
        )
    }
}

impl fmt::Display for HostLoad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} CPUs over {:.1} s: busy {:.0}% (the demo {:.0}%, other work {:.0}%), {}: {}",
            self.cpus,
            self.wall_s,
            self.busy_pct,
            self.demo_pct,
            self.others_pct(),
            self.brief(),
            if self.busy() {
                "busy (its CPUs were taken from the demo)"
            } else {
                "not busy (the demo had the CPUs it needed)"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const STAT: &str = "cpu  31434 0 8026 24205 470 0 103 80 0 0
cpu0 13825 0 2665 15481 125 0 12 39 0 0
cpu1 17608 0 5361 8724 345 0 90 41 0 0
intr 1234 0 0
ctxt 99
btime 1700000000
processes 13000
procs_running 3
";

    #[test]
    fn proc_stat_gives_busy_steal_and_total_of_all_cpus() {
        let (t, cpus) = parse_proc_stat(STAT).unwrap();
        assert_eq!(cpus, 2);
        assert_eq!(t.busy, 31434 + 8026 + 103);
        assert_eq!(t.steal, 80);
        assert_eq!(t.total, 31434 + 8026 + 24205 + 470 + 103 + 80);
        // An old kernel's four columns; garbage is refused, not read as zeros.
        assert_eq!(parse_proc_stat("cpu 1 2 3 4\n").unwrap().0, CpuTimes { busy: 6, steal: 0, total: 10 });
        assert_eq!(parse_proc_stat("cpu 1 x 3 4\n"), None);
        assert_eq!(parse_proc_stat("intr 5\n"), None);
    }

    #[test]
    fn loadavg_schedstat_and_pid_stat_parse() {
        assert_eq!(parse_loadavg("1.84 1.19 0.51 1/88 12984\n"), Some(1.84));
        assert_eq!(parse_loadavg(""), None);
        assert_eq!(parse_schedstat("195943132 92052 8\n"), Some(Waits { ns: 92052, times: 8 }));
        assert_eq!(parse_schedstat("195943132 92052\n"), None);
        // A name with a space and a parenthesis; utime 7, stime 5.
        let stat = "13006 (a b) c) R 13001 13001 5177 0 -1 4194304 100 0 0 0 7 5 0 0 20 0 1 0 32664";
        assert_eq!(parse_pid_cpu_ticks(stat), Some(12));
        assert_eq!(parse_pid_cpu_ticks("13006 (cat) R 1 2"), None);
    }

    #[test]
    fn a_tree_is_the_root_and_everything_below_it() {
        assert_eq!(parse_ppid("13006 (a b) c) S 4242 13001 5177"), Some(4242));
        assert_eq!(parse_ppid("13006 (cat)"), None);
        let parents: HashMap<u32, u32> = [(2, 1), (3, 2), (4, 3), (5, 1), (6, 9), (9, 7)].into_iter().collect();
        let mut t = tree(2, &parents);
        t.sort();
        assert_eq!(t, vec![2, 3, 4]);
        assert_eq!(tree(8, &parents), vec![8]);
    }

    #[test]
    fn a_watch_counts_the_cpu_of_a_child_born_and_ended_during_the_run() {
        let w = Watch::this_process();
        // A grandchild that spins half a second of CPU, then is killed.
        let st =
            std::process::Command::new("timeout").args(["0.5", "sh", "-c", "while :; do :; done"]).status().unwrap();
        assert_eq!(st.code(), Some(124), "timeout ends the loop");
        let f = w.finish().unwrap();
        // Half a CPU-second of the run's CPU time, less what the child used after the last sample.
        let ours = f.demo_pct / 100.0 * f.wall_s * f.cpus as f64;
        assert!(ours >= 0.2, "the child's CPU time was not counted: {f:?}");
        assert!(f.wall_s >= 0.5, "{f:?}");
    }

    fn reading(at: Instant, busy: u64, steal: u64, total: u64, demo: u64, waits: &[(u32, u64, u64)]) -> Reading {
        Reading {
            at,
            cpu: CpuTimes { busy, steal, total },
            cpus: 2,
            ticks: [(1, demo)].into_iter().collect(),
            waits: waits.iter().map(|&(tid, ns, times)| (tid, Waits { ns, times })).collect(),
        }
    }

    #[test]
    fn figures_count_each_threads_wait_from_first_sight_and_others_as_busy_minus_the_demo() {
        let t0 = Instant::now();
        let mut s = Sampler {
            watched: Watched::Pids(vec![]),
            first: None,
            last: None,
            threads: HashMap::new(),
            procs: HashMap::new(),
        };
        s.record(reading(t0, 1000, 10, 10_000, 100, &[(1, 5_000_000, 50), (2, 1_000_000, 10)]));
        assert_eq!(s.figures(), None, "one sample is no span");
        // Thread 3 is born, thread 2 ends after this sample.
        let t1 = t0 + Duration::from_secs(1);
        s.record(reading(t1, 1150, 10, 10_200, 150, &[(1, 6_000_000, 60), (2, 3_000_000, 30), (3, 4_000_000, 40)]));
        let t2 = t0 + Duration::from_secs(2);
        s.record(reading(t2, 1300, 30, 10_400, 200, &[(1, 25_000_000, 110), (3, 10_000_000, 90)]));
        let f = s.figures().unwrap();
        // Shares of all CPU time in the span (400 ticks): busy 300, the demo 100, steal 20.
        assert!((f.busy_pct - 75.0).abs() < 1e-9, "{f:?}");
        assert!((f.demo_pct - 25.0).abs() < 1e-9, "{f:?}");
        assert!((f.others_pct() - 50.0).abs() < 1e-9, "{f:?}");
        assert!((f.steal_pct - 5.0).abs() < 1e-9, "{f:?}");
        // 20 ms in 60 waits (thread 1) + 2 ms in 20 (thread 2, until it ended) + 10 ms in 90 (thread 3,
        // all of it): 32 ms over 2 s, in 170 waits.
        assert!((f.wait_ms_per_s - 16.0).abs() < 1e-9, "{f:?}");
        assert!((f.wait_us_each - 32_000.0 / 170.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.cpus, 2);
    }

    fn load(steal: f64, busy: f64, demo: f64, wait_us_each: f64) -> HostLoad {
        HostLoad {
            wall_s: 10.0,
            cpus: 2,
            busy_pct: busy,
            demo_pct: demo,
            steal_pct: steal,
            load: Some(3.5),
            wait_ms_per_s: 1000.0,
            wait_us_each,
        }
    }

    #[test]
    fn busy_means_cpu_taken_from_the_demo_not_the_demo_crowding_itself() {
        assert!(load(6.0, 50.0, 50.0, 5.0).busy(), "steal alone");
        assert!(load(0.0, 100.0, 40.0, 200.0).busy(), "other work while the demo queued");
        assert!(!load(0.0, 100.0, 95.0, 200.0).busy(), "the demo's own threads queueing");
        assert!(!load(0.0, 60.0, 30.0, 8.0).busy(), "other work on CPUs the demo did not need");
        assert!(!load(1.0, 40.0, 40.0, 8.0).busy(), "an idle host");
        let l = load(0.44, 100.0, 40.0, 234.4);
        assert_eq!(l.brief(), "steal 0.4%, load 3.50, run-queue delay 1000 ms per s (234 us a wait)");
        assert!(l.to_string().ends_with(": busy (its CPUs were taken from the demo)"), "{l}");
        assert!(l.to_string().contains("other work 60%"), "{l}");
        assert!(load(1.0, 40.0, 40.0, 8.0).to_string().contains(": not busy"));
    }
}
