//! `gpupool daemon --metrics ADDR`: Prometheus (OpenMetrics text) over plain HTTP, `GET /metrics`.
//!
//! Calls per operation and their latency are counted as requests are served (one pre-made counter and
//! histogram per operation, so serving a request costs three atomic updates, no lock, lookup or
//! allocation; [`CallLatency`]);
//! everything else is read at scrape time from the same snapshot `gpupool status` shows. Labels are the
//! tenant, the device index, its UUID and its kind (`gpu` or `npu`: one family per figure for both), the
//! operation and the error code: all bounded (tenants come from the config, not from clients), so
//! thousands of short-lived clients add no series.

use super::Shared;
use crossbeam_utils::CachePadded;
use gpupool_protocol::ops::RequestOp;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::io::{BufRead, BufReader, Read as _, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
    device: String,
    uuid: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PinnedLabels {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WindowLabels {
    tenant: String,
    device: String,
    uuid: String,
    kind: String,
    window: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
    uuid: String,
    kind: String,
}

type F64Gauge = Gauge<f64, AtomicU64>;

/// Upper bounds of the call-duration buckets below +Inf: 1 us .. ~4 s, 4x apart.
const LATENCY_BUCKETS: usize = 12;
/// Shards of a [`CallLatency`]: sessions spread over them by id.
const LATENCY_SHARDS: usize = 16;

fn latency_bounds() -> impl Iterator<Item = f64> {
    exponential_buckets(1e-6, 4.0, LATENCY_BUCKETS as u16)
}

/// One shard's bucket counts (the last is +Inf) and sum, on a cache line of its own.
#[derive(Default, Debug)]
struct LatencyShard {
    buckets: [AtomicU64; LATENCY_BUCKETS + 1],
    sum_ns: AtomicU64,
}

/// A request-duration histogram that many session threads update at once. prometheus-client's
/// `Histogram` takes a mutex per observation: one lock per operation for every session, on the
/// path of every request (a `cuCtxSynchronize` round trip is ~600 ns). Here a session adds to
/// the shard its id selects, with relaxed atomics; a scrape adds the shards up. Sessions on one
/// shard share a line but never wait for each other.
#[derive(Clone, Debug)]
pub struct CallLatency {
    shards: Arc<[CachePadded<LatencyShard>]>,
    bounds_ns: [u64; LATENCY_BUCKETS],
}

impl Default for CallLatency {
    fn default() -> Self {
        let mut bounds_ns = [0; LATENCY_BUCKETS];
        for (b, s) in bounds_ns.iter_mut().zip(latency_bounds()) {
            *b = (s * 1e9).round() as u64;
        }
        CallLatency { shards: (0..LATENCY_SHARDS).map(|_| CachePadded::default()).collect(), bounds_ns }
    }
}

impl CallLatency {
    /// `n` requests that took `took` each.
    pub fn observe_n(&self, session: u64, took: Duration, n: u64) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let bucket = self.bounds_ns.iter().position(|&b| ns <= b).unwrap_or(LATENCY_BUCKETS);
        let shard = &self.shards[(session % LATENCY_SHARDS as u64) as usize];
        shard.buckets[bucket].fetch_add(n, Ordering::Relaxed);
        shard.sum_ns.fetch_add(ns.saturating_mul(n), Ordering::Relaxed);
    }

    /// (sum in seconds, count, per-bucket counts with their upper bounds, +Inf last).
    fn totals(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut buckets: Vec<(f64, u64)> = latency_bounds().chain([f64::INFINITY]).map(|b| (b, 0)).collect();
        let mut sum_ns = 0u64;
        for shard in self.shards.iter() {
            for (total, n) in buckets.iter_mut().zip(&shard.buckets) {
                total.1 += n.load(Ordering::Relaxed);
            }
            sum_ns = sum_ns.wrapping_add(shard.sum_ns.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|b| b.1).sum();
        (sum_ns as f64 / 1e9, count, buckets)
    }
}

impl TypedMetric for CallLatency {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for CallLatency {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.totals();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The counters the session threads update.
pub struct Calls {
    calls: Family<OpLabels, Counter>,
    latency: Family<OpLabels, CallLatency>,
    errors: Family<CodeLabels, Counter>,
    /// Per opcode: the operation's counter and histogram, made once.
    by_code: Vec<Option<(Counter, CallLatency)>>,
}

impl Default for Calls {
    fn default() -> Self {
        let calls = Family::<OpLabels, Counter>::default();
        let latency = Family::<OpLabels, CallLatency>::default();
        let max = RequestOp::ALL.iter().map(|o| o.code()).max().unwrap_or(0) as usize;
        let mut by_code = vec![None; max + 1];
        for op in RequestOp::ALL {
            let l = OpLabels { operation: op.name().to_string() };
            by_code[op.code() as usize] = Some((calls.get_or_create(&l).clone(), latency.get_or_create(&l).clone()));
        }
        Calls { calls, latency, errors: Family::default(), by_code }
    }
}

impl Calls {
    /// One request of `session` served in `took`; `error`: the code it was refused with.
    pub fn record(&self, session: u64, op: RequestOp, took: Duration, error: Option<u32>) {
        self.record_n(session, op, took, 1);
        if let Some(code) = error {
            self.errors.get_or_create(&CodeLabels { code: code.to_string() }).inc();
        }
    }

    /// `n` requests of `session` that succeeded, served in `took` each (a batch of launches:
    /// three atomic additions for the batch instead of three per launch).
    pub fn record_n(&self, session: u64, op: RequestOp, took: Duration, n: u64) {
        if let Some(Some((c, h))) = self.by_code.get(op.code() as usize) {
            c.inc_by(n);
            h.observe_n(session, took, n);
        }
    }
}

/// The exposition: the call counters, and gauges from the status snapshot.
pub fn render(shared: &Shared) -> String {
    let mut reg = Registry::with_prefix("gpupool");
    let m = &shared.calls;
    reg.register("calls", "Requests served, by operation", m.calls.clone());
    reg.register_with_unit("call_duration", "Time to serve a request, by operation", Unit::Seconds, m.latency.clone());
    reg.register(
        "errors",
        "Requests refused or failed, by error code (CUDA's numbering; an NPU backend's failure keeps AscendCL's)",
        m.errors.clone(),
    );

    let doc = super::control::status_document(shared);
    let uuid = |d: u64| doc["devices"][d as usize]["uuid"].as_str().unwrap_or("").to_string();
    let kind = |d: u64| doc["devices"][d as usize]["kind"].as_str().unwrap_or("gpu").to_string();
    let sessions = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
    sessions.set(doc["sessions"].as_array().map_or(0, |s| s.len() as i64));
    reg.register("sessions", "Client sessions connected now", sessions);
    super::placement::register_metrics(&mut reg, &doc);
    super::evict::register_metrics(&mut reg, &doc);
    super::checkpoint::register_metrics(&mut reg, &doc);

    let used = Family::<TenantLabels, Gauge>::default();
    let quota = Family::<TenantLabels, Gauge>::default();
    let compute_quota = Family::<TenantLabels, F64Gauge>::default();
    let share = Family::<WindowLabels, F64Gauge>::default();
    let throttled = Family::<TenantLabels, Counter<f64, AtomicU64>>::default();
    let preemptions = Family::<TenantLabels, Counter>::default();
    let preempted = Family::<TenantLabels, Counter<f64, AtomicU64>>::default();
    let pinned = Family::<PinnedLabels, Gauge>::default();
    let pinned_quota = Family::<PinnedLabels, Gauge>::default();
    for t in doc["tenants"].as_array().into_iter().flatten() {
        let tenant = t["tenant"].as_str().unwrap_or("?").to_string();
        let pl = PinnedLabels { tenant: tenant.clone() };
        pinned.get_or_create(&pl).set(t["pinned"].as_i64().unwrap_or(0));
        pinned_quota.get_or_create(&pl).set(t["pinned_quota"].as_i64().unwrap_or(0));
        for d in t["devices"].as_array().into_iter().flatten() {
            let dev = d["device"].as_u64().unwrap_or(0);
            let l = TenantLabels { tenant: tenant.clone(), device: dev.to_string(), uuid: uuid(dev), kind: kind(dev) };
            used.get_or_create(&l).set(d["used"].as_i64().unwrap_or(0));
            if let Some(q) = d["quota"].as_i64() {
                quota.get_or_create(&l).set(q);
            }
            let c = &d["compute"];
            if c.is_null() {
                continue;
            }
            compute_quota.get_or_create(&l).set(c["quota_percent"].as_f64().unwrap_or(0.0) / 100.0);
            for (w, key) in [("1s", "share_1s"), ("10s", "share_10s")] {
                let wl = WindowLabels {
                    tenant: l.tenant.clone(),
                    device: l.device.clone(),
                    uuid: l.uuid.clone(),
                    kind: l.kind.clone(),
                    window: w.into(),
                };
                share.get_or_create(&wl).set(c[key].as_f64().unwrap_or(0.0));
            }
            throttled.get_or_create(&l).inc_by(c["throttled_ns"].as_f64().unwrap_or(0.0) / 1e9);
            preemptions.get_or_create(&l).inc_by(c["preemptions"].as_u64().unwrap_or(0));
            preempted.get_or_create(&l).inc_by(c["preempted_ns"].as_f64().unwrap_or(0.0) / 1e9);
        }
    }
    reg.register_with_unit("tenant_memory_used", "Device memory a tenant holds", Unit::Bytes, used);
    reg.register_with_unit(
        "tenant_memory_quota",
        "A tenant's device-memory quota (absent: unlimited)",
        Unit::Bytes,
        quota,
    );
    reg.register_with_unit(
        "tenant_compute_quota",
        "A tenant's compute quota, as a fraction of the device",
        Unit::Other("ratio".into()),
        compute_quota,
    );
    reg.register_with_unit(
        "tenant_compute_share",
        "Device time charged to a tenant over the window, as a fraction of the window",
        Unit::Other("ratio".into()),
        share,
    );
    reg.register_with_unit(
        "tenant_throttled",
        "Time a tenant's clients waited for compute credit",
        Unit::Seconds,
        throttled,
    );
    reg.register(
        "tenant_preemptions",
        "Times a tenant's kernels were stopped between thread blocks for a higher priority",
        preemptions,
    );
    reg.register_with_unit(
        "tenant_preempted",
        "Time a tenant's kernels stood stopped for a higher priority (not charged to it)",
        Unit::Seconds,
        preempted,
    );

    reg.register_with_unit("pinned", "Page-locked host memory a tenant's sessions hold", Unit::Bytes, pinned);
    reg.register_with_unit("pinned_quota", "A tenant's page-locked host memory quota", Unit::Bytes, pinned_quota);

    let util = Family::<DeviceLabels, F64Gauge>::default();
    let mem_used = Family::<DeviceLabels, Gauge>::default();
    let mem_total = Family::<DeviceLabels, Gauge>::default();
    for (i, d) in doc["devices"].as_array().into_iter().flatten().enumerate() {
        let l = DeviceLabels { device: i.to_string(), uuid: uuid(i as u64), kind: kind(i as u64) };
        util.get_or_create(&l).set(d["utilization"].as_f64().unwrap_or(0.0));
        mem_used.get_or_create(&l).set(d["memory_used"].as_i64().unwrap_or(0));
        mem_total.get_or_create(&l).set(d["total_memory"].as_i64().unwrap_or(0));
    }
    reg.register_with_unit(
        "device_utilization",
        "Device time charged to all tenants over the last second",
        Unit::Other("ratio".into()),
        util,
    );
    reg.register_with_unit("device_memory_used", "Device memory held by all tenants", Unit::Bytes, mem_used);
    reg.register_with_unit("device_memory_total", "Device memory", Unit::Bytes, mem_total);

    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &reg) {
        tracing::warn!("encoding metrics: {e}");
    }
    out
}

/// Serves `GET /metrics` on `listener` until shutdown; anything else gets 404.
pub fn serve(shared: Arc<Shared>, listener: TcpListener) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    std::thread::Builder::new().name("gpupool-metrics".into()).spawn(move || {
        while !shared.stopping() {
            match listener.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = answer(&shared, stream) {
                        tracing::debug!("metrics request: {e}");
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => {
                    tracing::warn!("metrics listener: {e}");
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    })?;
    Ok(())
}

fn answer(shared: &Shared, stream: TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    // A request line longer than this is not one of ours.
    reader.by_ref().take(8192).read_line(&mut line)?;
    let mut header = String::new();
    while reader.by_ref().take(8192).read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut out = stream;
    let path = line.split_whitespace().nth(1).unwrap_or("");
    if line.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
        let body = render(shared);
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        let body = "not found: GET /metrics\n";
        write!(out, "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition of one histogram registered alone.
    fn exposition(h: &CallLatency) -> String {
        let mut reg = Registry::default();
        reg.register_with_unit("d", "durations", Unit::Seconds, h.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        text
    }

    #[test]
    fn a_sharded_histogram_adds_up_every_sessions_observations_into_cumulative_buckets() {
        let h = CallLatency::default();
        // 500 ns and exactly 1 us fall in le=0.000001; 3 us (three of them) in 0.000004; an
        // hour only in +Inf.
        h.observe_n(1, Duration::from_nanos(500), 1);
        h.observe_n(17, Duration::from_micros(1), 1); // 17 % 16: the same shard as session 1
        h.observe_n(2, Duration::from_micros(3), 3);
        h.observe_n(u64::MAX, Duration::from_secs(3600), 1);
        let text = exposition(&h);
        let line =
            |prefix: &str| text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}: {text}"));
        assert!(text.contains("# TYPE d_seconds histogram"), "{text}");
        assert!(line("d_seconds_bucket{le=\"0.000001\"}").ends_with(" 2"), "{text}");
        assert!(line("d_seconds_bucket{le=\"0.000004\"}").ends_with(" 5"), "{text}");
        assert!(line("d_seconds_bucket{le=\"+Inf\"}").ends_with(" 6"), "{text}");
        assert!(line("d_seconds_count").ends_with(" 6"), "{text}");
        let sum: f64 = line("d_seconds_sum").rsplit(' ').next().unwrap().parse().unwrap();
        assert!((sum - 3600.0000105).abs() < 1e-6, "{sum}");
    }

    #[test]
    fn concurrent_sessions_lose_no_observation() {
        let h = CallLatency::default();
        std::thread::scope(|s| {
            for session in 0..8u64 {
                let h = &h;
                s.spawn(move || (0..10_000).for_each(|_| h.observe_n(session, Duration::from_micros(2), 1)));
            }
        });
        let (sum, count, buckets) = h.totals();
        assert_eq!(count, 80_000);
        assert_eq!(buckets[1].1, 80_000, "{buckets:?}");
        assert!((sum - 0.16).abs() < 1e-9, "{sum}");
    }
}
