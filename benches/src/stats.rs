//! Sampling and summary statistics: medians and p99 over repeated samples.

use std::time::Instant;

/// Summary of one measured quantity (all samples in the same unit).
#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub p99: f64,
    pub samples: usize,
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine, so a parent
/// and its client processes can agree on a moment (`Instant` cannot cross a process).
pub fn monotonic_ns() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty());
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn summarize(mut v: Vec<f64>) -> Summary {
    v.sort_by(|a, b| a.partial_cmp(b).expect("NaN sample"));
    Summary { median: percentile(&v, 50.0), p99: percentile(&v, 99.0), samples: v.len() }
}

/// Nanoseconds per operation: `samples` samples, each timing `batch` calls of `op` and
/// dividing by `batch` (batching keeps the clock's own cost out of very short calls).
/// `warmup` samples are run first and discarded.
pub fn ns_per_op(samples: usize, batch: usize, warmup: usize, mut op: impl FnMut()) -> Summary {
    let mut v = Vec::with_capacity(samples);
    for i in 0..warmup + samples {
        let t = Instant::now();
        for _ in 0..batch {
            op();
        }
        let ns = t.elapsed().as_nanos() as f64 / batch as f64;
        if i >= warmup {
            v.push(ns);
        }
    }
    summarize(v)
}

/// Bandwidth in GB/s (10^9 bytes/s) of `a` and of `b`, each moving `bytes` per call, sampled alternately (a, b, a, b, ...) so that both see the
/// same machine conditions; returns (a, b).
pub fn gb_per_s_paired(
    samples: usize,
    warmup: usize,
    bytes: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Summary, Summary) {
    let (mut va, mut vb) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
    for i in 0..warmup + samples {
        for (op, v) in [(&mut a as &mut dyn FnMut(), &mut va), (&mut b as &mut dyn FnMut(), &mut vb)] {
            let t = Instant::now();
            op();
            let s = t.elapsed().as_secs_f64();
            if i >= warmup {
                v.push(bytes as f64 / s / 1e9);
            }
        }
    }
    (summarize(va), summarize(vb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let s = summarize((1..=100).map(f64::from).rev().collect());
        assert_eq!(s.median, 50.0);
        assert_eq!(s.p99, 99.0);
        let s = summarize(vec![3.0]);
        assert_eq!((s.median, s.p99), (3.0, 3.0));
        let s = summarize(vec![1.0, 2.0, 3.0]);
        assert_eq!((s.median, s.p99), (2.0, 3.0));
    }
}
