//! What `tests/c/compute_load.c` (timed PTX kernels driven through the CUDA driver API) reports, and the
//! achieved share computed from it: the device time of the kernel bodies that completed in a window of
//! wall time, measured from outside the pool. The compute-quota tests and `gpupool-bench compute` read it.

/// One client's report.
#[derive(Debug, Default, Clone)]
pub struct LoadReport {
    /// CLOCK_MONOTONIC ns of the client's t = 0.
    pub start: u64,
    /// (absolute CLOCK_MONOTONIC ns, kernels completed, kernel-body ns) so far.
    pub samples: Vec<(u64, u64, u64)>,
    /// `--sync` only: per-kernel latency percentiles in microseconds.
    pub latency_p50_us: Option<f64>,
    pub latency_p99_us: Option<f64>,
}

/// One second in nanoseconds.
pub const SEC: u64 = 1_000_000_000;

impl LoadReport {
    /// Parses the client's stdout.
    pub fn parse(text: &str) -> Result<LoadReport, String> {
        let mut r = LoadReport::default();
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| -> Result<u64, String> {
                w.get(i).and_then(|s| s.parse().ok()).ok_or_else(|| format!("bad line {line:?}"))
            };
            let float = |i: usize| -> Result<f64, String> {
                w.get(i).and_then(|s| s.parse().ok()).ok_or_else(|| format!("bad line {line:?}"))
            };
            match w.first().copied() {
                Some("start") => r.start = num(1)?,
                Some("sample") => r.samples.push((r.start + num(1)?, num(2)?, num(3)?)),
                Some("latency_us") => {
                    r.latency_p50_us = Some(float(2)?);
                    r.latency_p99_us = Some(float(4)?);
                }
                _ => {}
            }
        }
        if r.start == 0 || r.samples.is_empty() {
            return Err(format!("no report in {text:?}"));
        }
        Ok(r)
    }

    /// Busy share in percent over `[from, to]` (absolute ns), between the first and last samples inside
    /// it, which must cover at least three quarters of it.
    pub fn share(&self, from: u64, to: u64) -> Result<f64, String> {
        let inside: Vec<_> = self.samples.iter().filter(|s| s.0 >= from && s.0 <= to).collect();
        if inside.len() < 2 {
            return Err(format!("no samples in [{from}, {to}]: {self:?}"));
        }
        let (a, b) = (inside[0], inside[inside.len() - 1]);
        if b.0 - a.0 < (to - from) * 3 / 4 {
            return Err(format!("samples cover {} of {} ns", b.0 - a.0, to - from));
        }
        Ok((b.2 - a.2) as f64 * 100.0 / (b.0 - a.0) as f64)
    }

    /// The time of the last sample.
    pub fn end(&self) -> u64 {
        self.samples.last().map_or(self.start, |s| s.0)
    }

    /// The share between the first completion after `from` and the last completion: exact for long
    /// kernels, whose samples come one per completion.
    pub fn share_between_completions(&self, from: u64) -> Result<(f64, u64), String> {
        let first = self.samples.iter().find(|s| s.0 >= from && s.1 > 0).ok_or("no completion")?;
        let last = self.samples.last().ok_or("no samples")?;
        if last.0 <= first.0 {
            return Err("one completion only".into());
        }
        Ok(((last.2 - first.2) as f64 * 100.0 / (last.0 - first.0) as f64, last.0 - first.0))
    }
}

/// CLOCK_MONOTONIC now, in ns (the clock the clients report in).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into the local we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * SEC + ts.tv_nsec as u64
}
