//! What bounds the daemon's own heap under client churn. glibc's malloc gives threads that
//! contend for the heap arenas of their own (up to 8 per core by default) and keeps memory
//! freed into an arena for reuse instead of returning it to the kernel. Every session is a
//! thread, and so is every stream worker of the simulator, so after many sessions the
//! daemon holds the high-water mark of each arena it ever made: its RSS grows with the
//! number of clients seen and the host's core count, not with the sessions alive. Two
//! bounds (pool-daemon/README.md, "Memory after churn"):
//!
//! - [`cap_arenas`] at start: at most one arena per core (the threads that can allocate at
//!   the same moment), unless the operator chose a cap with `MALLOC_ARENA_MAX` or
//!   `GLIBC_TUNABLES=glibc.malloc.arena_max=N`;
//! - [`trim`] after a session has freed everything it owned: the free memory of every arena
//!   goes back to the kernel (`malloc_trim(0)` also releases whole free pages inside an
//!   arena, not only its top), so what a session used leaves with it.
//!
//! On a C library other than glibc both do nothing.

use std::time::{Duration, Instant};

/// The arena cap for a host with `cpus` usable cores: one each, at least two.
pub fn arena_cap(cpus: usize) -> usize {
    cpus.max(2)
}

/// Whether the environment already sets glibc's arena cap (the operator's choice wins).
fn cap_from_environment() -> bool {
    std::env::var_os("MALLOC_ARENA_MAX").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.arena_max"))
}

/// Caps glibc's malloc arenas at [`arena_cap`] of the usable cores; call before any thread
/// starts. Returns the cap set, or `None` when the environment had one or this is not glibc.
pub fn cap_arenas() -> Option<usize> {
    if cap_from_environment() {
        return None;
    }
    let cap = arena_cap(std::thread::available_parallelism().map_or(2, |n| n.get()));
    set_arena_max(cap).then_some(cap)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_arena_max(cap: usize) -> bool {
    let cap = i32::try_from(cap).unwrap_or(i32::MAX);
    // SAFETY: mallopt takes two integers and only changes a malloc parameter; glibc
    // documents M_ARENA_MAX as settable at any time (it bounds arenas created later).
    unsafe { libc::mallopt(libc::M_ARENA_MAX, cap) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_arena_max(_cap: usize) -> bool {
    false
}

/// Gives the free memory of every malloc arena back to the kernel; returns how long it
/// took (it locks each arena in turn while it walks that arena's free chunks).
pub fn trim() -> Duration {
    let t0 = Instant::now();
    release_free_memory();
    t0.elapsed()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim takes a byte count to keep at the top of the main heap and
    // touches only memory malloc owns and has marked free.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_one_arena_per_core_and_never_below_two() {
        assert_eq!(arena_cap(1), 2);
        assert_eq!(arena_cap(2), 2);
        assert_eq!(arena_cap(16), 16);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn trim_gives_freed_heap_memory_back() {
        fn rss_anon_kib() -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        }
        // 128 MiB in chunks below the mmap threshold, so they come from an arena; every
        // other one freed, so the free memory sits inside the arena, not only at its top.
        let mut chunks: Vec<Vec<u8>> = (0..4096).map(|_| vec![1u8; 32 << 10]).collect();
        let mut kept = Vec::new();
        for (i, c) in chunks.drain(..).enumerate() {
            if i % 2 == 0 {
                kept.push(c);
            }
        }
        let before = rss_anon_kib();
        trim();
        let after = rss_anon_kib();
        assert!(kept.iter().all(|c| c[0] == 1));
        // The 64 MiB freed in the middle of the heap are given back. RssAnon is the whole
        // process's, and this binary's other tests allocate meanwhile: a CI run saw 8 MiB of
        // theirs inside the window (32 MiB freed, 23.8 MiB seen given back), so 16 MiB of slack.
        assert!(before.saturating_sub(after) >= 48 << 10, "RssAnon {before} KiB before the trim, {after} KiB after");
    }
}
