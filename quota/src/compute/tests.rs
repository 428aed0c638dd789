//! The policy against a discrete-time model of a device: kernels run one at a time, in dispatch order,
//! each tenant's client keeps at most `depth` kernels outstanding, and a change of tenant on the device
//! costs `switch_ns` of idle time (the wake-up of the next tenant's stream). No threads, no clock noise:
//! these pin down the policy; the daemon's tests measure the real thing.

use super::*;

const MS: u64 = 1_000_000;
const STEP: u64 = 10_000;

struct Client {
    tenant: &'static str,
    id: u64,
    kernel_ns: u64,
    depth: u32,
    active: bool,
    outstanding: u32,
    wanting: bool,
    /// Device time of this client's kernels completed inside the measuring window.
    busy: u64,
    /// (dispatch time, completion time) of each kernel.
    done: Vec<(Nanos, Nanos)>,
}

struct Model {
    s: DeviceScheduler,
    now: Nanos,
    clients: Vec<Client>,
    /// Dispatched kernels: (client index, est, dispatched at, start, end).
    queue: Vec<(usize, u64, Nanos, Nanos, Nanos)>,
    device_end: Nanos,
    last_tenant: Option<&'static str>,
    switch_ns: u64,
}

fn policy(compute: u8, mode: Mode, priority: Priority) -> Policy {
    Policy { compute, mode, priority }
}

impl Model {
    fn new(switch_ns: u64) -> Model {
        Model {
            s: DeviceScheduler::new(Tuning::default()),
            now: 0,
            clients: Vec::new(),
            queue: Vec::new(),
            device_end: 0,
            last_tenant: None,
            switch_ns,
        }
    }

    fn tenant(&mut self, name: &'static str, p: Policy) {
        self.s.set_policy(name, p, self.now);
    }

    fn client(&mut self, tenant: &'static str, kernel_ns: u64, depth: u32) -> usize {
        let id = self.clients.len() as u64 + 1;
        self.clients.push(Client {
            tenant,
            id,
            kernel_ns,
            depth,
            active: true,
            outstanding: 0,
            wanting: false,
            busy: 0,
            done: Vec::new(),
        });
        self.clients.len() - 1
    }

    /// Runs until `until`, counting device time of kernels that complete after `from`.
    fn run(&mut self, until: Nanos, from: Nanos) {
        while self.now < until {
            let now = self.now;
            let mut i = 0;
            while i < self.queue.len() {
                let (c, est, at, start, end) = self.queue[i];
                if end <= now {
                    self.queue.remove(i);
                    let cl = &mut self.clients[c];
                    cl.outstanding -= 1;
                    self.s.complete(cl.tenant, cl.id, 0, est, end - start, now);
                    if end > from {
                        cl.busy += end - start.max(from);
                    }
                    cl.done.push((at, end));
                } else {
                    i += 1;
                }
            }
            for c in 0..self.clients.len() {
                let cl = &mut self.clients[c];
                if !cl.active || cl.outstanding >= cl.depth {
                    continue;
                }
                if !cl.wanting {
                    self.s.want(cl.tenant, now);
                    cl.wanting = true;
                }
                if let Decision::Grant { est, .. } = self.s.try_grant(cl.tenant, cl.id, 0, now) {
                    cl.wanting = false;
                    cl.outstanding += 1;
                    let mut start = now.max(self.device_end);
                    if self.last_tenant.is_some_and(|t| t != cl.tenant) {
                        start += self.switch_ns;
                    }
                    self.last_tenant = Some(cl.tenant);
                    let end = start + cl.kernel_ns;
                    self.device_end = end;
                    self.queue.push((c, est, now, start, end));
                }
            }
            self.now += STEP;
        }
    }

    fn stop(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        cl.active = false;
        if cl.wanting {
            self.s.stop_waiting(cl.tenant, self.now);
            cl.wanting = false;
        }
    }

    fn share(&self, c: usize, window: u64) -> f64 {
        self.clients[c].busy as f64 * 100.0 / window as f64
    }
}

fn assert_near(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol, "{what}: achieved {got:.3}%, configured {want}% (tolerance {tol})");
}

#[test]
fn limit_alone_holds_each_quota() {
    for q in [1u8, 7, 25, 50, 100] {
        let mut m = Model::new(50_000);
        m.tenant("a", policy(q, Mode::Limit, Priority::Normal));
        let c = m.client("a", MS, 2);
        m.run(6000 * MS, 1000 * MS);
        assert_near(&format!("limit {q}% alone"), m.share(c, 5000 * MS), q.into(), 0.5);
    }
}

#[test]
fn limit_three_tenants_each_hold_their_cap() {
    let mut m = Model::new(150_000);
    let mut cs = Vec::new();
    for (t, q) in [("a", 10u8), ("b", 30), ("c", 60)] {
        m.tenant(t, policy(q, Mode::Limit, Priority::Normal));
        cs.push((m.client(t, MS, 2), q));
    }
    let cs2 = cs.clone();
    m.run(6000 * MS, 1000 * MS);
    for &(c, q) in &cs {
        eprintln!("limit {q}% of three: {:.3}% ({} tenant switches)", m.share(c, 5000 * MS), m.s.epoch());
    }
    for (c, q) in cs2 {
        assert_near(&format!("limit {q}% of three"), m.share(c, 5000 * MS), q.into(), 1.0);
    }
}

#[test]
fn share_splits_by_weight_and_gives_idle_capacity_away() {
    let mut m = Model::new(50_000);
    m.tenant("a", policy(25, Mode::Share, Priority::Normal));
    m.tenant("b", policy(75, Mode::Share, Priority::Normal));
    let a = m.client("a", MS, 2);
    let b = m.client("b", MS, 2);
    m.run(6000 * MS, 1000 * MS);
    let (sa, sb) = (m.share(a, 5000 * MS), m.share(b, 5000 * MS));
    assert_near("share 25", sa * 100.0 / (sa + sb), 25.0, 1.0);
    assert_near("share 75", sb * 100.0 / (sa + sb), 75.0, 1.0);
    assert!(sa + sb > 98.0, "the device idles under contention: {:.2}%", sa + sb);
    // `a` stops: within a second `b` has at least 95% of the device.
    m.stop(a);
    m.clients[b].busy = 0;
    m.run(7000 * MS, 6000 * MS);
    assert!(m.share(b, 1000 * MS) >= 95.0, "b after a stopped: {:.2}%", m.share(b, 1000 * MS));
}

#[test]
fn share_tenant_back_from_idle_banks_nothing() {
    let mut m = Model::new(0);
    m.tenant("a", policy(50, Mode::Share, Priority::Normal));
    m.tenant("b", policy(50, Mode::Share, Priority::Normal));
    let a = m.client("a", MS, 2);
    m.run(3000 * MS, 0);
    let b = m.client("b", MS, 2);
    m.clients[a].busy = 0;
    m.run(4000 * MS, 3000 * MS);
    // b was idle for 3 s: it gets half, not the whole device until it "catches up".
    assert_near("b back from idle", m.share(b, 1000 * MS), 50.0, 3.0);
}

#[test]
fn long_kernels_average_to_the_quota() {
    let mut m = Model::new(50_000);
    m.tenant("a", policy(10, Mode::Limit, Priority::Normal));
    let c = m.client("a", 100 * MS, 2);
    // Measure between completions: 10 s after the first kernel's end.
    m.run(12_000 * MS, 0);
    let ends: Vec<_> = m.clients[c].done.iter().map(|d| d.1).filter(|&e| e >= 1000 * MS).collect();
    let (first, last) = (ends[0], *ends.last().unwrap());
    let share = (ends.len() - 1) as f64 * 100.0 * 100.0 * MS as f64 / (last - first) as f64;
    assert!(last - first >= 9_000 * MS, "window {} ms", (last - first) / MS);
    assert_near("100 ms kernels at 10%", share, 10.0, 1.0);
}

#[test]
fn launch_then_synchronize_loop_is_held() {
    let mut m = Model::new(0);
    m.tenant("a", policy(20, Mode::Limit, Priority::Normal));
    let c = m.client("a", MS, 1);
    m.run(6000 * MS, 1000 * MS);
    assert_near("sync loop at 20%", m.share(c, 5000 * MS), 20.0, 0.5);
}

#[test]
fn high_priority_waits_at_most_for_dispatched_work() {
    let mut m = Model::new(50_000);
    m.tenant("hi", policy(100, Mode::Limit, Priority::High));
    m.tenant("lo", policy(100, Mode::Limit, Priority::Low));
    let lo = m.client("lo", MS, 8);
    let hi = m.client("hi", MS, 1);
    m.run(3000 * MS, 0);
    let bound = m.s.tuning().inflight_ns + MS + 2 * 50_000 + 2 * STEP;
    let worst = m.clients[hi].done.iter().map(|(at, end)| end - at).max().unwrap();
    assert!(worst <= bound, "high-priority latency {worst} ns > bound {bound} ns");
    assert!(m.clients[lo].done.len() > 100, "low priority starved");
    assert!(m.clients[hi].done.len() > 500, "high priority served {} kernels", m.clients[hi].done.len());
}

#[test]
fn a_high_priority_share_tenant_does_not_starve_a_lower_one() {
    let mut m = Model::new(50_000);
    m.tenant("serve", policy(30, Mode::Share, Priority::High));
    m.tenant("train", policy(40, Mode::Limit, Priority::Normal));
    let serve = m.client("serve", MS, 2);
    let train = m.client("train", MS, 2);
    m.run(6000 * MS, 1000 * MS);
    let (s, t) = (m.share(serve, 5000 * MS), m.share(train, 5000 * MS));
    // Contending, each gets at least its weight's part (30:40); the limit tenant stops at its cap and
    // the work-conserving one takes the rest.
    assert_near("limit 40 beside a high-priority share tenant", t, 40.0, 1.0);
    assert!(s >= 55.0, "the share tenant takes what is left: {s:.2}%");
}

#[test]
fn reload_changes_the_share_within_a_second() {
    let mut m = Model::new(50_000);
    m.tenant("a", policy(50, Mode::Limit, Priority::Normal));
    let c = m.client("a", MS, 2);
    m.run(2000 * MS, 1000 * MS);
    assert_near("before reload", m.share(c, 1000 * MS), 50.0, 1.0);
    let t = m.now;
    m.tenant("a", policy(20, Mode::Limit, Priority::Normal));
    m.clients[c].busy = 0;
    // The bank is at most what was accrued beyond use; within a second the new rate rules.
    m.run(t + 1000 * MS, t);
    assert!(m.share(c, 1000 * MS) <= 25.0, "first second after reload: {:.2}%", m.share(c, 1000 * MS));
    m.clients[c].busy = 0;
    m.run(t + 3000 * MS, t + 1000 * MS);
    assert_near("after reload", m.share(c, 2000 * MS), 20.0, 1.0);
}

#[test]
fn narrowing_client_is_held_to_its_own_limit_within_the_tenant() {
    // Alone in its tenant, the narrowing client gets its own 10%, not the tenant's 60%.
    let mut m = Model::new(0);
    m.tenant("a", policy(60, Mode::Limit, Priority::Normal));
    let c2 = m.client("a", MS, 2);
    m.s.set_client_limit(m.clients[c2].id, 10, 0);
    m.run(6000 * MS, 1000 * MS);
    assert_near("narrowed client alone", m.share(c2, 5000 * MS), 10.0, 0.5);
    // With a second, saturating client of the tenant, the tenant as a whole stays at 60% and the
    // narrowing client under its 10%.
    let c1 = m.client("a", MS, 2);
    m.clients[c2].busy = 0;
    m.run(12_000 * MS, 7000 * MS);
    let (s1, s2) = (m.share(c1, 5000 * MS), m.share(c2, 5000 * MS));
    assert!(s2 <= 10.5, "narrowed client {s2:.2}%");
    assert_near("tenant total", s1 + s2, 60.0, 1.0);
}

#[test]
fn figures_cover_the_windows() {
    let mut m = Model::new(0);
    m.tenant("a", policy(30, Mode::Limit, Priority::Normal));
    m.client("a", MS, 2);
    m.run(12_000 * MS, 0);
    let u = m.s.usage(m.now);
    assert_eq!(u.len(), 1);
    assert!((u[0].share_1s - 0.30).abs() < 0.05, "{u:?}");
    assert!((u[0].share_10s - 0.30).abs() < 0.01, "{u:?}");
    assert_eq!(u[0].quota_percent, 30);
    assert!(u[0].kernels > 3000);
}

#[test]
fn unknown_tenant_waits_and_in_flight_is_bounded() {
    let mut s = DeviceScheduler::new(Tuning::default());
    assert!(matches!(s.try_grant("nobody", 1, 0, 0), Decision::Wait { .. }));
    s.set_policy("a", policy(100, Mode::Limit, Priority::Normal), 0);
    // Teach it that kind 7 takes 1 ms: then no more than 2 ms may be in flight.
    s.want("a", 0);
    let Decision::Grant { est, .. } = s.try_grant("a", 1, 7, 0) else { panic!() };
    s.complete("a", 1, 7, est, MS, 10);
    let mut granted = 0;
    for _ in 0..10 {
        s.want("a", 0);
        match s.try_grant("a", 1, 7, 20) {
            Decision::Grant { .. } => granted += 1,
            Decision::Wait { .. } => {
                s.stop_waiting("a", 20);
                break;
            }
        }
    }
    assert_eq!(granted, 2);
}

/// A batch of launches is granted as far as its kernels' estimates fit in `batch_ns`, stopping
/// before a kind never measured; it counts as one kernel in flight; its measured time is split
/// between its kernels in proportion to their estimates, each kind learning its part. A tenant
/// outranked by a higher priority gets one kernel at a time.
#[test]
fn batches_fit_their_estimates_and_count_each_kernel() {
    let mut s = DeviceScheduler::new(Tuning::default());
    s.set_policy("a", policy(100, Mode::Limit, Priority::Normal), 0);
    s.set_policy("hi", policy(100, Mode::Limit, Priority::High), 0);
    let grant = |s: &mut DeviceScheduler, kinds: &[u64], now: u64| {
        s.want("a", now);
        match s.try_grant_batch("a", 1, kinds, now) {
            Decision::Grant { est, kernels, .. } => (est, kernels),
            d => panic!("{d:?}"),
        }
    };
    let figures = |s: &DeviceScheduler, now| {
        let u = s.usage(now).into_iter().find(|u| u.tenant == "a").unwrap();
        (u.kernels, u.charged_ns, u.inflight)
    };
    let (est, kernels) = grant(&mut s, &[7; 64], 0);
    assert_eq!(kernels, 1, "nothing measured yet");
    s.complete_batch("a", 1, &[7], est, 2_000, 10);
    let (est, kernels) = grant(&mut s, &[7; 64], 20);
    assert_eq!((est, kernels), (100_000, 50), "2 us each, within 100 us");
    assert_eq!(figures(&s, 20).2, 1, "a batch is one kernel in flight");
    // 50 kernels in 50 us: 1 us each from now on.
    s.complete_batch("a", 1, &[7; 50], est, 50_000, 30);
    assert_eq!(figures(&s, 30), (51, 52_000, 0));
    let (est, kernels) = grant(&mut s, &[7; 64], 40);
    assert!(kernels == 64 && (64_000..=64_064).contains(&est), "learned 1 us each: {est} ns for {kernels}");
    s.complete_batch("a", 1, &[7; 64], est, 64_000, 50);
    // Kind 9 alone takes 3 us: pairs of 7 and 9 cost 4 us, 25 of them fit.
    let (est, _) = grant(&mut s, &[9], 60);
    s.complete_batch("a", 1, &[9], est, 3_000, 70);
    let pairs: Vec<u64> = [7, 9].repeat(32);
    let (est, kernels) = grant(&mut s, &pairs, 80);
    assert_eq!(kernels, 50, "{est}");
    // Twice the estimate: each kind's part doubles, the batch is charged exactly what it took.
    let before = figures(&s, 80);
    s.complete_batch("a", 1, &pairs[..50], est, 2 * est, 90);
    let after = figures(&s, 90);
    assert_eq!((after.0 - before.0, after.1 - before.1), (50, 2 * est));
    let (est, kernels) = grant(&mut s, &[7, 9], 100);
    assert!(kernels == 2 && (5_000..8_000).contains(&est), "both estimates grew toward 2 and 6 us: {est}");
    s.complete_batch("a", 1, &[7, 9], est, est, 110);
    assert_eq!(grant(&mut s, &[7, 7, 8, 7], 120).1, 2, "kind 8 was never measured");
    s.abandon("a", 1, 0, 121);
    // A tenant of higher priority about: one kernel at a time again.
    s.want("hi", 130);
    let Decision::Grant { est: hi_est, .. } = s.try_grant("hi", 2, 0, 130) else { panic!("high takes over at once") };
    s.complete("hi", 2, 0, hi_est, 1_000, 140);
    assert_eq!(grant(&mut s, &[7; 64], 150).1, 1, "outranked");
}

#[test]
fn inflight_above_sees_only_higher_priorities_granted_and_unfinished() {
    let mut s = DeviceScheduler::new(Tuning::default());
    s.set_policy("lo", policy(100, Mode::Limit, Priority::Low), 0);
    s.set_policy("hi", policy(100, Mode::Limit, Priority::High), 0);
    s.want("lo", 0);
    let Decision::Grant { est: lo_est, .. } = s.try_grant("lo", 1, 0, 0) else { panic!() };
    assert!(!s.inflight_above(Priority::Low), "its own kernel does not outrank it");
    s.want("hi", 1);
    let Decision::Grant { est, .. } = s.try_grant("hi", 2, 0, 1) else { panic!("high takes over at once") };
    assert!(s.inflight_above(Priority::Low) && s.inflight_above(Priority::Normal));
    assert!(!s.inflight_above(Priority::High));
    s.complete("hi", 2, 0, est, MS, 2);
    assert!(!s.inflight_above(Priority::Low), "complete: nothing keeps the low tenant stopped");
    s.complete("lo", 1, 0, lo_est, MS, 3);
}

/// Admission reads only the asking tenant's credit while nobody else waits (credit accrues when
/// read), and looks at every account once another tenant waits: with 100 idle tenants joined, two
/// `limit` tenants still hold their caps alone, together and after one stops, and the count of
/// waiting sessions stays the sum of the accounts'.
#[test]
fn lazy_credit_and_the_waiting_count_hold_quotas_among_idle_tenants() {
    let mut m = Model::new(50_000);
    let idle: Vec<&'static str> = (0..100).map(|i| &*Box::leak(format!("idle-{i}").into_boxed_str())).collect();
    for t in &idle {
        m.tenant(t, policy(10, Mode::Limit, Priority::Normal));
    }
    m.tenant("a", policy(30, Mode::Limit, Priority::Normal));
    m.tenant("b", policy(50, Mode::Limit, Priority::Normal));
    let a = m.client("a", MS, 2);
    let b = m.client("b", MS, 2);
    m.clients[b].active = false;
    m.run(3000 * MS, 1000 * MS);
    assert_near("a alone", m.share(a, 2000 * MS), 30.0, 0.5);
    m.clients[a].busy = 0;
    m.clients[b].active = true;
    m.run(6000 * MS, 4000 * MS);
    assert_near("a beside b", m.share(a, 2000 * MS), 30.0, 0.5);
    assert_near("b beside a", m.share(b, 2000 * MS), 50.0, 0.5);
    m.stop(b);
    m.clients[a].busy = 0;
    m.run(9000 * MS, 7000 * MS);
    assert_near("a after b stopped", m.share(a, 2000 * MS), 30.0, 0.5);
    let sum: u64 = m.s.accounts.values().map(|acc| u64::from(acc.waiting)).sum();
    assert_eq!(m.s.waiting_total, sum, "the waiting count drifted from the accounts'");
}
