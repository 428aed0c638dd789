//! The stateful driver-API fuzzer, a fixed-seed run (`gpupool_e2e::fuzz`): rounds of concurrent
//! tenants (one token-matched tenant each), every one running a random, valid-looking sequence of
//! driver calls (allocations, frees in any order, async memsets and copies on several streams,
//! events, kernel launches, captures forked to a second stream and joined back (or not, or ended
//! on the wrong stream, or with the legacy stream touched in between) and their graphs launched, module load and unload, context create and destroy, objects ended
//! with work queued, faulting kernels, exits) under `gpupool run`, some SIGKILLed part-way.
//! After every round: each tenant's results equal the same sequence run directly on the
//! simulator, every canary is intact (each tenant's own, and a watcher tenant's that lives through
//! the whole run), the daemon is alive, and its ledger holds exactly what is live (the watcher's
//! canary, nothing else). One deliberate exception keeps the comparison exact: a faulting kernel
//! ends its sequence, since through the pool a tenant's client contexts share one backend context
//! and the sticky error reaches them all (see `gpupool_e2e::fuzz::ops::fault`).

use std::path::PathBuf;
use std::time::Duration;

use gpupool_e2e::fuzz::harness::{Fuzz, Options, RoundReport, Setup};
use gpupool_e2e::{built, sim_libdir};

/// 3,600 sequences, about 2.5 minutes on 2 cores in a debug build: the "few minutes".
/// Longer runs: `gpupool-bench fuzz --seconds N` (benches/README.md).
const ROUNDS: u64 = 900;

#[test]
fn concurrent_tenants_match_the_simulator_and_the_pool_keeps_nothing() {
    built("libgpupool.so", "gpupool-interpose");
    let setup = Setup {
        gpupool: built("gpupool", "gpupool-daemon"),
        sim_libdir: sim_libdir().to_path_buf(),
        tenant: vec![env!("CARGO_BIN_EXE_gpupool-fuzz-tenant").to_string()],
        dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz"),
    };
    let opts = Options {
        tenants: 4,
        seed: 0x5eed_f022,
        len: 120,
        kill_percent: 30,
        kill_window: Duration::from_millis(60),
        timeout: Duration::from_secs(60),
    };
    let mut fuzz = Fuzz::start(setup, opts).unwrap_or_else(|e| panic!("starting the fuzzer: {e}"));
    let mut total = RoundReport::default();
    for _ in 0..ROUNDS {
        match fuzz.round() {
            Ok(r) => total.add(&r),
            Err(findings) => {
                let text: Vec<String> = findings.iter().map(|f| f.to_string()).collect();
                panic!("{}\n--- daemon log ---\n{}", text.join("\n"), fuzz.daemon_log());
            }
        }
    }
    eprintln!("{total:?}");
    // What the fixed seed draws, so the run covers what it claims to.
    assert_eq!(total.sequences(), (ROUNDS * 4) as usize);
    assert!(total.kills_sent > 0, "the seed draws no SIGKILL");
    assert!(total.faults > 0 && total.exits_drawn > 0, "the seed draws no faulting kernel or exit: {total:?}");
    assert!(total.pool_calls > 1000, "{total:?}");
    assert!(total.captures > 100, "the seed draws few cross-stream captures: {total:?}");
}
