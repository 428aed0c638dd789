//! Containers in the pool (issue 18), as root, with Debian's runc and podman: the C client
//! (tests/c/container_client.c) in a bundle whose config.json names `gpupool oci-hook`, with
//! nothing in its environment, is held to its annotated quota and sees it through NVML; two
//! containers at once get their own quotas; SIGKILLed containers leave nothing in the daemon
//! after poststop; nothing inside a container reaches another tenant (a token, another
//! container's socket path, a forged hello); podman with the generated CDI spec, run with the
//! README's lines as written. A missing runc or podman is a failure (scripts/test installs them).

mod common;

use common::{Client, Daemon, MIB};
use gpupool_e2e::containers::{self as ct, Spec};
use gpupool_protocol::Reply;
use serde_json::Value;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const ALPHA_TOKEN: &str = "alpha-container-secret";
const BETA_TOKEN: &str = "beta-container-secret";
/// CUDA_ERROR_NOT_PERMITTED.
const NOT_PERMITTED: u32 = 800;

fn config() -> String {
    format!(
        "[[tenant]]\nname = \"alpha\"\nmemory = \"512MiB\"\ntoken_sha256 = \"{}\"\n\
         [[tenant]]\nname = \"beta\"\nmemory = \"256MiB\"\ntoken_sha256 = \"{}\"\n",
        gpupool_quota::hash_token(ALPHA_TOKEN),
        gpupool_quota::hash_token(BETA_TOKEN)
    )
}

fn client_program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gpupool-containers-bin-{}", std::process::id()));
        gpupool_e2e::compile_c("container_client", &dir)
    })
}

fn gpupool() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpupool"))
}

/// A daemon (two simulated 1 GiB devices, tenants alpha 512 MiB and beta 256 MiB) and the
/// bundles of its containers.
struct Site {
    d: Daemon,
}

/// A container started with `runc run`; deleted (forcibly) on drop, so a failed test leaves none.
struct Running {
    id: String,
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new(ct::require_tool("runc")).args(["delete", "--force", &self.id]).output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn line(&self, what: &str, d: &Daemon) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("container {} printed no line ({what}); daemon:\n{}", self.id, d.log()))
    }

    /// SIGKILL to the container's process, then `runc run`'s exit (it runs poststop first).
    fn kill(mut self) -> std::process::ExitStatus {
        let out = Command::new(ct::require_tool("runc")).args(["kill", &self.id, "KILL"]).output().unwrap();
        assert!(out.status.success(), "runc kill: {}", gpupool_e2e::output_text(&out));
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "runc run did not return after SIGKILL");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Site {
    fn new() -> Site {
        common::ensure_interposer();
        ct::require_tool("runc");
        Site { d: Daemon::start(Some(&config())) }
    }

    /// A bundle `name` running the client with `args`, annotated, with the pool's hooks.
    fn bundle(
        &self,
        name: &str,
        args: &[&str],
        env: &[String],
        annotations: &[(&'static str, &str)],
    ) -> (PathBuf, String) {
        self.bundle_of(client_program(), name, args, env, annotations)
    }

    /// As [`Site::bundle`], running `program` (as `/app/<its name>`).
    fn bundle_of(
        &self,
        program: &Path,
        name: &str,
        args: &[&str],
        env: &[String],
        annotations: &[(&'static str, &str)],
    ) -> (PathBuf, String) {
        let dir = self.d.dir.join("bundles").join(name);
        ct::rootfs(&dir, program);
        let app = format!("/app/{}", program.file_name().unwrap().to_string_lossy());
        let spec = Spec {
            args: std::iter::once(app.as_str()).chain(args.iter().copied()).map(String::from).collect(),
            env: env.to_vec(),
            annotations: annotations.iter().map(|(k, v)| (*k, v.to_string())).collect(),
            hooks: Some(ct::pool_hooks(&gpupool(), &self.d.endpoint(), &self.d.dir.join("lib"))),
            binds: Vec::new(),
        };
        ct::write_config(&dir, &spec);
        // The daemon's directory is unique to this test; the process id alone is not, and
        // runc ids are global: two tests running at once must not both start a container "a".
        (dir, format!("{}-{name}", self.d.dir.file_name().unwrap().to_string_lossy()))
    }

    /// Runs a container to its end.
    fn run(&self, name: &str, args: &[&str], env: &[String], annotations: &[(&'static str, &str)]) -> Output {
        let (dir, id) = self.bundle(name, args, env, annotations);
        self.run_bundle(&dir, &id)
    }

    fn run_bundle(&self, dir: &Path, id: &str) -> Output {
        let r = self.start_bundle(dir, id);
        let t0 = Instant::now();
        let mut r = r;
        loop {
            if r.child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(120), "container {id} did not finish: {}", self.d.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = r.child.wait().unwrap();
        let stdout: Vec<String> = r.lines.try_iter().collect();
        let mut stderr = String::new();
        if let Some(mut e) = r.child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
        }
        Output { status, stdout: stdout.join("\n").into_bytes(), stderr: stderr.into_bytes() }
    }

    fn start(&self, name: &str, args: &[&str], annotations: &[(&'static str, &str)]) -> Running {
        let (dir, id) = self.bundle(name, args, &[], annotations);
        self.start_bundle(&dir, &id)
    }

    fn start_bundle(&self, dir: &Path, id: &str) -> Running {
        let mut child =
            ct::runc_run(dir, id).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Running { id: id.to_string(), child, lines }
    }

    /// The container's endpoint socket on the host.
    fn socket_of(&self, id: &str) -> PathBuf {
        self.d.dir.join("containers").join(format!("{id}.sock"))
    }

    /// Sessions that came through container endpoints.
    fn container_sessions(&self) -> Vec<Value> {
        let doc = self.d.status();
        doc["sessions"].as_array().unwrap().iter().filter(|s| !s["container"].is_null()).cloned().collect()
    }

    /// Nothing of any container left: no session, no memory, no endpoint socket.
    fn assert_nothing_left(&self) {
        assert!(self.container_sessions().is_empty(), "{:#}", self.d.status());
        for t in ["alpha", "beta"] {
            for dev in 0..2 {
                assert_eq!(self.d.used(t, dev), 0, "{t} on device {dev}: {:#}", self.d.status());
            }
        }
        let left: Vec<_> = std::fs::read_dir(self.d.dir.join("containers"))
            .map(|r| r.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "endpoint sockets left: {left:?}");
    }
}

/// `key=value` pairs of the client's result line.
fn fields(line: &str) -> std::collections::HashMap<String, String> {
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
}

/// The client's result line: the quota it saw (CUDA and NVML), what it could allocate, which
/// library the loader gave it for libcuda.so.1.
fn assert_quota(out_line: &str, bytes: u64, what: &str, d: &Daemon) {
    let f = fields(out_line);
    let want = bytes.to_string();
    assert_eq!(f.get("total"), Some(&want), "{what}: {out_line}\n{}", d.log());
    assert_eq!(f.get("nvml_total"), Some(&want), "{what}: {out_line}");
    assert_eq!(f.get("allocated"), Some(&want), "{what}: {out_line}");
    assert_eq!(f.get("oom").map(String::as_str), Some("CUDA_ERROR_OUT_OF_MEMORY"), "{what}: {out_line}");
    assert_eq!(f.get("libcuda").map(String::as_str), Some("/opt/gpupool/lib/libgpupool.so"), "{what}: {out_line}");
}

#[test]
fn a_runc_container_with_the_hook_is_held_to_its_annotated_quota_with_nothing_in_its_environment() {
    let site = Site::new();
    let alpha = [("gpupool.io/tenant", "alpha"), ("gpupool.io/memory", "128MiB")];
    let out = site.run("quota", &["quota"], &[], &alpha);
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), site.d.log());
    let (dir, _) = site.bundle("quota", &["quota"], &[], &alpha);
    let config: Value = serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["process"]["env"], serde_json::json!([]), "the container's environment is empty");
    assert_quota(&String::from_utf8_lossy(&out.stdout), 128 * MIB, "alpha at 128 MiB", &site.d);
    assert!(site.d.log().contains("tenant=alpha container=Some(\"gpupool-test-"), "{}", site.d.log());

    // RTLD_DEEPBIND on the vendor soname: the container's only libcuda.so.1 is the pool's.
    let out = site.run("deepbind", &["deepbind"], &[], &alpha);
    assert!(out.status.success(), "{}", gpupool_e2e::output_text(&out));
    assert_quota(&String::from_utf8_lossy(&out.stdout), 128 * MIB, "RTLD_DEEPBIND", &site.d);

    // gpupool.io/devices: device 0 not given to the container is visible with no memory.
    let only_1 = [("gpupool.io/tenant", "alpha"), ("gpupool.io/memory", "128MiB"), ("gpupool.io/devices", "1")];
    let out = site.run("devices", &["quota"], &[], &only_1);
    let f = fields(&String::from_utf8_lossy(&out.stdout));
    assert_eq!((f.get("total"), f.get("allocated")), (Some(&"0".to_string()), Some(&"0".to_string())), "{out:?}");

    // An unknown tenant: the hook fails, so the runtime does not start the container.
    // A program linked against libcuda.so.1 (DT_NEEDED): found before main through the
    // container's linker cache, which no preload or dlopen hook could do.
    let linked = client_program().with_file_name("linked_client");
    let sim = gpupool_e2e::sim_libdir().display().to_string();
    gpupool_e2e::compile_c_into("linked_client.c", &linked, &["-L", &sim, "-l:libcuda.so.1"]);
    let (dir, id) = site.bundle_of(&linked, "linked", &[], &[], &alpha);
    let out = site.run_bundle(&dir, &id);
    assert!(out.status.success(), "{}\n{}", gpupool_e2e::output_text(&out), site.d.log());
    let f = fields(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(f.get("total"), Some(&(128 * MIB).to_string()), "{out:?}");
    assert_eq!(f.get("libcuda").map(String::as_str), Some("/opt/gpupool/lib/libgpupool.so"), "{out:?}");

    let out = site.run("unknown", &["quota"], &[], &[("gpupool.io/tenant", "nobody")]);
    assert!(!out.status.success(), "{}", gpupool_e2e::output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown tenant `nobody`"),
        "{}",
        gpupool_e2e::output_text(&out)
    );
    site.assert_nothing_left();
}

#[test]
fn two_containers_get_their_own_quotas_at_once_and_leave_nothing_after_sigkill() {
    let site = Site::new();
    let a = site.start("a", &["quota-hold"], &[("gpupool.io/tenant", "alpha"), ("gpupool.io/memory", "128MiB")]);
    // Wider than beta's 256 MiB: clamped, never widened.
    let b = site.start(
        "b",
        &["quota-hold"],
        &[("gpupool.io/tenant", "beta"), ("gpupool.io/memory", "1GiB"), ("gpupool.io/compute", "50")],
    );
    assert_quota(&a.line("a's quota", &site.d), 128 * MIB, "alpha at 128 MiB", &site.d);
    assert_quota(&b.line("b's quota", &site.d), 256 * MIB, "beta asking 1 GiB of its 256 MiB", &site.d);
    // Both alive, each holding its whole quota, at the same time.
    assert_eq!(site.d.used("alpha", 0), 128 * MIB);
    assert_eq!(site.d.used("beta", 0), 256 * MIB);
    let sessions = site.container_sessions();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    for (r, tenant) in [(&a, "alpha"), (&b, "beta")] {
        assert!(sessions.iter().any(|s| s["container"] == r.id.as_str() && s["tenant"] == tenant), "{sessions:?}");
    }
    let log = site.d.log();
    let b_start = log.lines().find(|l| l.contains("session start") && l.contains(&format!("\"{}\"", b.id))).unwrap();
    assert!(b_start.contains("compute=50"), "{b_start}");

    let (a_id, b_id) = (a.id.clone(), b.id.clone());
    let st = a.kill();
    assert!(!st.success());
    // Poststop of a has run: a's sessions and memory are gone, b's are untouched.
    assert_eq!(site.d.used("alpha", 0), 0, "{}", site.d.log());
    assert_eq!(site.d.used("beta", 0), 256 * MIB);
    assert!(!site.socket_of(&a_id).exists());
    b.kill();
    site.assert_nothing_left();
    let log = site.d.log();
    for id in [a_id, b_id] {
        assert!(log.contains(&format!("container endpoint removed container={id}")), "{log}");
    }
}

#[test]
fn nothing_inside_a_container_reaches_another_tenant() {
    let site = Site::new();
    let a = site.start("a", &["quota-hold"], &[("gpupool.io/tenant", "alpha"), ("gpupool.io/memory", "128MiB")]);
    let b = site.start("b", &["quota-hold"], &[("gpupool.io/tenant", "beta"), ("gpupool.io/memory", "64MiB")]);
    a.line("a's quota", &site.d);
    b.line("b's quota", &site.d);
    let beta = [("gpupool.io/tenant", "beta"), ("gpupool.io/memory", "64MiB")];

    // Alpha's token from a beta container: refused, and the daemon says why.
    let out = site.run("token", &["quota"], &[format!("GPUPOOL_TOKEN={ALPHA_TOKEN}")], &beta);
    assert_eq!(out.status.code(), Some(3), "{}", gpupool_e2e::output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("error p_cuInit(0)"),
        "{}",
        gpupool_e2e::output_text(&out)
    );
    assert!(site.d.log().contains("a token cannot name another tenant"), "{}", site.d.log());

    // Container a's socket by its host path: not in this container's filesystem.
    let other = format!("GPUPOOL_ENDPOINT=unix://{}", site.socket_of(&a.id).display());
    let out = site.run("path", &["quota"], &[other], &beta);
    assert_eq!(out.status.code(), Some(3), "{}", gpupool_e2e::output_text(&out));

    // A hello forged by hand on b's socket (what any program inside could send): alpha's token
    // is refused; without it, b's socket gives beta at b's 64 MiB whatever the hello asks.
    let b_socket = site.socket_of(&b.id);
    match Client::connect_as(&b_socket, None, Some(ALPHA_TOKEN)) {
        Err(Reply::Error { code, .. }) => assert_eq!(code, NOT_PERMITTED),
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("alpha's token opened a session on beta's container socket"),
    }
    let c = Client::connect_as(&b_socket, Some(1 << 30), None).expect("a session on b's socket");
    let Reply::HelloReply { tenant, devices, .. } = &c.hello else { panic!("{:?}", c.hello) };
    assert_eq!(tenant, "beta");
    assert_eq!(devices[0].total_memory, 64 * MIB);
    drop(c);

    // Only root manages endpoints: another uid cannot remove b's.
    let state = format!("{{\"ociVersion\":\"1.0.2\",\"id\":\"{}\",\"status\":\"stopped\",\"bundle\":\"/\"}}", b.id);
    let mut hook = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(gpupool())
        .args(["oci-hook", "poststop", "--endpoint", &site.d.endpoint()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut hook.stdin.take().unwrap(), state.as_bytes()).unwrap();
    let out = hook.wait_with_output().unwrap();
    assert!(!out.status.success(), "{}", gpupool_e2e::output_text(&out));
    assert!(b_socket.exists(), "b's endpoint survives");
    assert_eq!(site.d.used("beta", 0), 64 * MIB);

    a.kill();
    b.kill();
    site.assert_nothing_left();
}

/// The README's podman lines, as written, in a directory holding `rootfs/` with the client as
/// `/app/cuda-job`, against a daemon on the default socket.
#[test]
fn podman_with_the_generated_cdi_spec_runs_the_readme_lines() {
    common::ensure_interposer();
    ct::require_tool("podman");
    ct::require_tool("runc");
    let d = Daemon::start_with(Some(&config()), &["--listen", "unix:///run/gpupool/gpupool.sock"]);
    let cwd = d.dir.join("podman");
    std::fs::create_dir_all(&cwd).unwrap();
    let _rootfs = ct::HostUsrRootfs::new(&cwd, client_program(), "cuda-job");
    let path = format!("{}:{}", gpupool().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let shell = |line: &str| {
        let mut c = Command::new("sh");
        c.args(["-c", line]).current_dir(&cwd).env("PATH", &path);
        for k in ["GPUPOOL_ENDPOINT", "GPUPOOL_TOKEN", "LD_PRELOAD", "LD_LIBRARY_PATH"] {
            c.env_remove(k);
        }
        c.output().unwrap()
    };
    let generate = gpupool_e2e::readme::command("gpupool cdi generate");
    let out = shell(&generate);
    assert!(out.status.success(), "{generate}: {}", gpupool_e2e::output_text(&out));
    let spec: Value = serde_json::from_slice(&std::fs::read("/var/run/cdi/gpupool.json").unwrap()).unwrap();
    assert_eq!(spec["kind"], "gpupool.io/gpu");
    let names: Vec<&str> = spec["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["0", "1", "all"]);
    // The README's line writes where podman reads specs, and the spec names the hook in CDI mode
    // (the devices come from the CDI variables, not an annotation).
    assert!(generate.contains("--output /var/run/cdi/gpupool.json"), "{generate}");
    let hooks = spec["containerEdits"]["hooks"].as_array().unwrap();
    let create: Vec<&str> = hooks
        .iter()
        .find(|h| h["hookName"] == "createRuntime")
        .map(|h| h["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect())
        .unwrap_or_default();
    assert_eq!(create.get(1..4), Some(&["oci-hook", "create-runtime", "--cdi"][..]), "{create:?}");
    assert!(hooks.iter().any(|h| h["hookName"] == "poststop"), "{hooks:?}");

    let run = gpupool_e2e::readme::command("podman run");
    let out = shell(&run);
    let _ = std::fs::remove_file("/var/run/cdi/gpupool.json");
    assert!(out.status.success(), "{run}: {}\n{}", gpupool_e2e::output_text(&out), d.log());
    assert_quota(&String::from_utf8_lossy(&out.stdout), 256 * MIB, "podman, alpha at 256 MiB", &d);
    // Podman's cleanup (poststop) runs from conmon as the container exits; wait for it.
    let t0 = Instant::now();
    while !d.log().contains("container endpoint removed") {
        assert!(t0.elapsed() < Duration::from_secs(30), "poststop never removed the endpoint: {}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let doc = d.status();
    assert!(doc["sessions"].as_array().unwrap().is_empty(), "{doc:#}");
    assert_eq!(d.used("alpha", 0), 0);
    // The device asked for is the only one the container could allocate on.
    let log = d.log();
    assert!(log.contains("devices: {1: 0}"), "{log}");
}
