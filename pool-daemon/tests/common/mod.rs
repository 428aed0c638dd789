//! Shared by the daemon's end-to-end tests: a real `gpupool daemon` process on the
//! simulator (killed on drop), and a small client built on gpupool_protocol.
#![allow(dead_code)]

use gpupool_protocol::ops::{HostSrc, InlineBytes, KernelParams, StagingRegion};
use gpupool_protocol::transport::Transport;
use gpupool_protocol::transport::shm::{ShmTransport, WaitPolicy};
use gpupool_protocol::{CtxId, DevicePtr, FuncId, Message, PROTOCOL_VERSION, Reply, Request, StreamId};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;

pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
}

pub fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

impl Daemon {
    /// A daemon on two simulated 1 GiB devices; `config` is the quota TOML (None: built in).
    pub fn start(config: Option<&str>) -> Daemon {
        Self::start_with(config, &[])
    }

    pub fn start_with(config: Option<&str>, extra: &[&str]) -> Daemon {
        Self::start_env(config, extra, &[])
    }

    /// As [`Self::start_with`], with `env` set for the daemon last. The simulated NPU (sim-npu,
    /// in the same library directory) is configured with no devices unless `env` gives some
    /// (`GPUPOOL_SIM_NPU_DEVICES`), so only the NPU tests see NPUs.
    pub fn start_env(config: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpupool-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("gpupool.sock");
        if let Some(text) = config {
            std::fs::write(dir.join("quota.toml"), text).unwrap();
        }
        let child = Self::spawn(&dir, &socket, extra, env, false);
        let mut d = Daemon { child, dir, socket };
        d.wait_up();
        d
    }

    fn spawn(dir: &Path, socket: &Path, extra: &[&str], env: &[(&str, &str)], append: bool) -> Child {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
        cmd.arg("daemon").arg("--listen").arg(format!("unix://{}", socket.display()));
        cmd.arg("--driver-dir").arg(gpupool_e2e::sim_libdir());
        let p = dir.join("quota.toml");
        if p.exists() {
            cmd.arg("--config").arg(p);
        }
        cmd.args(extra);
        cmd.env("GPUPOOL_SIM_DEVICES", "2").env("GPUPOOL_SIM_MEMORY", "1GiB").env("GPUPOOL_LOG", "info");
        cmd.env("GPUPOOL_SIM_NPU_DEVICES", "0");
        cmd.envs(env.iter().copied());
        let mut log = std::fs::OpenOptions::new();
        log.create(true).append(append).write(true).truncate(!append);
        cmd.stdout(log.open(dir.join("daemon.out")).unwrap()).stderr(log.open(dir.join("daemon.log")).unwrap());
        cmd.spawn().expect("starting gpupool daemon")
    }

    fn wait_up(&mut self) {
        let t0 = Instant::now();
        let ctl = PathBuf::from(format!("{}.ctl", self.socket.display()));
        while UnixStream::connect(&ctl).is_err() {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("daemon exited {st}: {}", self.log());
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "daemon did not come up: {}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs the daemon and starts it again on the same socket and config, with `extra`
    /// arguments and `env` (its log goes on in the same file).
    pub fn kill_and_restart(&mut self, extra: &[&str], env: &[(&str, &str)]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(&self.dir, &self.socket, extra, env, true);
        self.wait_up();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// What the daemon wrote to its standard output (device printf output of no session would
    /// land there; nothing else writes to it).
    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.out")).unwrap_or_default()
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The status document, read from the control socket directly.
    pub fn status(&self) -> serde_json::Value {
        status_at(&self.socket)
    }

    /// Bytes `tenant` uses on `device`, per the status document.
    pub fn used(&self, tenant: &str, device: u64) -> u64 {
        used_at(&self.socket, tenant, device)
    }

    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Client {
    pub t: ShmTransport,
    next: u64,
    pub hello: Reply,
    pub async_errors: Vec<(u64, u32, String)>,
    /// The daemon's checkpoint notices (`Message::Checkpointed`): the last request each had seen.
    pub checkpoints: Vec<u64>,
}

pub fn hello(name: &str, memory_limit: Option<u64>) -> Request {
    hello_token(name, memory_limit, None)
}

pub fn hello_token(name: &str, memory_limit: Option<u64>, token: Option<&str>) -> Request {
    Request::Hello {
        pid: std::process::id(),
        uid: uid(),
        gid: rustix::process::getgid().as_raw(),
        protocol_version: PROTOCOL_VERSION,
        memory_limit,
        compute_percent: None,
        client_name: name.into(),
        token: token.map(str::to_string),
        gpus: None,
    }
}

impl Client {
    pub fn connect(socket: &Path) -> Client {
        Self::connect_with(socket, None).unwrap_or_else(|e| panic!("hello refused: {e:?}"))
    }

    pub fn connect_with(socket: &Path, memory_limit: Option<u64>) -> Result<Client, Reply> {
        Self::connect_as(socket, memory_limit, None)
    }

    pub fn connect_as(socket: &Path, memory_limit: Option<u64>, token: Option<&str>) -> Result<Client, Reply> {
        Self::connect_hello(socket, hello_token("test", memory_limit, token))
    }

    /// Connects with `hello` as the first frame.
    pub fn connect_hello(socket: &Path, hello: Request) -> Result<Client, Reply> {
        let s = UnixStream::connect(socket).expect("connect");
        let t = ShmTransport::connect(s, WaitPolicy::default()).expect("shm connect");
        let mut c = Client { t, next: 1, hello: Reply::Ok {}, async_errors: Vec::new(), checkpoints: Vec::new() };
        let r = c.call(hello);
        match r {
            Reply::HelloReply { .. } | Reply::Resumed { .. } => {
                c.hello = r;
                Ok(c)
            }
            other => Err(other),
        }
    }

    pub fn call(&mut self, op: Request) -> Reply {
        let id = self.next;
        self.next += 1;
        self.t.send(&Message::Request { id, no_reply: false, op }.encode().unwrap()).expect("send");
        loop {
            let f = self.t.recv(Some(Duration::from_secs(5))).expect("reply");
            match Message::decode(&f).unwrap().0 {
                Message::Reply { id: rid, op } if rid == id => return op,
                Message::AsyncError { id, code, message } => self.async_errors.push((id, code, message)),
                Message::Checkpointed { seen } => {
                    assert!(seen < id, "a checkpoint told of before the reply to request {id} saw request {seen}");
                    self.checkpoints.push(seen)
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// The id the next request will carry.
    pub fn next_id(&self) -> u64 {
        self.next
    }

    pub fn send_async(&mut self, op: Request) {
        let id = self.next;
        self.next += 1;
        self.t.send(&Message::Request { id, no_reply: true, op }.encode().unwrap()).expect("send");
    }

    pub fn ctx(&mut self, device: u32) -> CtxId {
        match self.call(Request::PrimaryCtxRetain { device }) {
            Reply::Context { ctx } => ctx,
            r => panic!("{r:?}"),
        }
    }

    /// Loads [`FILL_PTX`] in `ctx` and packs its parameters to fill words of `buf` with `value`:
    /// the function and the packed parameter buffer for a `LaunchKernel`.
    pub fn fill_kernel(&mut self, ctx: CtxId, buf: DevicePtr, value: u32) -> (FuncId, Vec<u8>) {
        let Reply::Module { module, .. } =
            self.call(Request::ModuleLoad { ctx, image: HostSrc::Inline(InlineBytes(FILL_PTX.into())) })
        else {
            panic!("module load failed")
        };
        let Reply::Function { func, params } = self.call(Request::ModuleGetFunction { module, name: "fill".into() })
        else {
            panic!("no function fill")
        };
        assert_eq!(params.len(), 2);
        let mut packed = vec![0u8; (params[1].offset + params[1].size) as usize];
        packed[params[0].offset as usize..][..8].copy_from_slice(&buf.0.to_le_bytes());
        packed[params[1].offset as usize..][..4].copy_from_slice(&value.to_le_bytes());
        (func, packed)
    }

    /// Launches `func` on one block of 256 threads on the null stream without waiting for a reply
    /// (the shape [`FILL_PTX`]'s `fill` covers: 256 words).
    pub fn launch_one_block(&mut self, func: FuncId, packed: Vec<u8>) {
        self.send_async(one_block_launch(func, packed));
    }

    /// Reads `len` bytes at `src` back through the staging area, a MiB at a time.
    pub fn read_back(&mut self, src: DevicePtr, len: u64) -> Vec<u8> {
        let mut out = vec![0u8; len as usize];
        for off in (0..len).step_by(MIB as usize) {
            let n = MIB.min(len - off);
            let r = self
                .call(Request::MemcpyDtoH { src: DevicePtr(src.0 + off), dst: StagingRegion { offset: 0, len: n } });
            assert_eq!(code(&r), 0, "{r:?}");
            self.t.staging().unwrap().read(0, &mut out[off as usize..(off + n) as usize]).unwrap();
        }
        out
    }

    pub fn alloc(&mut self, ctx: CtxId, bytes: u64) -> Result<DevicePtr, (u32, String)> {
        match self.call(Request::MemAlloc { ctx, bytes }) {
            Reply::MemPtr { ptr } => Ok(ptr),
            Reply::Error { code, message } => Err((code, message)),
            r => panic!("{r:?}"),
        }
    }
}

/// A launch of `func` on one block of 256 threads on the null stream, with `packed` parameters.
pub fn one_block_launch(func: FuncId, packed: Vec<u8>) -> Request {
    Request::LaunchKernel {
        func,
        grid: [1, 1, 1],
        block: [256, 1, 1],
        shared_mem_bytes: 0,
        stream: StreamId::NULL,
        params: KernelParams(packed),
        cooperative: false,
    }
}

/// `fill(p, v)`: thread `tid.x` stores `v` at `p[tid.x]` (32-bit words).
pub const FILL_PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry fill(.param .u64 p, .param .u32 v)\n{\n\
\t.reg .b64 %rd<4>;\n\t.reg .b32 %r<4>;\n\
\tld.param.u64 %rd1, [p];\n\tld.param.u32 %r1, [v];\n\
\tcvta.to.global.u64 %rd2, %rd1;\n\tmov.u32 %r2, %tid.x;\n\
\tmul.wide.u32 %rd3, %r2, 4;\n\tadd.s64 %rd2, %rd2, %rd3;\n\
\tst.global.u32 [%rd2], %r1;\n\tret;\n}\n";

/// The error code of a reply, or 0 for success.
pub fn code(r: &Reply) -> u32 {
    match r {
        Reply::Error { code, .. } => *code,
        _ => 0,
    }
}

pub fn tenant_config(memory: &str) -> String {
    format!("[[tenant]]\nname = \"team\"\nuids = [{}]\nmemory = \"{memory}\"\n", uid())
}

/// The status document of the daemon on `socket`.
pub fn status_at(socket: &Path) -> serde_json::Value {
    use std::io::Read as _;
    let mut s = UnixStream::connect(format!("{}.ctl", socket.display())).expect("control socket");
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Bytes `tenant` uses on `device`, per the status document of the daemon on `socket`.
pub fn used_at(socket: &Path, tenant: &str, device: u64) -> u64 {
    let doc = status_at(socket);
    doc["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == tenant)
        .and_then(|t| t["devices"].as_array().unwrap().iter().find(|d| d["device"] == device))
        .map_or(0, |d| d["used"].as_u64().unwrap())
}

/// libgpupool.so next to the gpupool binary (where `gpupool run` looks), built if missing.
pub fn ensure_interposer() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        if !std::path::PathBuf::from(env!("CARGO_BIN_EXE_gpupool")).with_file_name("libgpupool.so").exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let st = Command::new(cargo).current_dir(root).args(["build", "-p", "gpupool-interpose"]).status().unwrap();
            assert!(st.success(), "building libgpupool.so");
        }
    });
}

/// `gpupool run --endpoint <d> -- <python> tests/python/<script>`: a check script run unmodified
/// under the pool, as a user runs it.
pub fn gpupool_run_script(d: &Daemon, python: &Path, script: &str) -> Command {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &d.endpoint(), "--"]).arg(python).arg(root.join("tests/python").join(script));
    cmd
}

/// What a check script printed: it prints `PASS name` or `FAIL name: why` per check, then
/// `SUMMARY passed/total`.
pub struct Checks {
    pub stdout: String,
    pub stderr: String,
    pub passes: usize,
}

/// Runs `cmd` (with the simulator's environment left to the daemon) and asserts the check script
/// passed: exit 0, no FAIL line, at least `at_least` checks and a `SUMMARY n/n` counting them all.
/// A failure shows the failures, both streams and the daemon's log.
pub fn run_checks(cmd: Command, what: &str, at_least: usize, d: &Daemon) -> Checks {
    let out = gpupool_e2e::output_with_sim_env(cmd, &[], Duration::from_secs(300))
        .unwrap_or_else(|| panic!("{what} did not finish within 300 s"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let passes = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    let summary = stdout.lines().find(|l| l.starts_with("SUMMARY "));
    assert!(
        out.status.success()
            && fails.is_empty()
            && passes >= at_least
            && summary == Some(&format!("SUMMARY {passes}/{passes}")[..]),
        "{what}: {} ({passes} passed)\n--- failures ---\n{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- daemon ---\n{}",
        out.status,
        fails.join("\n"),
        d.log()
    );
    Checks { stdout, stderr, passes }
}
