//! Compute quotas as a time share of a device: which tenant may dispatch its next kernel now, and what
//! each tenant is charged. Pure logic over a caller-supplied clock (nanoseconds); the daemon blocks
//! session threads, records events around kernels and reports their measured time back.
//!
//! The model (documented for users in `quota/README.md`, "Compute"):
//! - **One tenant at a time per device.** The tenant allowed to dispatch is the *holder*. When another
//!   tenant takes over, the daemon makes its first kernels wait (on the device) for the previous holder's
//!   dispatched kernels, so tenants never overlap and each kernel's measured time is its own.
//! - **Charged time** is what the daemon measured around each kernel, reported at completion
//!   ([`DeviceScheduler::complete`]). A long kernel is charged when it ends; the tenant then waits off the
//!   debt, so a 100 ms kernel at 10% still averages 10%.
//! - **`limit`**: credit accrues at `compute`% of wall time, up to [`Tuning::burst_ns`]; a kernel may be
//!   dispatched while the credit is >= 0 (kernels in flight are charged when they end, so credit can go
//!   into debt by at most the in-flight bound; the tenant then waits it off).
//! - **`share`**: no credit; contending tenants are ordered by virtual time (charged time / weight), and a
//!   holder keeps the device until it leads the others by [`Tuning::slice_ns`] of virtual time. A tenant
//!   that comes back from idle starts at the others' virtual time, so idling banks nothing.
//! - **Priority**: a ready tenant of higher priority takes the device at the next kernel boundary. The
//!   work it waits for is what others already dispatched: while it is about, each client of lower
//!   priority keeps at most one kernel in flight (otherwise [`Tuning::inflight_ns`] bounds it).
//! - Clients that narrowed their own compute (`gpupool run --compute`) get a `limit` bucket of their own,
//!   checked on top of their tenant's.

use crate::{Mode, Priority};
use std::collections::{BTreeMap, HashMap};

/// Nanoseconds on the caller's monotonic clock.
pub type Nanos = u64;

/// The knobs of the scheduler. The defaults are what the daemon uses; `quota/README.md` explains them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// A `limit` tenant banks at most this much wall time's worth of its credit while idle or waiting
    /// (100 ms at 10% = 10 ms of device time): its largest burst.
    pub burst_ns: u64,
    /// Credit a `limit` tenant needs before it takes the device from a busy tenant of equal priority
    /// (at most half of what it may bank): fewer, longer turns waste less device time on switches.
    pub turn_ns: u64,
    /// How long a holder keeps the device while others of its priority wait: wall time when either side
    /// is `limit`, virtual time between `share` tenants.
    pub slice_ns: u64,
    /// A client may dispatch while less than this much estimated work of its own is unfinished (so it
    /// has at most this plus one kernel in flight): what a tenant of higher priority may have to wait
    /// for, per client of the holder.
    pub inflight_ns: u64,
    /// At most this many kernels dispatched and unfinished per device.
    pub max_inflight: u32,
    /// Launches of one kind that a client has already queued behind each other are granted as one
    /// batch while their estimate stays under this ([`DeviceScheduler::try_grant_batch`]): a batch
    /// is one kernel for the in-flight bound and for a tenant of higher priority.
    pub batch_ns: u64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            burst_ns: 100_000_000,
            turn_ns: 10_000_000,
            slice_ns: 20_000_000,
            inflight_ns: 2_000_000,
            max_inflight: 4096,
            batch_ns: 100_000,
        }
    }
}

/// A tenant's compute policy on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Percent of the device, 1..=100.
    pub compute: u8,
    /// `limit` or `share`.
    pub mode: Mode,
    /// Dispatch order at kernel boundaries.
    pub priority: Priority,
}

fn rank(p: Priority) -> u8 {
    match p {
        Priority::High => 2,
        Priority::Normal => 1,
        Priority::Low => 0,
    }
}

/// What [`DeviceScheduler::try_grant`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Dispatch now. `est` is the estimate charged against in-flight credit; pass it back to
    /// [`DeviceScheduler::complete`] or [`DeviceScheduler::abandon`]. `epoch` changes whenever the holder
    /// changes: a dispatch under a new epoch must first wait for the previous holder's kernels.
    Grant {
        /// The in-flight estimate (ns).
        est: u64,
        /// The holder's epoch.
        epoch: u64,
        /// How many of the kernels asked for are granted (1 unless asked for a batch).
        kernels: u32,
    },
    /// Not now. `until`: when the tenant's own credit allows it (nothing else to wait for); `None`: wait
    /// for a completion or another tenant's change.
    Wait {
        /// When to ask again at the latest (`None`: at the next change).
        until: Option<Nanos>,
        /// Whether the tenant's (or client's) own credit is what it waits for.
        for_credit: bool,
    },
}

/// Bucket width and count of the achieved-share history (10 s).
const BUCKET_NS: u64 = 100_000_000;
const BUCKETS: usize = 100;

/// Credit of a `limit` policy (a tenant's, or a narrowing client's).
#[derive(Debug, Clone)]
struct Credit {
    percent: u64,
    balance: i64,
    at: Nanos,
}

impl Credit {
    fn new(percent: u8, now: Nanos) -> Credit {
        Credit { percent: percent.clamp(1, 100).into(), balance: 0, at: now }
    }
    fn unlimited(&self) -> bool {
        self.percent >= 100
    }
    /// The most credit this policy may bank: `burst_ns` of wall time at its rate, so that when a device
    /// is oversubscribed every tenant loses credit in proportion to its quota, not the largest first.
    fn cap(&self, burst_ns: u64) -> u64 {
        burst_ns * self.percent / 100
    }
    fn accrue(&mut self, now: Nanos, burst_ns: u64) {
        let cap = self.cap(burst_ns);
        if now > self.at {
            let gain = ((now - self.at) as u128 * self.percent as u128 / 100) as i64;
            self.balance = self.balance.saturating_add(gain).min(cap as i64);
            self.at = now;
        }
    }
    /// Credit now. What is in flight is not subtracted: a tenant at the margin of its credit must still
    /// keep its next kernel queued behind the running one, or the device idles between them. The
    /// overdraft is bounded by the in-flight bound and repaid as debt, so the average is exact.
    fn available(&self) -> i64 {
        self.balance
    }
    /// When `available()` reaches `need`.
    fn ready_at(&self, now: Nanos, need: i64) -> Nanos {
        let missing = (need - self.available()).max(0) as u128;
        now + (missing * 100).div_ceil(self.percent as u128) as u64
    }
}

#[derive(Debug, Clone)]
struct Account {
    policy: Policy,
    credit: Credit,
    vtime: f64,
    waiting: u32,
    inflight: u32,
    inflight_est: u64,
    last_grant: Nanos,
    /// When it last had nothing waiting and nothing in flight.
    idle_since: Nanos,
    /// Measured time per kernel kind (the caller's key), smoothed.
    estimates: HashMap<u64, u64>,
    /// Smoothed over all of the tenant's kernels: the estimate for a kind not seen yet.
    typical: u64,
    charged_total: u64,
    kernels: u64,
    throttled_ns: u64,
    history: [(u64, u64); BUCKETS],
}

impl Account {
    fn new(policy: Policy, now: Nanos) -> Account {
        Account {
            policy,
            credit: Credit::new(policy.compute, now),
            vtime: 0.0,
            waiting: 0,
            inflight: 0,
            inflight_est: 0,
            last_grant: 0,
            idle_since: 0,
            estimates: HashMap::new(),
            typical: 0,
            charged_total: 0,
            kernels: 0,
            throttled_ns: 0,
            history: [(u64::MAX, 0); BUCKETS],
        }
    }
    fn limited(&self) -> bool {
        self.policy.mode == Mode::Limit && !self.credit.unlimited()
    }
    fn weight(&self) -> f64 {
        f64::from(self.policy.compute.max(1))
    }
    /// Virtual time including the work in flight.
    fn vtime_ahead(&self) -> f64 {
        self.vtime + self.inflight_est as f64 * 100.0 / self.weight()
    }
    fn active(&self) -> bool {
        self.waiting > 0 || self.inflight > 0
    }
    fn estimate(&self, kind: u64) -> u64 {
        self.estimates.get(&kind).copied().unwrap_or(self.typical)
    }
    /// Charges `ns` for a batch of kernels of `kinds` (one each, in launch order). The batch's
    /// time is split between its kernels in proportion to their estimates (evenly when none has
    /// one), and each kind's estimate learns its part.
    fn record(&mut self, kinds: &[u64], ns: u64, now: Nanos) {
        let ests: Vec<u64> = kinds.iter().map(|&k| self.estimate(k)).collect();
        let sum: u128 = ests.iter().map(|&e| u128::from(e)).sum();
        for (&kind, &e) in kinds.iter().zip(&ests) {
            // Inside the loop, so `kinds` is not empty.
            let part = (u128::from(ns) * u128::from(e)).checked_div(sum).map_or(ns / kinds.len() as u64, |p| p as u64);
            let smooth = |old: u64| if old == 0 { part } else { (old * 3 + part) / 4 };
            if self.estimates.len() < 1024 || self.estimates.contains_key(&kind) {
                let e = self.estimates.entry(kind).or_insert(0);
                *e = smooth(*e);
            }
            self.typical = smooth(self.typical);
        }
        self.charged_total += ns;
        self.kernels += kinds.len() as u64;
        let b = now / BUCKET_NS;
        let slot = &mut self.history[(b % BUCKETS as u64) as usize];
        if slot.0 != b {
            *slot = (b, 0);
        }
        slot.1 += ns;
    }
    /// Charged time over the last `window` ns, divided by the span the buckets cover.
    fn share(&self, window: u64, now: Nanos) -> f64 {
        let cur = now / BUCKET_NS;
        let n = window.div_ceil(BUCKET_NS).clamp(1, BUCKETS as u64 - 1);
        let first = cur.saturating_sub(n);
        let sum: u64 =
            self.history.iter().filter(|(b, _)| *b != u64::MAX && *b >= first && *b <= cur).map(|x| x.1).sum();
        let span = now.saturating_sub(first * BUCKET_NS).max(1);
        sum as f64 / span as f64
    }
}

/// A tenant's compute figures on one device, for `gpupool status`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ComputeUsage {
    /// Tenant name.
    pub tenant: String,
    /// Quota percent.
    pub quota_percent: u8,
    /// `limit` or `share`.
    pub mode: Mode,
    /// `high`, `normal` or `low`.
    pub priority: Priority,
    /// Charged device time over the last second, as a fraction of that second (0..=1).
    pub share_1s: f64,
    /// The same over the last 10 seconds.
    pub share_10s: f64,
    /// Kernels charged since the tenant first used the device.
    pub kernels: u64,
    /// Device time charged since then, in nanoseconds.
    pub charged_ns: u64,
    /// Kernels dispatched and not yet complete.
    pub inflight: u32,
    /// Time its clients spent waiting for credit (limit mode), summed over clients, in nanoseconds.
    pub throttled_ns: u64,
}

/// One of `a`'s waiting sessions stops waiting (granted or gone), kept in the device's count.
fn unwait(a: &mut Account, waiting_total: &mut u64) {
    if a.waiting > 0 {
        a.waiting -= 1;
        *waiting_total -= 1;
    }
}

/// The compute scheduler of one device.
#[derive(Debug)]
pub struct DeviceScheduler {
    tuning: Tuning,
    accounts: BTreeMap<String, Account>,
    /// Narrowing clients' own `limit` credit, by the caller's session id.
    clients: HashMap<u64, Credit>,
    /// Kernels and estimated ns in flight per client.
    client_inflight: HashMap<u64, (u32, u64)>,
    holder: Option<String>,
    holder_since: Nanos,
    /// When a tenant of each priority (low, normal, high) last asked to dispatch.
    active_at: [Nanos; 3],
    epoch: u64,
    inflight: u32,
    /// The sum of every account's `waiting`: when it is the holder's own, nobody else waits and
    /// admission needs no look at the other accounts (O(1) however many tenants there are).
    waiting_total: u64,
}

impl DeviceScheduler {
    /// An idle device.
    pub fn new(tuning: Tuning) -> DeviceScheduler {
        DeviceScheduler {
            tuning,
            accounts: BTreeMap::new(),
            clients: HashMap::new(),
            client_inflight: HashMap::new(),
            holder: None,
            holder_since: 0,
            active_at: [0; 3],
            epoch: 0,
            inflight: 0,
            waiting_total: 0,
        }
    }

    /// The tuning in force.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// Creates the tenant's account or changes its policy (a reload). Credit and history are kept;
    /// credit above the new burst is cut.
    pub fn set_policy(&mut self, tenant: &str, policy: Policy, now: Nanos) {
        let cap = self.tuning.burst_ns;
        match self.accounts.get_mut(tenant) {
            Some(a) => {
                a.credit.accrue(now, cap);
                a.policy = policy;
                a.credit.percent = policy.compute.clamp(1, 100).into();
            }
            None => {
                self.accounts.insert(tenant.to_string(), Account::new(policy, now));
            }
        }
    }

    /// The tenant's policy, if it has an account.
    pub fn policy(&self, tenant: &str) -> Option<Policy> {
        self.accounts.get(tenant).map(|a| a.policy)
    }

    /// Gives a client that narrowed its compute to `percent` its own `limit` bucket.
    pub fn set_client_limit(&mut self, client: u64, percent: u8, now: Nanos) {
        let c = self.clients.entry(client).or_insert_with(|| Credit::new(percent, now));
        // Credit accrues lazily (when read): what was earned at the old rate is banked first.
        c.accrue(now, self.tuning.burst_ns);
        c.percent = percent.clamp(1, 100).into();
    }

    /// Forgets a client's bucket (its session ended).
    pub fn forget_client(&mut self, client: u64) {
        self.clients.remove(&client);
    }

    /// A session of `tenant` has a kernel to dispatch: call before the first [`Self::try_grant`] for it,
    /// and [`Self::stop_waiting`] if it gives up.
    pub fn want(&mut self, tenant: &str, now: Nanos) {
        let slice = self.tuning.slice_ns;
        let Some(a) = self.accounts.get(tenant) else { return };
        // Idle for more than a slice: start level with the others (idling banks nothing). A shorter
        // pause (a client between two batches) keeps its place. Only then are the others looked at.
        let long_idle = !a.active() && now.saturating_sub(a.idle_since) > slice;
        let others_min = if long_idle {
            self.accounts
                .iter()
                .filter(|(n, a)| n.as_str() != tenant && a.active())
                .map(|(_, a)| a.vtime)
                .fold(f64::INFINITY, f64::min)
        } else {
            f64::INFINITY
        };
        let a = self.accounts.get_mut(tenant).expect("looked up above");
        self.active_at[rank(a.policy.priority) as usize] = now.max(1);
        if others_min.is_finite() && a.vtime < others_min {
            a.vtime = others_min;
        }
        a.waiting += 1;
        self.waiting_total += 1;
    }

    /// A waiting session gave up without dispatching.
    pub fn stop_waiting(&mut self, tenant: &str, now: Nanos) {
        if let Some(a) = self.accounts.get_mut(tenant) {
            unwait(a, &mut self.waiting_total);
            if !a.active() {
                a.idle_since = now;
            }
        }
    }

    fn accrue_all(&mut self, now: Nanos) {
        let cap = self.tuning.burst_ns;
        for a in self.accounts.values_mut() {
            a.credit.accrue(now, cap);
        }
        for c in self.clients.values_mut() {
            c.accrue(now, cap);
        }
    }

    /// Whether `a`'s own credit allows a dispatch, needing `need` ns of it.
    fn has_credit(a: &Account, need: i64) -> bool {
        !a.limited() || a.credit.available() >= need
    }

    /// Whether holder `h` has nothing dispatched and nothing to send (so anyone may take over).
    fn idle(h: &Account) -> bool {
        h.waiting == 0 && h.inflight == 0
    }

    /// Whether waiting tenant `c` should take the device from holder `h` now.
    fn takes_over(&self, c: &Account, h: &Account, now: Nanos) -> bool {
        let (pc, ph) = (rank(c.policy.priority), rank(h.policy.priority));
        let _ = now;
        if !Self::has_credit(c, 0) {
            return false;
        }
        if Self::idle(h) || !Self::has_credit(h, 0) {
            return true;
        }
        // Priority orders dispatch; it does not let a `share` tenant take more than its weight under
        // contention: one that has had a slice more than its share neither preempts nor keeps the
        // device from a tenant of lower priority.
        if pc > ph {
            return !(c.policy.mode == Mode::Share && self.leads(c, h));
        }
        if pc < ph {
            return h.policy.mode == Mode::Share && self.leads(h, c);
        }
        if c.limited() && !Self::has_credit(c, self.turn(c)) {
            return false;
        }
        if c.policy.mode == Mode::Share && h.policy.mode == Mode::Share {
            self.leads(h, c)
        } else {
            // A `limit` holder with credit left keeps the device for a slice, then yields to whoever has
            // had less of the device for its quota: on an oversubscribed device the shortfall is spread
            // in proportion to the quotas, instead of landing on the largest.
            now.saturating_sub(self.holder_since) >= self.tuning.slice_ns && c.vtime_ahead() < h.vtime_ahead()
        }
    }

    /// Whether `a` has had a slice's worth of virtual time more than `b`.
    fn leads(&self, a: &Account, b: &Account) -> bool {
        a.vtime_ahead() - b.vtime_ahead() >= self.tuning.slice_ns as f64 * 100.0 / a.weight().max(b.weight())
    }

    /// The credit `a` needs to take a busy device from its equal.
    fn turn(&self, a: &Account) -> i64 {
        self.tuning.turn_ns.min(a.credit.cap(self.tuning.burst_ns) / 2) as i64
    }

    /// Ordering among tenants that may take over: priority, then the least virtual time (share), then the
    /// most credit.
    fn better(a: &Account, b: &Account) -> bool {
        let (ra, rb) = (rank(a.policy.priority), rank(b.policy.priority));
        if ra != rb {
            return ra > rb;
        }
        if a.vtime_ahead() != b.vtime_ahead() {
            return a.vtime_ahead() < b.vtime_ahead();
        }
        a.credit.available() > b.credit.available()
    }

    /// The waiting tenant (other than the holder) that should have the device next, if any should.
    fn successor(&self, now: Nanos) -> Option<&str> {
        let holder = self.holder.as_deref().and_then(|h| self.accounts.get(h));
        let mut best: Option<(&str, &Account)> = None;
        for (name, c) in &self.accounts {
            if c.waiting == 0 || Some(name.as_str()) == self.holder.as_deref() {
                continue;
            }
            let eligible = match holder {
                Some(h) => self.takes_over(c, h, now),
                None => Self::has_credit(c, 0),
            };
            if eligible && best.is_none_or(|(_, b)| Self::better(c, b)) {
                best = Some((name, c));
            }
        }
        best.map(|(n, _)| n)
    }

    /// May a waiting session of `tenant` (client `client`) dispatch a kernel of kind `kind` now?
    /// On a grant the kernel counts as in flight until [`Self::complete`] or [`Self::abandon`].
    pub fn try_grant(&mut self, tenant: &str, client: u64, kind: u64, now: Nanos) -> Decision {
        self.try_grant_batch(tenant, client, &[kind], now)
    }

    /// [`Self::try_grant`] for launches of `kinds` (one each, in order) the client queued back to
    /// back. The first `kernels` of them (in the grant) are granted together: as many as their
    /// estimates fit in [`Tuning::batch_ns`], stopping before a kind never measured, and only the
    /// first while a tenant of higher priority is about. The batch is then one kernel in flight,
    /// settled by one [`Self::complete_batch`] with the granted kinds. `kinds` must not be empty.
    pub fn try_grant_batch(&mut self, tenant: &str, client: u64, kinds: &[u64], now: Nanos) -> Decision {
        let kind = kinds.first().copied().unwrap_or_default();
        let holder_waiting = self.holder.as_deref().and_then(|h| self.accounts.get(h)).map_or(0, |h| h.waiting);
        // Someone besides the holder waits: the successor is chosen among all accounts, with their
        // credit brought up to now. Otherwise only this tenant's and this client's credit is read.
        let contended = self.waiting_total > u64::from(holder_waiting);
        if contended {
            self.accrue_all(now);
        } else {
            let cap = self.tuning.burst_ns;
            if let Some(a) = self.accounts.get_mut(tenant) {
                a.credit.accrue(now, cap);
            }
            if let Some(c) = self.clients.get_mut(&client) {
                c.accrue(now, cap);
            }
        }
        let Some(a) = self.accounts.get(tenant) else {
            return Decision::Wait { until: None, for_credit: false };
        };
        // Nothing measured yet: assume the kernel fills the in-flight bound until one completes.
        let unmeasured = a.kernels == 0 && a.typical == 0;
        let each = if unmeasured { self.tuning.inflight_ns } else { a.estimate(kind) };
        // The tenant's own credit, then the narrowing client's.
        if a.limited() && a.credit.available() < 0 {
            return Decision::Wait { until: Some(a.credit.ready_at(now, 0)), for_credit: true };
        }
        if let Some(c) = self.clients.get(&client)
            && !c.unlimited()
            && c.available() < 0
        {
            return Decision::Wait { until: Some(c.ready_at(now, 0)), for_credit: true };
        }
        // The client's in-flight bound (one kernel always fits), and the device's count.
        // While a tenant of higher priority is about (active within a slice), a client keeps one kernel in
        // flight, so that tenant waits for at most one kernel per client of lower priority.
        let r = rank(a.policy.priority) as usize;
        let outranked = self.active_at[r + 1..].iter().any(|&t| t > 0 && now.saturating_sub(t) < self.tuning.slice_ns);
        let mine_inflight = self.client_inflight.get(&client).copied().unwrap_or_default();
        if self.inflight >= self.tuning.max_inflight
            || (mine_inflight.0 > 0 && (outranked || mine_inflight.1 >= self.tuning.inflight_ns))
        {
            return Decision::Wait { until: None, for_credit: false };
        }
        let (mut kernels, mut est) = (1u32, each);
        if !outranked && !unmeasured && a.estimates.contains_key(&kind) {
            for k in kinds.iter().skip(1) {
                let Some(&e) = a.estimates.get(k) else { break };
                if est + e > self.tuning.batch_ns {
                    break;
                }
                est += e;
                kernels += 1;
            }
        }
        let is_holder = self.holder.as_deref() == Some(tenant);
        let next = if contended { self.successor(now) } else { None };
        let mine = match (is_holder, next) {
            // The holder keeps the device unless someone should take over.
            (true, next) => next.is_none(),
            (false, Some(n)) => n == tenant,
            (false, None) => self.holder.is_none(),
        };
        if !mine {
            // Re-check when the holder's grace runs out or a turn's worth of credit has accrued.
            let a = &self.accounts[tenant];
            let mut until = now + self.tuning.slice_ns;
            if a.limited() && a.credit.available() < self.turn(a) {
                until = until.min(a.credit.ready_at(now, self.turn(a)));
            }
            return Decision::Wait { until: Some(until), for_credit: false };
        }
        if !is_holder {
            self.holder = Some(tenant.to_string());
            self.holder_since = now;
            self.epoch += 1;
        }
        let a = self.accounts.get_mut(tenant).expect("checked");
        unwait(a, &mut self.waiting_total);
        a.inflight += 1;
        a.inflight_est += est;
        a.last_grant = now;
        let ci = self.client_inflight.entry(client).or_default();
        ci.0 += 1;
        ci.1 += est;
        self.inflight += 1;
        Decision::Grant { est, epoch: self.epoch, kernels }
    }

    fn settle(&mut self, tenant: &str, client: u64, est: u64, now: Nanos) -> Option<&mut Account> {
        self.inflight = self.inflight.saturating_sub(1);
        if let Some(ci) = self.client_inflight.get_mut(&client) {
            ci.0 = ci.0.saturating_sub(1);
            ci.1 = ci.1.saturating_sub(est);
            if ci.0 == 0 {
                self.client_inflight.remove(&client);
            }
        }
        let a = self.accounts.get_mut(tenant)?;
        a.inflight = a.inflight.saturating_sub(1);
        a.inflight_est = a.inflight_est.saturating_sub(est);
        if !a.active() {
            a.idle_since = now;
        }
        Some(a)
    }

    /// A granted kernel finished after `charged` ns of measured device time.
    pub fn complete(&mut self, tenant: &str, client: u64, kind: u64, est: u64, charged: u64, now: Nanos) {
        self.complete_batch(tenant, client, &[kind], est, charged, now);
    }

    /// A granted batch of kernels of `kinds` ([`Self::try_grant_batch`]) finished after `charged`
    /// ns of measured device time in all.
    pub fn complete_batch(&mut self, tenant: &str, client: u64, kinds: &[u64], est: u64, charged: u64, now: Nanos) {
        self.settle(tenant, client, est, now);
        self.charge_batch(tenant, client, kinds, charged, now);
    }

    /// Charges `charged` ns of measured device time for work no longer in flight here: a grant
    /// settled with [`Self::abandon`] when it was dispatched, because its length is not the
    /// device's (a graph that waits on its client's host function), measured once it ended.
    pub fn charge(&mut self, tenant: &str, client: u64, kind: u64, charged: u64, now: Nanos) {
        self.charge_batch(tenant, client, &[kind], charged, now);
    }

    /// [`Self::charge`] for a batch of kernels of `kinds` ([`Self::try_grant_batch`]).
    pub fn charge_batch(&mut self, tenant: &str, client: u64, kinds: &[u64], charged: u64, now: Nanos) {
        let cap = self.tuning.burst_ns;
        if let Some(c) = self.clients.get_mut(&client) {
            c.accrue(now, cap);
            c.balance -= charged as i64;
        }
        if let Some(a) = self.accounts.get_mut(tenant) {
            a.credit.accrue(now, cap);
            a.credit.balance -= charged as i64;
            a.vtime += charged as f64 * 100.0 / a.weight();
            a.record(kinds, charged, now);
        }
    }

    /// A granted kernel was never dispatched (the launch failed): nothing is charged.
    pub fn abandon(&mut self, tenant: &str, client: u64, est: u64, now: Nanos) {
        self.settle(tenant, client, est, now);
    }

    /// A client of `tenant` waited `ns` for credit ([`Decision::Wait`] with `for_credit`).
    pub fn note_throttled(&mut self, tenant: &str, ns: u64) {
        if let Some(a) = self.accounts.get_mut(tenant) {
            a.throttled_ns += ns;
        }
    }

    /// Whether a tenant of higher priority than `p` has a kernel granted and not yet complete (what
    /// keeps a preempted tenant of priority `p` stopped).
    pub fn inflight_above(&self, p: Priority) -> bool {
        self.accounts.values().any(|a| a.inflight > 0 && rank(a.policy.priority) > rank(p))
    }

    /// The epoch now (see [`Decision::Grant`]).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The tenant holding the device.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Every tenant's figures.
    pub fn usage(&self, now: Nanos) -> Vec<ComputeUsage> {
        self.accounts
            .iter()
            .map(|(name, a)| ComputeUsage {
                tenant: name.clone(),
                quota_percent: a.policy.compute,
                mode: a.policy.mode,
                priority: a.policy.priority,
                share_1s: a.share(1_000_000_000, now),
                share_10s: a.share(10_000_000_000, now),
                kernels: a.kernels,
                charged_ns: a.charged_total,
                inflight: a.inflight,
                throttled_ns: a.throttled_ns,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
