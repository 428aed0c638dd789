//! Placement (README.md, "Placement") on 8 simulated GPUs in two NVLink islands of four (PCIe
//! switches of two, a NUMA node per island), which the daemon learns through NVML: a 4-GPU job
//! lands in one island, and in the other when a device of the first cannot hold its quota;
//! `binpack` and `spread` place six 1-GPU jobs as documented; a placed session sees only its
//! GPUs; status shows each session's placement; and the README's `gpupool run --gpus 2`
//! gives cuda-python and nvidia-ml-py a consistent view of the placed devices.

mod common;

use common::*;
use gpupool_protocol::{PROTOCOL_VERSION, Reply, Request};
use std::path::PathBuf;

const TOPOLOGY: &str = "[topology]\n\
    nvlink_islands = [[0, 1, 2, 3], [4, 5, 6, 7]]\n\
    pcie_switches = [[0, 1], [2, 3], [4, 5], [6, 7]]\n\
    numa_nodes = [[0, 1, 2, 3], [4, 5, 6, 7]]\n";

/// A daemon on eight 1 GiB simulated GPUs wired as [`TOPOLOGY`], with quota config `config`.
fn eight_gpus(config: &str, extra: &[&str]) -> Daemon {
    // One file per daemon: the tests run in parallel, and a file rewritten while another test's
    // simulator reads it can be read empty (a machine without NVLink islands).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let sim = std::env::temp_dir().join(format!("gpupool-placement-{}-{n}.toml", std::process::id()));
    std::fs::write(&sim, TOPOLOGY).unwrap();
    let d = Daemon::start_env(
        Some(config),
        extra,
        &[("GPUPOOL_SIM_DEVICES", "8"), ("GPUPOOL_SIM_CONFIG", sim.to_str().unwrap())],
    );
    assert!(d.log().contains("GPU topology from NVML"), "{}", d.log());
    d
}

fn hello_gpus(gpus: u32) -> Request {
    Request::Hello {
        pid: std::process::id(),
        uid: uid(),
        gid: rustix::process::getgid().as_raw(),
        protocol_version: PROTOCOL_VERSION,
        memory_limit: None,
        compute_percent: None,
        client_name: "placement-test".into(),
        token: None,
        gpus: Some(gpus),
    }
}

/// A session placed on `gpus` GPUs, and the daemon ordinals it was given, in its order.
fn placed(d: &Daemon, gpus: u32) -> (Client, Vec<u32>) {
    let c = Client::connect_hello(&d.socket, hello_gpus(gpus)).unwrap_or_else(|r| panic!("{r:?}\n{}", d.log()));
    let Reply::HelloReply { devices, .. } = &c.hello else { unreachable!() };
    let ordinals = devices.iter().map(|x| x.ordinal).collect();
    (c, ordinals)
}

#[test]
fn a_four_gpu_job_lands_in_one_island_and_not_where_its_quota_does_not_fit() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let d = eight_gpus("[default]\nmemory = \"512MiB\"\n", &["--metrics", &addr]);
    // binpack: the first two fill island 0 (512 MiB each of 1 GiB); the third finds no room there.
    let (mut a, first) = placed(&d, 4);
    assert_eq!(first, [0, 1, 2, 3]);
    let (_b, second) = placed(&d, 4);
    assert_eq!(second, [0, 1, 2, 3]);
    let (_c, third) = placed(&d, 4);
    assert_eq!(third, [4, 5, 6, 7], "island 0 is full: the whole job moves to island 1");
    // A one-GPU job: not on island 0, where its quota does not fit; the fullest device that fits.
    let (_e, one) = placed(&d, 1);
    assert_eq!(one, [4]);
    // Five GPUs with room for 512 MiB no longer exist: refused, out of memory, saying why.
    match Client::connect_hello(&d.socket, hello_gpus(5)) {
        Err(Reply::Error { code, message }) => {
            assert_eq!(code, 2, "{message}");
            assert!(message.contains("3 can hold the memory quota"), "{message}");
        }
        other => panic!("a 5-GPU job was placed: {:?}", other.map(|c| c.hello)),
    }
    // A placed session reaches only its own GPUs.
    assert!(matches!(a.call(Request::PrimaryCtxRetain { device: 3 }), Reply::Context { .. }));
    let r = a.call(Request::PrimaryCtxRetain { device: 4 });
    assert_eq!(code(&r), 101, "device 4 is not this session's: {r:?}");
    assert_eq!(code(&a.call(Request::CtxCreate { device: 6, flags: 0 })), 101);
    match a.call(Request::DeviceGetCount {}) {
        Reply::DeviceCount { count } => assert_eq!(count, 4),
        r => panic!("{r:?}"),
    }
    // The status document shows each session's placement.
    let doc = d.status();
    let mut placements: Vec<Vec<u64>> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["placement"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect())
        .collect();
    placements.sort();
    assert_eq!(placements, [vec![0, 1, 2, 3], vec![0, 1, 2, 3], vec![4], vec![4, 5, 6, 7]]);
    let text = gpupool_status_text(&d);
    assert!(text.contains("PLACEMENT") && text.contains("4,5,6,7"), "{text}");
    // Metrics: one series per (session, placed GPU), labelled with the session's index for it.
    let body = scrape(&addr);
    let series: Vec<&str> = body.lines().filter(|l| l.starts_with("gpupool_session_placement{")).collect();
    assert_eq!(series.len(), 13, "{body}");
    assert!(series.iter().all(|l| l.ends_with(" 1")), "{series:?}");
    assert!(
        series.iter().any(|l| l.contains("device=\"7\"") && l.contains("index=\"3\"")),
        "the third job's last GPU: {series:?}"
    );
}

fn scrape(addr: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text
}

/// `gpupool status` as a user reads it.
fn gpupool_status_text(d: &Daemon) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["status", "--endpoint", &d.endpoint()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Six one-GPU jobs of 256 MiB arriving one after another, each kept open.
fn six_ones(d: &Daemon) -> (Vec<Client>, Vec<u32>) {
    (0..6).map(|_| placed(d, 1)).map(|(c, o)| (c, o[0])).unzip()
}

#[test]
fn binpack_and_spread_place_six_one_gpu_jobs_as_documented() {
    let quota = "[default]\nmemory = \"256MiB\"\n";
    let d = eight_gpus(quota, &[]);
    let (jobs, devices) = six_ones(&d);
    assert_eq!(devices, [0, 0, 0, 0, 1, 1], "binpack: a device is filled before the next");
    drop(jobs);
    // Their placements went with them: the device is empty again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while d.status()["sessions"].as_array().is_some_and(|s| !s.is_empty()) {
        assert!(std::time::Instant::now() < deadline, "sessions did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (_again, devices) = six_ones(&d);
    assert_eq!(devices, [0, 0, 0, 0, 1, 1]);
    drop(d);
    // spread from the config file; alternates islands, the emptiest device first.
    let d = eight_gpus(&format!("placement = \"spread\"\n{quota}"), &[]);
    let (_jobs, devices) = six_ones(&d);
    assert_eq!(devices, [0, 4, 1, 5, 2, 6], "spread");
    drop(d);
    // The daemon's flag wins over the file.
    let d = eight_gpus(&format!("placement = \"spread\"\n{quota}"), &["--placement", "binpack"]);
    let (_jobs, devices) = six_ones(&d);
    assert_eq!(devices, [0, 0, 0, 0, 1, 1], "--placement binpack");
}

#[test]
fn a_tenants_devices_place_every_session_and_a_client_asks_for_fewer_not_more() {
    let d = eight_gpus("[default]\nmemory = \"256MiB\"\ndevices = 2\n", &["--placement", "spread"]);
    let c = Client::connect(&d.socket);
    let Reply::HelloReply { devices, .. } = &c.hello else { unreachable!() };
    let first: Vec<u32> = devices.iter().map(|x| x.ordinal).collect();
    assert_eq!(first, [0, 1], "the tenant's devices = 2, without asking");
    let (_b, asked_more) = placed(&d, 4);
    assert_eq!(asked_more.len(), 2, "clamped to the tenant's 2: {asked_more:?}");
    assert!(asked_more.iter().all(|&x| x >= 4), "spread: the other island: {asked_more:?}");
    let (_c, fewer) = placed(&d, 1);
    assert_eq!(fewer.len(), 1);
}

/// README.md's `gpupool run --gpus 2` line, run exactly as written from the repository root:
/// cuda-python and nvidia-ml-py see the two devices the daemon placed the process on (spread,
/// with device 0 taken: island 1's first two), with their UUIDs and PCI bus ids, in one order.
#[test]
fn readme_gpupool_run_gpus_sees_the_placed_devices_in_cuda_and_nvml() {
    ensure_interposer();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let line = readme.lines().find(|l| l.starts_with("gpupool run --gpus 2 --")).expect("README's --gpus example");
    let words: Vec<&str> = line.split_whitespace().collect();
    let python = root.join(words[words.iter().position(|w| *w == "--").unwrap() + 1]);
    if !python.exists() {
        panic!("{} is missing: run scripts/test once to make the venv", python.display());
    }
    let d = eight_gpus("[default]\nmemory = \"256MiB\"\n", &["--placement", "spread"]);
    let (_holder, taken) = placed(&d, 1);
    assert_eq!(taken, [0]);
    let run = |visible: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpupool"));
        cmd.args(&words[1..]).current_dir(&root).env("GPUPOOL_ENDPOINT", d.endpoint());
        match visible {
            Some(v) => cmd.env("CUDA_VISIBLE_DEVICES", v),
            None => cmd.env_remove("CUDA_VISIBLE_DEVICES"),
        };
        run_checks(
            cmd,
            &format!("placement_view.py under gpupool run --gpus 2, CUDA_VISIBLE_DEVICES {visible:?}"),
            10,
            &d,
        )
    };
    let checks = run(None);
    let doc = d.status();
    let uuid_of = |ordinal: usize| doc["devices"][ordinal]["uuid"].as_str().unwrap().to_string();
    let seen: Vec<(String, String)> = checks
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("VIEW "))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].to_string(), w[2].to_string())
        })
        .collect();
    // The simulator puts device n on bus 0x18 + 0x10 n: devices 4 and 5 on 0x58 and 0x68.
    let expected = vec![(uuid_of(4), "00000000:58:00.0".to_string()), (uuid_of(5), "00000000:68:00.0".to_string())];
    assert_eq!(seen, expected, "{}", checks.stdout);
    let cuda = |out: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix("CUDA "))
            .map(|l| l.split_whitespace().nth(1).unwrap().into())
            .collect()
    };
    assert_eq!(cuda(&checks.stdout), [uuid_of(4), uuid_of(5)]);
    // CUDA_VISIBLE_DEVICES on top of the placement: its indices are the session's (placed
    // again on 4 and 5 once the first run's session is gone and its memset no longer counts in
    // the last second's compute load, which placement weighs); NVML still sees both placed
    // GPUs, as NVIDIA's NVML ignores the variable.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let busy = |doc: &serde_json::Value| {
        doc["sessions"].as_array().map_or(0, Vec::len) > 1
            || doc["devices"].as_array().unwrap().iter().any(|x| x["utilization"].as_f64().unwrap_or(0.0) > 0.0)
    };
    while busy(&d.status()) {
        assert!(std::time::Instant::now() < deadline, "the first run's session did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let checks = run(Some("1"));
    assert_eq!(cuda(&checks.stdout), [uuid_of(5)], "{}", checks.stdout);
    assert_eq!(checks.stdout.lines().filter(|l| l.starts_with("VIEW ")).count(), 2, "{}", checks.stdout);
}

/// README.md's `gpupool run --gpus 3` NVML topology line, run exactly as written: nvidia-ml-py
/// sees the wiring of the three GPUs placed for it (spread, GPU 0 taken: island 1's 4, 5, 6) as
/// its devices 0..2: their PCIe/NUMA levels, and NVLinks to each other while the link to GPU 7,
/// not its own, reads inactive.
#[test]
fn readme_gpupool_run_gpus_answers_nvml_topology_for_the_placed_gpus() {
    ensure_interposer();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("gpupool run --gpus 3 --") && l.ends_with("topology_view.py"))
        .expect("README's NVML topology example");
    let words: Vec<&str> = line.split_whitespace().collect();
    let d = eight_gpus("[default]\nmemory = \"256MiB\"\n", &["--placement", "spread"]);
    let (_holder, taken) = placed(&d, 1);
    assert_eq!(taken, [0]);
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(&words[1..]).current_dir(&root).env("GPUPOOL_ENDPOINT", d.endpoint()).env_remove("CUDA_VISIBLE_DEVICES");
    let checks = run_checks(cmd, "topology_view.py under gpupool run --gpus 3", 6, &d);
    let doc = d.status();
    let ordinal_of = |uuid: &str| {
        doc["devices"].as_array().unwrap().iter().position(|x| x["uuid"] == uuid).expect("a daemon GPU's UUID")
    };
    let lines = |tag: &str| -> Vec<Vec<String>> {
        checks
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix(tag))
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect()
    };
    let gpus: Vec<usize> = lines("GPU ").iter().map(|w| ordinal_of(&w[1])).collect();
    assert_eq!(gpus, [4, 5, 6], "{}", checks.stdout);
    // The simulator's wiring (TOPOLOGY): switches of two, NUMA nodes and NVLink islands of four.
    let level = |a: usize, b: usize| match () {
        _ if a == b => 0,
        _ if a / 2 == b / 2 => 10,
        _ if a / 4 == b / 4 => 40,
        _ => 50,
    };
    let mut want_levels = Vec::new();
    let mut want_links = Vec::new();
    for (i, &a) in gpus.iter().enumerate() {
        for (j, &b) in gpus.iter().enumerate() {
            want_levels.push(vec![i.to_string(), j.to_string(), level(a, b).to_string()]);
        }
        // Device a's link k leads to the k-th other GPU of its island.
        let peers = (a / 4 * 4..a / 4 * 4 + 4).filter(|&p| p != a);
        for (k, p) in peers.enumerate() {
            if let Some(j) = gpus.iter().position(|&g| g == p) {
                want_links.push(vec![i.to_string(), k.to_string(), j.to_string()]);
            }
        }
    }
    assert_eq!(lines("LEVEL "), want_levels, "{}", checks.stdout);
    assert_eq!(lines("LINK "), want_links, "{}", checks.stdout);
    // Within a PCIe switch: 4 and 5 only; within the NUMA node: all three.
    let near: Vec<Vec<String>> = lines("NEAR ").into_iter().filter(|w| w[0] == "0").collect();
    let at = |lv: &str| near.iter().find(|w| w[1] == lv).map(|w| w.get(2).cloned().unwrap_or_default());
    assert_eq!((at("0"), at("10"), at("40")), (Some(String::new()), Some("1".into()), Some("1,2".into())));
}
