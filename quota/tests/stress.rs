//! Concurrency: many threads reserving against one tenant never overshoot, and refusals are never spurious.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use gpupool_quota::{ClientRequest, Config, Ledger, MIB, Session, TenantId};

/// xorshift64*: deterministic per thread, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const QUOTA: u64 = 256 * MIB;
const DEVICES: u32 = 2;

fn config(quota_mib: u64) -> Config {
    Config::from_toml_str(&format!("[[tenant]]\nname = \"a\"\nuids = [1]\nmemory = \"{quota_mib}MiB\"\n")).unwrap()
}

struct Counters {
    /// Bytes that threads hold, counted after a reservation succeeds and before its release: always
    /// <= what the ledger counts, so it must never pass the quota.
    outstanding: [AtomicU64; DEVICES as usize],
    granted: AtomicU64,
    refused: AtomicU64,
}

/// One worker: random sizes (byte-granular), random devices, commit / cancel / release at random.
fn worker(ledger: &Ledger, session: &Session, c: &Counters, seed: u64, until: Instant, max_quota: u64) {
    let mut rng = Rng(seed | 1);
    let mut held: Vec<(u32, u64)> = Vec::new();
    while Instant::now() < until {
        let device = rng.below(DEVICES as u64) as u32;
        let bytes = 1 + rng.below(48 * MIB);
        match ledger.reserve(session, device, bytes) {
            Ok(r) => {
                let now = c.outstanding[device as usize].fetch_add(bytes, SeqCst) + bytes;
                assert!(now <= max_quota, "overshoot: {now} > {max_quota} on device {device}");
                c.granted.fetch_add(1, SeqCst);
                std::thread::yield_now(); // the backend allocating
                if rng.below(10) == 0 {
                    c.outstanding[device as usize].fetch_sub(bytes, SeqCst);
                    r.cancel();
                } else {
                    r.commit();
                    held.push((device, bytes));
                }
            }
            Err(e) => {
                // A refusal must be justified by what was in use at that moment.
                assert!(e.in_use + bytes > e.limit, "spurious refusal: {e}");
                assert_eq!((e.device, e.requested), (device, bytes));
                c.refused.fetch_add(1, SeqCst);
            }
        }
        if !held.is_empty() && rng.below(3) == 0 {
            let (d, b) = held.swap_remove(rng.below(held.len() as u64) as usize);
            c.outstanding[d as usize].fetch_sub(b, SeqCst);
            ledger.release(session, d, b).unwrap();
        }
    }
    for (d, b) in held {
        c.outstanding[d as usize].fetch_sub(b, SeqCst);
        ledger.release(session, d, b).unwrap();
    }
}

fn counters() -> Counters {
    Counters { outstanding: Default::default(), granted: AtomicU64::new(0), refused: AtomicU64::new(0) }
}

/// 16 threads: 8 with a session each, 8 sharing 4 sessions; a monitor checks the ledger's own sum.
#[test]
fn sixteen_threads_never_overshoot() {
    let ledger = Ledger::new(config(QUOTA / MIB));
    let tenant = TenantId::new("a");
    let sessions: Vec<Session> =
        (0..12).map(|_| ledger.open_session(&tenant, &ClientRequest::default()).unwrap()).collect();
    let c = counters();
    let stop = AtomicBool::new(false);
    let until = Instant::now() + Duration::from_millis(700);
    std::thread::scope(|s| {
        let monitor = s.spawn(|| {
            let mut checks = 0u64;
            while !stop.load(SeqCst) {
                for d in 0..DEVICES {
                    let used = ledger.used(&tenant, d);
                    assert!(used <= QUOTA, "ledger sum {used} > quota on device {d}");
                }
                checks += 1;
            }
            checks
        });
        let workers: Vec<_> = (0..16)
            .map(|t| {
                let session = if t < 8 { &sessions[t] } else { &sessions[8 + (t - 8) / 2] };
                let c = &c;
                let ledger = &ledger;
                s.spawn(move || worker(ledger, session, c, 0x9e37_79b9_7f4a_7c15 ^ (t as u64 * 7919), until, QUOTA))
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, SeqCst);
        assert!(monitor.join().unwrap() > 0);
    });
    let (granted, refused) = (c.granted.load(SeqCst), c.refused.load(SeqCst));
    assert!(granted > 1000 && refused > 100, "contention not exercised: {granted} granted, {refused} refused");
    for d in 0..DEVICES {
        assert_eq!(ledger.used(&tenant, d), 0, "everything released on device {d}");
        assert_eq!(c.outstanding[d as usize].load(SeqCst), 0);
    }
    for s in sessions {
        assert!(ledger.release_session(s).is_empty());
    }
    // With nothing in flight, a request of exactly the quota fits.
    let s = ledger.open_session(&tenant, &ClientRequest::default()).unwrap();
    for d in 0..DEVICES {
        ledger.reserve(&s, d, QUOTA).unwrap().commit();
    }
    eprintln!("granted {granted}, refused {refused}");
}

/// Single-threaded against a model: a request is refused exactly when use + request > quota, for the
/// tenant and for a session with its own request, across many random steps.
#[test]
fn refusal_iff_over_quota_model() {
    let ledger = Ledger::new(config(64));
    let tenant = TenantId::new("a");
    let capped = ledger.open_session(&tenant, &ClientRequest::default().with_memory("16MiB").unwrap()).unwrap();
    let free = ledger.open_session(&tenant, &ClientRequest::default()).unwrap();
    let sessions = [(&capped, Some(16 * MIB)), (&free, None)];
    let mut rng = Rng(42);
    let mut tenant_use = [0u64; DEVICES as usize];
    let mut own: [[u64; DEVICES as usize]; 2] = [[0; 2]; 2];
    let mut held: Vec<(usize, u32, u64)> = Vec::new();
    for _ in 0..20_000 {
        let i = rng.below(2) as usize;
        let (session, cap) = sessions[i];
        let d = rng.below(DEVICES as u64) as u32;
        let b = rng.below(20 * MIB);
        let fits = tenant_use[d as usize] + b <= 64 * MIB && cap.is_none_or(|c| own[i][d as usize] + b <= c);
        match ledger.reserve(session, d, b) {
            Ok(r) => {
                assert!(fits, "granted over quota");
                r.commit();
                tenant_use[d as usize] += b;
                own[i][d as usize] += b;
                held.push((i, d, b));
            }
            Err(_) => assert!(!fits, "a request that fits was refused (nothing else in flight)"),
        }
        if !held.is_empty() && rng.below(2) == 0 {
            let (i, d, b) = held.swap_remove(rng.below(held.len() as u64) as usize);
            ledger.release(sessions[i].0, d, b).unwrap();
            tenant_use[d as usize] -= b;
            own[i][d as usize] -= b;
        }
        assert_eq!(ledger.used(&tenant, d), tenant_use[d as usize]);
    }
}

/// Reservations racing hot reloads that flip the quota between 128 and 256 MiB: never above the larger,
/// no deadlock, and after the last reload the smaller holds for new reservations.
#[test]
fn reservations_racing_reloads() {
    let ledger = Ledger::new(config(256));
    let tenant = TenantId::new("a");
    let sessions: Vec<Session> =
        (0..8).map(|_| ledger.open_session(&tenant, &ClientRequest::default()).unwrap()).collect();
    let c = counters();
    let until = Instant::now() + Duration::from_millis(400);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut flip = false;
            while Instant::now() < until {
                ledger.apply(config(if flip { 256 } else { 128 }));
                flip = !flip;
                std::thread::sleep(Duration::from_micros(200));
            }
            ledger.apply(config(128));
        });
        for (t, session) in sessions.iter().enumerate() {
            let (c, ledger) = (&c, &ledger);
            s.spawn(move || worker(ledger, session, c, 1 + t as u64 * 104_729, until, 256 * MIB));
        }
    });
    let s = &sessions[0];
    ledger.reserve(s, 0, 128 * MIB).unwrap().commit();
    assert!(ledger.reserve(s, 0, 1).is_err());
    assert_eq!(ledger.release_session(sessions.into_iter().next().unwrap()), [(0, 128 * MIB)].into());
    assert_eq!(ledger.used(&tenant, 0), 0);
}
