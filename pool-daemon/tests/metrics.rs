//! `gpupool daemon --metrics ADDR`: the endpoint is scraped over HTTP and parsed with the reference
//! Python parser (prometheus_client's OpenMetrics parser, from target/venv, which scripts/test makes);
//! the values agree with `gpupool status --json`, and a burst of short-lived clients adds no series. An
//! NPU tenant's figures are the same families with `kind="npu"`, and agree with `gpupool status`.
//! Launches served in batches are counted one by one.

mod common;

use common::{Daemon, ensure_interposer};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn venv_python() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/test (or scripts/setup-venv) first", p.display());
    p
}

fn scrape(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

/// (name, sorted labels) -> value, as the reference parser reads the exposition.
fn parse(body: &str) -> BTreeMap<(String, String), f64> {
    let script = "import sys, json\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
        print(json.dumps([[s.name, sorted(s.labels.items()), s.value] for f in parse(sys.stdin.read()) for s in f.samples]))";
    let mut c =
        Command::new(venv_python()).args(["-c", script]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    c.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "the reference parser refused the exposition:\n{body}");
    let rows: Vec<(String, serde_json::Value, f64)> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter().map(|(n, l, v)| ((n, l.to_string()), v)).collect()
}

fn get<'a>(m: &'a BTreeMap<(String, String), f64>, name: &str, labels: &[(&str, &str)]) -> Option<&'a f64> {
    m.iter()
        .find(|((n, l), _)| n == name && labels.iter().all(|(k, v)| l.contains(&format!("[\"{k}\",\"{v}\"]"))))
        .map(|(_, v)| v)
}

#[test]
fn metrics_parse_agree_with_status_and_stay_bounded() {
    ensure_interposer();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let token = |n: &str| gpupool_quota::hash_token(&format!("token-{n}"));
    let cfg =
        format!("[[tenant]]\nname = \"etl\"\ntoken_sha256 = \"{}\"\nmemory = \"256MiB\"\ncompute = 20\n", token("etl"));
    let d = Daemon::start_with(Some(&cfg), &["--metrics", &addr]);
    // One client runs into its memory quota (a refusal with code 2) and keeps running kernels.
    let mut c = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["__demo-tenant", "--duration", "3", "--oom"])
        .env("LD_PRELOAD", PathBuf::from(env!("CARGO_BIN_EXE_gpupool")).with_file_name("libgpupool.so"))
        .env("GPUPOOL_ENDPOINT", d.endpoint())
        .env("GPUPOOL_TOKEN", "token-etl")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let (head, body) = scrape(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("application/openmetrics-text"), "{head}");
    let m = parse(&body);
    let st = d.status();
    let etl = st["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "etl").unwrap();
    let dev0 = &etl["devices"][0];
    let used = *get(&m, "gpupool_tenant_memory_used_bytes", &[("tenant", "etl"), ("device", "0")]).unwrap();
    assert_eq!(used as u64, dev0["used"].as_u64().unwrap(), "{body}");
    assert!(used >= 192.0 * 1048576.0, "the client holds most of its 256 MiB: {used}");
    assert_eq!(
        *get(&m, "gpupool_tenant_memory_quota_bytes", &[("tenant", "etl"), ("device", "0")]).unwrap(),
        268435456.0
    );
    assert_eq!(*get(&m, "gpupool_tenant_compute_quota_ratio", &[("tenant", "etl"), ("device", "0")]).unwrap(), 0.2);
    let share = *get(&m, "gpupool_tenant_compute_share_ratio", &[("tenant", "etl"), ("window", "1s")]).unwrap();
    assert!(share > 0.05 && share <= 0.25, "1 s share {share}");
    assert_eq!(*get(&m, "gpupool_sessions", &[]).unwrap() as usize, st["sessions"].as_array().unwrap().len());
    assert!(*get(&m, "gpupool_calls_total", &[("operation", "LaunchKernel")]).unwrap() > 0.0);
    assert!(get(&m, "gpupool_call_duration_seconds_count", &[("operation", "MemAlloc")]).is_some_and(|v| *v >= 4.0));
    assert!(*get(&m, "gpupool_errors_total", &[("code", "2")]).unwrap() >= 1.0, "the out-of-memory refusal is counted");
    assert!(get(&m, "gpupool_device_memory_total_bytes", &[("device", "0")]).is_some());
    c.wait().unwrap();

    // Fifty short-lived clients of the default tenant: no new series beyond that tenant's own.
    let before: Vec<String> = parse(&scrape(&addr, "/metrics").1).keys().map(|k| k.0.clone() + &k.1).collect();
    for _ in 0..50 {
        let st = Command::new(env!("CARGO_BIN_EXE_gpupool"))
            .args(["__demo-tenant", "--duration", "0"])
            .env("LD_PRELOAD", PathBuf::from(env!("CARGO_BIN_EXE_gpupool")).with_file_name("libgpupool.so"))
            .env("GPUPOOL_ENDPOINT", d.endpoint())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
    let after: Vec<String> = parse(&scrape(&addr, "/metrics").1).keys().map(|k| k.0.clone() + &k.1).collect();
    assert!(after.len() <= before.len() + 16, "series grew from {} to {} with 50 clients", before.len(), after.len());
    assert!(scrape(&addr, "/other").0.starts_with("HTTP/1.1 404"));
}

/// The demo's NPU tenant (an AscendCL program under `gpupool run`) on the first NPU, pool device 2,
/// held to 25% and `npu0 = "1024MiB"`: its memory, quotas and share are the GPU tenants' families
/// labelled `kind="npu"`, the NPU's own gauges too, and `gpupool status` shows the same figures.
#[test]
fn an_npu_tenant_is_in_the_same_families_labelled_npu() {
    ensure_interposer();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let cfg = format!(
        "[[tenant]]\nname = \"ascend\"\ntoken_sha256 = \"{}\"\ncompute = 25\nmode = \"limit\"\n\
         memory = {{ npu0 = \"1024MiB\" }}\n",
        gpupool_quota::hash_token("token-ascend")
    );
    let d = Daemon::start_env(Some(&cfg), &["--metrics", &addr], &[("GPUPOOL_SIM_NPU_DEVICES", "1")]);
    let gpupool = env!("CARGO_BIN_EXE_gpupool");
    let c = Command::new(gpupool)
        .args(["run", "--endpoint", &d.endpoint(), "--", gpupool, "__demo-npu-tenant", "--duration", "4", "--oom"])
        .env("GPUPOOL_TOKEN", "token-ascend")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Out of memory within a second, then matmuls: the 1 s window is full of them by 2.5 s.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let (_, body) = scrape(&addr, "/metrics");
    let m = parse(&body);
    let st = d.status();
    let npu = [("tenant", "ascend"), ("device", "2"), ("kind", "npu")];
    let ascend = st["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "ascend").unwrap().clone();
    let on_npu = ascend["devices"].as_array().unwrap().iter().find(|x| x["device"] == 2).unwrap().clone();
    assert_eq!(on_npu["kind"], "npu", "{st:#}");
    let used = *get(&m, "gpupool_tenant_memory_used_bytes", &npu).unwrap_or_else(|| panic!("{body}"));
    assert_eq!(used as u64, on_npu["used"].as_u64().unwrap(), "{body}");
    assert!((960.0 * 1048576.0..=1024.0 * 1048576.0).contains(&used), "15 blocks of 64 MiB and the operands: {used}");
    assert_eq!(*get(&m, "gpupool_tenant_memory_quota_bytes", &npu).unwrap(), 1073741824.0);
    assert_eq!(*get(&m, "gpupool_tenant_compute_quota_ratio", &npu).unwrap(), 0.25);
    let share = *get(&m, "gpupool_tenant_compute_share_ratio", &[npu[0], npu[2], ("window", "1s")]).unwrap();
    assert!(share > 0.1 && share <= 0.27, "1 s share {share} against a 25% cap");
    assert!(*get(&m, "gpupool_calls_total", &[("operation", "NpuOpRun")]).unwrap() > 10.0);
    // Its refusal at the quota is counted under AscendCL's code.
    assert!(*get(&m, "gpupool_errors_total", &[("code", "207001")]).unwrap() >= 1.0, "{body}");
    let total = *get(&m, "gpupool_device_memory_total_bytes", &[("device", "2"), ("kind", "npu")]).unwrap();
    assert_eq!(total as u64, st["devices"][2]["total_memory"].as_u64().unwrap());
    assert!(get(&m, "gpupool_device_memory_total_bytes", &[("device", "0"), ("kind", "gpu")]).is_some());
    let util = *get(&m, "gpupool_device_utilization_ratio", &[("device", "2"), ("kind", "npu")]).unwrap();
    assert!(util > 0.1 && util <= 0.27, "the NPU's utilization is its one tenant's share: {util}");
    // The NPU's UUID is marked as an NPU's, in the status and in every series of device 2.
    assert!(st["devices"][2]["uuid"].as_str().unwrap().starts_with("NPU-"), "{st:#}");
    let on_2 = m.keys().filter(|(_, l)| l.contains("[\"device\",\"2\"]")).collect::<Vec<_>>();
    assert!(!on_2.is_empty() && on_2.iter().all(|(_, l)| l.contains("[\"uuid\",\"NPU-")), "{on_2:?}");
    // The GPUs carry kind="gpu", and no GPU series is labelled npu.
    assert!(get(&m, "gpupool_tenant_memory_used_bytes", &[("device", "0"), ("kind", "gpu")]).is_some());
    assert!(!m.keys().any(|(_, l)| l.contains("[\"device\",\"0\"]") && l.contains("[\"kind\",\"npu\"]")));

    let out = Command::new(gpupool).args(["status", "--endpoint", &d.endpoint()]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let row =
        text.lines().find(|l| l.starts_with("ascend ") && l.contains(" 2 (npu) ")).unwrap_or_else(|| panic!("{text}"));
    // 15 blocks of 64 MiB and three 36 KiB operands, to a tenth of a MiB, then the quota.
    assert!(row.contains(" 960.1 MiB      1024 MiB ") && row.contains("25% limit normal"), "{row}");
    assert!(text.lines().any(|l| l.starts_with("2       npu   Ascend910B3")), "the NPU in the device table: {text}");
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// Launches the daemon serves in batches are counted one by one: 500 asynchronous launches sent
/// back to back on one stream, two of them refused (an empty grid: CUDA_ERROR_INVALID_VALUE, 1),
/// are 500 calls of `LaunchKernel`, 500 observations of its duration and two errors with code 1.
#[test]
fn launches_served_in_batches_are_each_counted() {
    use gpupool_protocol::Request;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let d = Daemon::start_with(None, &["--metrics", &addr]);
    let mut c = common::Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let buf = c.alloc(ctx, 1024).expect("1 KiB");
    let (func, packed) = c.fill_kernel(ctx, buf, 7);
    const N: usize = 500;
    for i in 0..N {
        let mut launch = common::one_block_launch(func, packed.clone());
        if let Request::LaunchKernel { grid, .. } = &mut launch
            && (i == 100 || i == 400)
        {
            *grid = [0, 1, 1];
        }
        c.send_async(launch);
    }
    let r = c.call(Request::StreamSynchronize { stream: gpupool_protocol::StreamId::NULL });
    assert_eq!(common::code(&r), 0, "{r:?}");
    assert_eq!(c.async_errors.len(), 2, "{:?}", c.async_errors);
    let m = parse(&scrape(&addr, "/metrics").1);
    let launches = [("operation", "LaunchKernel")];
    assert_eq!(get(&m, "gpupool_calls_total", &launches).copied(), Some(N as f64));
    assert_eq!(get(&m, "gpupool_call_duration_seconds_count", &launches).copied(), Some(N as f64));
    assert_eq!(get(&m, "gpupool_errors_total", &[("code", "1")]).copied(), Some(2.0));
}
