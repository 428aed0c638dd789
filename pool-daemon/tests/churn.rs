//! Client churn: clients under `gpupool run` SIGKILLed at random moments (starting up,
//! mid-copy, mid-launch) leave nothing behind in the daemon: no session, no byte in the
//! ledger, no fd, thread or shared-memory mapping, and its own memory back near a fresh
//! daemon's (pool-daemon/README.md, "Memory after churn"). `gpupool-bench chaos` runs the
//! same churn at scale and prints the figures.

mod common;

use common::*;
use gpupool_e2e::churn::{self, ClientSpec, ProcSample, Rng};
use std::time::Duration;

const CLIENTS: usize = 32;
const ROUNDS: usize = 4;
/// Each client's largest allocation and copy; it keeps up to four allocations live.
const MAX_BYTES: u64 = 2 * MIB;
/// How much more RSS than a fresh daemon's may remain after all the churn. A fresh debug daemon
/// is about 16 MiB (15 of them its code); after the churn it is within a few MiB of that (the
/// malloc arenas it keeps, capped at one per core, trimmed after every session). A leak that
/// grows per client blows through it: one 1 MiB allocation's backing store left behind per
/// client is 128 MiB, one staging area's pages per client more.
const RSS_SLACK_KIB: u64 = 32 << 10;

#[test]
fn clients_killed_at_random_leave_nothing_behind() {
    ensure_interposer();
    let d = Daemon::start(None);
    let bin = d.dir.join("bin");
    let spec = ClientSpec {
        gpupool: env!("CARGO_BIN_EXE_gpupool").into(),
        endpoint: d.endpoint(),
        program: gpupool_e2e::compile_c("churn_client", &bin),
        max_bytes: MAX_BYTES,
    };
    let pid = d.child.id();
    let fresh = ProcSample::read(pid).unwrap();
    let mut rng = Rng::new(16);
    for r in 1..=ROUNDS {
        let done = churn::round(&spec, CLIENTS, Duration::from_millis(800), &mut rng, || {}).unwrap_or_else(|e| {
            panic!("round {r}: {e}\n{}", d.log());
        });
        let (held, proc, settled) = churn::settle(&d.socket, pid, Duration::from_secs(30), |h, p| {
            h.sessions == 0
                && h.device_bytes == 0
                && h.pinned_bytes == 0
                && p.fds <= fresh.fds
                && p.threads <= fresh.threads
                && p.shm_maps == 0
        })
        .unwrap();
        eprintln!(
            "round {r}: {} killed ({} before finishing a round, {} rounds of work done); then {held:?}, {proc:?}",
            done.killed, done.before_ready, done.rounds_done
        );
        assert!(settled, "round {r}: still held {held:?}, {proc:?} (fresh: {fresh:?})\n{}", d.log());
        assert_eq!(proc.shmem_kib, 0, "shared memory still resident");
    }
    let after = ProcSample::read(pid).unwrap();
    eprintln!("daemon RSS: fresh {} KiB, after {} KiB (peak {} KiB)", fresh.rss_kib, after.rss_kib, after.hwm_kib);
    assert!(
        after.rss_kib <= fresh.rss_kib + RSS_SLACK_KIB,
        "RSS after churn {} KiB, fresh {} KiB: {after:?}",
        after.rss_kib,
        fresh.rss_kib
    );
    let log = d.log();
    let ends: Vec<&str> = log.lines().filter(|l| l.contains("session end")).collect();
    assert_eq!(ends.len(), log.lines().filter(|l| l.contains("session start")).count(), "{log}");
    assert!(ends.iter().all(|l| l.contains("trim_us=")), "{log}");
}
