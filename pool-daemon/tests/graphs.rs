//! Stream capture and CUDA graphs through the pool (pool-daemon/src/daemon/graph.rs): an unmodified C
//! program (tests/c/graph_client.c) captures kernels, copies, memsets and an event record into a graph
//! and replays it 1,000 times under `gpupool run`, matching the eager run and the CPU; and, on the
//! wire, graphs are ids of one session (another session's are refused and never reach the backend),
//! a copy through the daemon's staging memory cannot be captured, a memcpy node copies only the session's
//! memory, and a session's graphs go with it.

mod common;

use common::{Client, Daemon, code, ensure_interposer};
use gpupool_protocol::ops::{Copy3D, Copy3DEnd, GraphExecId, GraphId, HostSrc, InlineBytes, KernelParams, MemSpace};
use gpupool_protocol::{Reply, Request, StreamId};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const INVALID_VALUE: u32 = 1;
const INVALID_HANDLE: u32 = 400;
const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
const STREAM_CAPTURE_INVALIDATED: u32 = 901;

/// Runs tests/c/NAME.c (compiled here) under `gpupool run --endpoint D RUN_ARGS -- EXE PROG_ARGS`;
/// it must exit 0 (else the failure, with its output and the daemon's log). Answers its stdout.
fn run_c_client(d: &Daemon, name: &str, run_args: &[&str], prog_args: &[&str]) -> String {
    ensure_interposer();
    let exe = gpupool_e2e::compile_c(name, &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graphs"));
    let out = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["run", "--endpoint", &d.endpoint()])
        .args(run_args)
        .arg("--")
        .arg(&exe)
        .args(prog_args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} failed ({}):\n{stdout}\n{stderr}\n{}", out.status, d.log());
    stdout
}

/// The number of "ok" lines, and that the program finished.
fn ok_lines(stdout: &str) -> usize {
    assert!(stdout.ends_with("done\n"), "{stdout}");
    stdout.lines().filter(|l| l.starts_with("ok ")).count()
}

#[test]
fn a_captured_graph_replayed_a_thousand_times_matches_the_eager_run() {
    let d = Daemon::start(None);
    let stdout = run_c_client(&d, "graph_client", &[], &["--replays", "1000"]);
    for check in [
        "capture records without running",
        "graph replays equal the eager run and the CPU",
        "a captured kernel node's parameters read back and changed: the new instantiation runs them",
        "cuGraphExecGetFlags, and cuGraphExecUpdate's errorNode for a captured graph",
        "a page-locked buffer freed under a graph stays readable by it",
        "captured graph memory is nodes, counted while held and returned by trim",
        "the legacy stream cannot be captured",
        "a pageable copy invalidates the capture",
        "cuMemAlloc during a global capture is refused and invalidates it",
        "cuMemAlloc during a relaxed capture is allowed",
        "cuThreadExchangeStreamCaptureMode: relaxed, the thread allocates during its global capture",
        "empty graphs launch",
        "the stream works after captures",
        "forged handles are refused",
        "graphs built node by node: dependencies, child graph, set params, update, clone, dot",
        "memcpy nodes: page-locked host to device, 2D device to device, device to page-locked host",
        "host functions in a capture run in order, once per replay, off the main thread",
        "cuStreamAddCallback on a capturing stream is refused and invalidates the capture",
        "host nodes: parameters read back and changed on the graph and on an instantiated graph",
        "a forked child runs host nodes of its own; the parent's still run",
        "graphs destroyed once",
    ] {
        assert!(stdout.contains(&format!("ok {check}\n")), "missing 'ok {check}':\n{stdout}");
    }
    assert!(stdout.contains("replays 1000 "), "{stdout}");
    assert!(stdout.contains("host replays 100\n"), "{stdout}");
    assert!(stdout.ends_with("done\n"), "{stdout}");
    // Graph launches went through the compute scheduler: 1,000 of them, plus 1,000 eager rounds of two
    // kernels, and the two empty graphs.
    let st = d.status();
    let c = &st["tenants"][0]["devices"][0]["compute"];
    assert!(c["kernels"].as_u64().unwrap() >= 3000, "{st}");
}

/// Graph memory nodes (pool-daemon/src/daemon/graph_mem.rs) under a 64 MiB quota: tests/c/graph_mem_client.c
/// checks the addresses, the memory counted from instantiation, kept, reused and trimmed, CUDA's rules, and
/// that an instantiation past the quota is CUDA_ERROR_OUT_OF_MEMORY; the refusal is in the daemon's log and the
/// ledger is back to 0 after the program exits.
#[test]
fn a_graph_with_a_memory_node_is_held_to_the_quota() {
    let d = Daemon::start(None);
    let stdout = run_c_client(&d, "graph_mem_client", &["--memory", "64MiB"], &[]);
    for check in [
        "allocation nodes: the address when added, the parameters back",
        "graph memory is counted from instantiation and the graph runs in it",
        "graph memory is kept after its instantiation, reused, and trimmed back; CUDA's rules",
        "a graph with a memory node is held to the quota",
        "an allocation not freed in its graph is freed by cuMemFree and cuMemFreeAsync",
        "capture into a graph with a memory node",
        "captured stream-ordered allocation: nodes, the graph's memory, trimmed back",
    ] {
        assert!(stdout.contains(&format!("ok {check}\n")), "missing 'ok {check}':\n{stdout}");
    }
    assert!(stdout.ends_with("done\n"), "{stdout}");
    let log = d.log();
    assert!(
        log.contains("GraphInstantiate") && log.contains("its allocation node of 50331648 bytes"),
        "no log line for the refused instantiation:\n{log}"
    );
    let t0 = Instant::now();
    while d.used("default", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the ledger is not back to 0: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Cross-stream capture through the pool (tests/python/capture_fork_checks.py, cuda-bindings under
/// `gpupool run`, the same script tests/python/test_graphs.py runs on the simulator directly): a
/// fork/join graph of two streams replays through both, a stream-ordered allocation on the forked
/// stream is an allocation node, an unjoined fork, an end on the forked stream, a wait across
/// captures or on an event from outside and a captured event queried get CUDA's capture errors. The
/// ledger is back to 0 after.
#[test]
fn cross_stream_capture_forks_and_joins_through_the_pool() {
    run_checks_under_a_64mib_tenant("capture_fork_checks", 12);
}

/// tests/python/`name`.py under `gpupool run` as a tenant with a 64 MiB quota: it passes at least
/// `at_least` checks, and the tenant's ledger is back to 0 after it.
fn run_checks_under_a_64mib_tenant(name: &str, at_least: usize) {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let d = Daemon::start(Some(&common::tenant_config("64MiB")));
    let cmd = common::gpupool_run_script(&d, &python, &format!("{name}.py"));
    common::run_checks(cmd, name, at_least, &d);
    let t0 = Instant::now();
    while d.used("team", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "memory still held after exit: {}", d.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The runtime's graph memory calls (tests/python/runtime_graph_checks.py, ctypes on libcudart.so.12) under a
/// 64 MiB tenant quota: cudaGraphAddMemAllocNode/FreeNode and their parameters, the memory counted from
/// cudaGraphInstantiate, kept and trimmed, and cudaErrorMemoryAllocation past the quota; the ledger is 0 after.
/// Also the runtime's host nodes and a captured cudaLaunchHostFunc (the function runs in the client).
/// And the runtime's capture into an existing graph with its dependencies read and set, its memcpy nodes, and
/// memset and memcpy node parameters changed on the graph and on an instantiated graph.
#[test]
fn runtime_graph_memory_nodes_are_held_to_the_quota() {
    run_checks_under_a_64mib_tenant("runtime_graph_checks", 18);
}

/// The runtime's graphs built and edited node by node (tests/python/runtime_graph_edit_checks.py; ctypes on
/// libcudart.so.12): memset, child-graph and event nodes, dependencies added and removed in CUDA 12's form,
/// nodes destroyed, clones searched, a memcpy node's parameters, edges and dependencies read back, an exec
/// updated (cudaGraphExecUpdate, and its refusals); each checked on the data a launch
/// writes, the node counts or the types.
#[test]
fn runtime_graphs_built_and_edited_node_by_node() {
    runtime_graph_edit_checks(false, false);
}

/// The same through libcudart.so.13, whose cudaGraphAdd/RemoveDependencies take edge data.
#[test]
fn runtime_13_graphs_built_and_edited_node_by_node() {
    runtime_graph_edit_checks(true, false);
}

/// The same checks with NVIDIA's own libcudart.so.12 and .13 from the wheels (`gpupool run --cudart
/// nvidia`): NVIDIA's runtime builds and edits the graphs through the pool's driver calls.
#[test]
fn nvidia_runtimes_build_and_edit_graphs_through_the_pool() {
    runtime_graph_edit_checks(false, true);
    runtime_graph_edit_checks(true, true);
}

fn runtime_graph_edit_checks(cudart13: bool, nvidia: bool) {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let d = Daemon::start(None);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpupool"));
    cmd.args(["run", "--endpoint", &d.endpoint()]);
    if nvidia {
        let wheel = if cudart13 { gpupool_e2e::cudart13() } else { gpupool_e2e::cudart12() };
        cmd.args(["--cudart", "nvidia"]).env("LD_LIBRARY_PATH", wheel.parent().unwrap());
    }
    cmd.arg("--").arg(&python).arg(root.join("tests/python/runtime_graph_edit_checks.py"));
    if cudart13 {
        cmd.arg("--cudart13");
    }
    common::run_checks(cmd, "runtime_graph_edit_checks", 13, &d);
}

/// Capture into an existing graph and a capture's dependencies (pool-daemon/src/daemon/graph_capture.rs):
/// tests/c/graph_capture_client.c under gpupool run captures after an explicit node, reads the capture's
/// graph and dependencies with cuStreamGetCaptureInfo_v2, sets and adds dependencies, and the replay gives
/// the CPU's result.
#[test]
fn capture_into_a_graph_with_updated_dependencies_replays_right() {
    let d = Daemon::start(None);
    let stdout = run_c_client(&d, "graph_capture_client", &[], &[]);
    assert_eq!(ok_lines(&stdout), 5, "{stdout}");
}

/// Memset and memcpy node parameters (pool-daemon/src/daemon/graph_params.rs): tests/c/graph_params_client.c
/// under gpupool run reads them back, changes them on the graph (an exec made before keeps its nodes) and on
/// one instantiated graph, and relaunches with the new results; bad changes are INVALID_VALUE. The generic
/// node calls (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams) and event nodes' events too.
#[test]
fn memset_and_memcpy_node_parameters_change_through_the_pool() {
    let d = Daemon::start(None);
    let stdout = run_c_client(&d, "graph_params_client", &[], &[]);
    assert_eq!(ok_lines(&stdout), 11, "{stdout}");
}

/// Conditional graph nodes through the pool: tests/c/graph_cond_client.c under gpupool run (WHILE, IF/ELSE
/// and SWITCH nodes, their body graphs made by the daemon's backend, values set by the program's kernels).
#[test]
fn conditional_nodes_run_through_the_pool() {
    let d = Daemon::start(None);
    let stdout = run_c_client(&d, "graph_cond_client", &[], &[]);
    assert_eq!(ok_lines(&stdout), 3, "{stdout}");
}

/// On the wire: another session cannot change or read a memset or memcpy node (its id names nothing there),
/// and a node cannot be set to another session's memory; the owner's change is taken and read back.
#[test]
fn node_parameters_belong_to_their_session() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let mine = c.alloc(ctx, 4096).unwrap();
    let mut other = Client::connect(&d.socket);
    let octx = other.ctx(0);
    let theirs = other.alloc(octx, 4096).unwrap();
    let set = |dst| gpupool_protocol::ops::Memset {
        dst,
        value: gpupool_protocol::ops::MemsetValue::U8(0x11),
        width: 4096,
        height: 1,
        pitch: 0,
    };
    let Reply::Graph { graph } = c.call(Request::GraphCreate { ctx, flags: 0 }) else { panic!() };
    let Reply::GraphNode { node } = c.call(Request::GraphAddMemsetNode { graph, deps: vec![], set: set(mine) }) else {
        panic!("{}", d.log())
    };
    let Reply::GraphNode { node: copy } =
        c.call(Request::GraphAddMemcpyNode { graph, deps: vec![node], copy: d2d(mine, MemSpace::Device(mine), 256) })
    else {
        panic!("{}", d.log())
    };
    let exec = instantiate(&mut c, graph);
    let Reply::Graph { graph: og } = other.call(Request::GraphCreate { ctx: octx, flags: 0 }) else { panic!() };
    let oexec = instantiate(&mut other, og);
    assert_eq!(code(&other.call(Request::GraphMemsetNodeSetParams { node, set: set(theirs) })), INVALID_VALUE);
    let req = Request::GraphExecMemsetNodeSetParams { exec: oexec, node, set: set(theirs) };
    assert_eq!(code(&other.call(req)), INVALID_VALUE);
    let req = Request::GraphMemcpyNodeSetParams { node: copy, copy: d2d(theirs, MemSpace::Device(theirs), 256) };
    assert_eq!(code(&other.call(req)), INVALID_VALUE);
    assert_eq!(code(&c.call(Request::GraphMemsetNodeSetParams { node, set: set(theirs) })), INVALID_VALUE);
    let req =
        Request::GraphExecMemcpyNodeSetParams { exec, node: copy, copy: d2d(mine, MemSpace::Device(theirs), 256) };
    assert_eq!(code(&c.call(req)), INVALID_VALUE);
    assert_eq!(code(&c.call(Request::GraphMemsetNodeSetParams { node, set: set(mine) })), 0, "{}", d.log());
    assert_eq!(code(&c.call(Request::GraphExecMemsetNodeSetParams { exec, node, set: set(mine) })), 0);
    // Reading them back: the owner gets the backend's parameters, another session nothing.
    assert_eq!(code(&other.call(Request::GraphMemsetNodeGetParams { node })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphMemcpyNodeGetParams { node: copy })), INVALID_VALUE);
    let Reply::MemsetParams { set: got } = c.call(Request::GraphMemsetNodeGetParams { node }) else {
        panic!("{}", d.log())
    };
    assert_eq!((got.dst, got.value, got.width), (mine, gpupool_protocol::ops::MemsetValue::U8(0x11), 4096));
    let Reply::CopyParams { copy: got } = c.call(Request::GraphMemcpyNodeGetParams { node: copy }) else {
        panic!("{}", d.log())
    };
    assert_eq!((got.src.space, got.dst.space, got.width_bytes), (MemSpace::Device(mine), MemSpace::Device(mine), 256));
}

/// On the wire: a capture into a graph takes only the session's own graph and nodes; another session's graph,
/// or a node of another graph as a dependency, is INVALID_VALUE and never reaches the backend.
#[test]
fn capture_graphs_and_dependencies_belong_to_their_session() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let Reply::Stream { stream } = c.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    let Reply::Graph { graph } = c.call(Request::GraphCreate { ctx, flags: 0 }) else { panic!() };
    let Reply::GraphNode { node } = c.call(Request::GraphAddEmptyNode { graph, deps: vec![] }) else { panic!() };
    let Reply::Graph { graph: g2 } = c.call(Request::GraphCreate { ctx, flags: 0 }) else { panic!() };
    let Reply::GraphNode { node: n2 } = c.call(Request::GraphAddEmptyNode { graph: g2, deps: vec![] }) else {
        panic!()
    };
    // Another session holds a context and a stream only: the graph's and nodes' ids name nothing of its own.
    let mut other = Client::connect(&d.socket);
    let octx = other.ctx(0);
    let Reply::Stream { stream: os } = other.call(Request::StreamCreate { ctx: octx, flags: 0, priority: 0 }) else {
        panic!()
    };
    let to_graph = |stream, graph, deps| Request::StreamBeginCaptureToGraph { stream, graph, deps, mode: 2 };
    assert_eq!(code(&other.call(to_graph(os, g2, vec![]))), INVALID_VALUE, "another session's graph");
    assert_eq!(code(&c.call(to_graph(stream, graph, vec![n2]))), INVALID_VALUE, "another graph's node");
    assert_eq!(code(&c.call(Request::StreamUpdateCaptureDependencies { stream, deps: vec![node], set: true })), 401);
    assert_eq!(code(&c.call(to_graph(stream, graph, vec![node]))), 0, "{}", d.log());
    let Reply::CaptureGraph { status: 1, id, graph: cg, deps } = c.call(Request::StreamCaptureGraph { stream }) else {
        panic!("{}", d.log())
    };
    assert!(id != 0 && cg == graph && deps == [node], "{id} {cg:?} {deps:?}");
    let update = |stream, deps| Request::StreamUpdateCaptureDependencies { stream, deps, set: false };
    assert_eq!(code(&c.call(update(stream, vec![n2]))), INVALID_VALUE);
    assert_eq!(code(&other.call(update(os, vec![node]))), 401, "the other session's stream is not capturing");
    let Reply::CaptureGraph { status: 0, .. } = other.call(Request::StreamCaptureGraph { stream: os }) else {
        panic!()
    };
    let Reply::Graph { graph: ended } = c.call(Request::StreamEndCapture { stream }) else { panic!("{}", d.log()) };
    assert_eq!(ended, graph, "the capture ends in the graph it captured into");
}

/// On the wire: graph memory belongs to its session. Another session cannot free a node's address, free it
/// in a graph of its own, or trim it away; the owner's memory is counted until the session ends.
#[test]
fn graph_memory_belongs_to_its_session() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let Reply::Graph { graph } = c.call(Request::GraphCreate { ctx, flags: 0 }) else { panic!() };
    let mb = 1u64 << 20;
    let Reply::GraphMemNode { node, ptr } =
        c.call(Request::GraphAddMemAllocNode { graph, deps: vec![], device: 0, bytes: 3 * mb })
    else {
        panic!("{}", d.log())
    };
    assert_eq!(d.used("default", 0), 0, "an allocation node takes no memory");
    assert_eq!(
        code(&c.call(Request::GraphAddMemAllocNode { graph, deps: vec![], device: 0, bytes: 0 })),
        INVALID_VALUE
    );
    assert_eq!(
        code(&c.call(Request::GraphAddMemAllocNode { graph, deps: vec![], device: 9, bytes: mb })),
        INVALID_VALUE
    );
    let exec = instantiate(&mut c, graph);
    // Rounded up to the granularity (2 MiB on the simulator), exactly.
    assert_eq!(d.used("default", 0), 4 * mb);
    let Reply::Attribute { value } = c.call(Request::GraphMemAttribute { device: 0, attr: 0, reset: false }) else {
        panic!()
    };
    assert_eq!(value, 4 << 20);

    let mut other = Client::connect(&d.socket);
    let octx = other.ctx(0);
    let Reply::Graph { graph: og } = other.call(Request::GraphCreate { ctx: octx, flags: 0 }) else { panic!() };
    assert_eq!(code(&other.call(Request::GraphMemFree { ptr })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphAddMemFreeNode { graph: og, deps: vec![], ptr })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphAddMemFreeNode { graph, deps: vec![node], ptr })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphMemTrim { device: 0 })), 0);
    let Reply::Attribute { value } = other.call(Request::GraphMemAttribute { device: 0, attr: 2, reset: false }) else {
        panic!()
    };
    assert_eq!(value, 0, "another session sees none of it");
    assert_eq!(d.used("default", 0), 4 * mb, "another session's trim took the memory");
    // A memset of the session's own graph memory is a node it may add; another session's is refused.
    let set = |dst| gpupool_protocol::ops::Memset {
        dst,
        value: gpupool_protocol::ops::MemsetValue::U32(1),
        width: 16,
        height: 1,
        pitch: 0,
    };
    assert_eq!(
        code(&other.call(Request::GraphAddMemsetNode { graph: og, deps: vec![], set: set(ptr) })),
        INVALID_VALUE
    );
    assert!(matches!(
        c.call(Request::GraphAddMemsetNode { graph, deps: vec![node], set: set(ptr) }),
        Reply::GraphNode { .. }
    ));
    drop(other);
    // The session ends with the graph, its instantiation and the memory: all of it goes back.
    let _ = exec;
    drop(c);
    let t0 = Instant::now();
    while d.used("default", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "the ledger is not back to 0: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A session with a stream and a captured graph that fills 64 words of `buf` with 7.
struct Captured {
    c: Client,
    stream: StreamId,
    buf: gpupool_protocol::DevicePtr,
    graph: GraphId,
}

fn capture_fill(d: &Daemon) -> Captured {
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let buf = c.alloc(ctx, 4096).unwrap();
    let (func, packed) = c.fill_kernel(ctx, buf, 7);
    let Reply::Stream { stream } = c.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    assert_eq!(code(&c.call(Request::StreamBeginCapture { stream, mode: 0 })), 0, "{}", d.log());
    let Reply::CaptureInfo { status: 1, id } = c.call(Request::StreamCaptureInfo { stream }) else { panic!() };
    assert_ne!(id, 0);
    c.send_async(Request::LaunchKernel {
        func,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
        stream,
        params: KernelParams(packed),
        cooperative: false,
    });
    let Reply::Graph { graph } = c.call(Request::StreamEndCapture { stream }) else { panic!("{}", d.log()) };
    assert!(c.async_errors.is_empty(), "{:?}", c.async_errors);
    // Captured, not run.
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0);
    let Reply::Bytes { data } = c.call(Request::MemcpyDtoHInline { src: buf, len: 256 }) else { panic!() };
    assert!(data.0.iter().all(|&b| b == 0), "the capture ran its kernel");
    Captured { c, stream, buf, graph }
}

fn instantiate(c: &mut Client, graph: GraphId) -> GraphExecId {
    match c.call(Request::GraphInstantiate { graph, flags: 0 }) {
        Reply::GraphExec { exec } => exec,
        r => panic!("{r:?}"),
    }
}

#[test]
fn graphs_belong_to_their_session_and_go_with_it() {
    let d = Daemon::start(None);
    let Captured { mut c, stream, buf, graph } = capture_fill(&d);
    let exec = instantiate(&mut c, graph);
    c.send_async(Request::GraphUpload { exec, stream });
    c.send_async(Request::GraphLaunch { exec, stream });
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0);
    assert!(c.async_errors.is_empty(), "{:?}", c.async_errors);
    let Reply::Bytes { data } = c.call(Request::MemcpyDtoHInline { src: buf, len: 256 }) else { panic!() };
    assert!(data.0.chunks(4).all(|w| w == 7u32.to_le_bytes()), "{:?}", &data.0[..16]);

    // Another session (another tenant's, or the same one's) names them in vain: the driver's codes.
    let mut other = Client::connect(&d.socket);
    let octx = other.ctx(0);
    let Reply::Stream { stream: ostream } = other.call(Request::StreamCreate { ctx: octx, flags: 0, priority: 0 })
    else {
        panic!()
    };
    assert_eq!(code(&other.call(Request::GraphInstantiate { graph, flags: 0 })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphDestroy { graph })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphExecDestroy { exec })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphAddEmptyNode { graph, deps: vec![] })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphClone { graph })), INVALID_VALUE);
    other.send_async(Request::GraphLaunch { exec, stream: ostream });
    other.send_async(Request::GraphLaunch { exec, stream });
    assert_eq!(code(&other.call(Request::StreamSynchronize { stream: ostream })), 0);
    let codes: Vec<u32> = other.async_errors.iter().map(|e| e.1).collect();
    assert_eq!(codes, [INVALID_HANDLE, INVALID_HANDLE], "{:?}", other.async_errors);
    // Nodes are the graph's own: a node id of another graph (or none) is refused.
    let Reply::GraphNode { node } = c.call(Request::GraphAddEmptyNode { graph, deps: vec![] }) else { panic!() };
    let Reply::Graph { graph: g2 } = c.call(Request::GraphClone { graph }) else { panic!() };
    assert_eq!(code(&c.call(Request::GraphAddEmptyNode { graph: g2, deps: vec![node] })), INVALID_VALUE);
    assert_eq!(code(&c.call(Request::GraphAddEmptyNode { graph, deps: vec![node + 1000] })), INVALID_VALUE);
    assert_eq!(code(&c.call(Request::GraphDestroy { graph: g2 })), 0);
    // The owner's graph still works.
    c.send_async(Request::MemsetAsync {
        set: gpupool_protocol::ops::Memset {
            dst: buf,
            value: gpupool_protocol::ops::MemsetValue::U32(0),
            width: 64,
            height: 1,
            pitch: 0,
        },
        stream,
    });
    c.send_async(Request::GraphLaunch { exec, stream });
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0);
    let Reply::Bytes { data } = c.call(Request::MemcpyDtoHInline { src: buf, len: 256 }) else { panic!() };
    assert!(data.0.chunks(4).all(|w| w == 7u32.to_le_bytes()));

    // The session ends with a graph, an instantiated graph and a capture under way: all freed.
    assert_eq!(code(&c.call(Request::StreamBeginCapture { stream, mode: 2 })), 0);
    drop(c);
    let t0 = Instant::now();
    while !d.log().contains("graphs=2") {
        assert!(t0.elapsed() < Duration::from_secs(5), "no session end with graphs=2: {}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(d.used("default", 0), 0, "{}", d.log());
}

#[test]
fn pageable_copies_cannot_be_captured_and_invalidate_the_capture() {
    let d = Daemon::start(None);
    let Captured { mut c, stream, buf, graph } = capture_fill(&d);
    assert_eq!(code(&c.call(Request::StreamBeginCapture { stream, mode: 0 })), 0);
    // Bytes in the frame (pageable memory the client copied): gone once the request is handled.
    c.send_async(Request::MemcpyHtoDAsync { dst: buf, src: HostSrc::Inline(InlineBytes(vec![1; 64])), stream });
    let Reply::CaptureInfo { status: 2, .. } = c.call(Request::StreamCaptureInfo { stream }) else {
        panic!("the capture is not invalidated: {}", d.log())
    };
    assert_eq!(c.async_errors.iter().map(|e| e.1).collect::<Vec<_>>(), [STREAM_CAPTURE_UNSUPPORTED]);
    assert_eq!(code(&c.call(Request::StreamEndCapture { stream })), STREAM_CAPTURE_INVALIDATED);
    let Reply::CaptureInfo { status: 0, id: 0 } = c.call(Request::StreamCaptureInfo { stream }) else { panic!() };
    // The legacy stream cannot be captured; unknown modes are refused.
    assert_eq!(code(&c.call(Request::StreamBeginCapture { stream: StreamId::NULL, mode: 0 })), 900);
    assert_eq!(code(&c.call(Request::StreamBeginCapture { stream, mode: 3 })), INVALID_VALUE);
    // The earlier graph is unaffected.
    let exec = instantiate(&mut c, graph);
    c.send_async(Request::GraphLaunch { exec, stream });
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0);
    let Reply::Bytes { data } = c.call(Request::MemcpyDtoHInline { src: buf, len: 256 }) else { panic!() };
    assert!(data.0.chunks(4).all(|w| w == 7u32.to_le_bytes()));
    assert_eq!(code(&c.call(Request::GraphExecDestroy { exec })), 0);
    assert_eq!(code(&c.call(Request::GraphDestroy { graph })), 0);
    assert_eq!(code(&c.call(Request::GraphDestroy { graph })), INVALID_VALUE);
}

fn d2d(src: gpupool_protocol::DevicePtr, dst: MemSpace, len: u64) -> Copy3D {
    let end = |space| Copy3DEnd { space, x_bytes: 0, y: 0, z: 0, pitch: len, height: 1 };
    Copy3D { src: end(MemSpace::Device(src)), dst: end(dst), width_bytes: len, height: 1, depth: 1 }
}

#[test]
fn memcpy_nodes_copy_only_the_sessions_memory() {
    let d = Daemon::start(None);
    let Captured { mut c, stream, buf, graph } = capture_fill(&d);
    let ctx = c.ctx(0);
    let dst = c.alloc(ctx, 4096).unwrap();
    let mut other = Client::connect(&d.socket);
    let octx = other.ctx(0);
    let theirs = other.alloc(octx, 4096).unwrap();
    let set = gpupool_protocol::ops::Memset {
        dst: theirs,
        value: gpupool_protocol::ops::MemsetValue::U8(0x11),
        width: 4096,
        height: 1,
        pitch: 0,
    };
    assert_eq!(code(&other.call(Request::Memset { set })), 0);
    let Reply::Graph { graph: g } = c.call(Request::GraphCreate { ctx, flags: 0 }) else { panic!() };
    let Reply::GraphNode { node: fill } = c.call(Request::GraphAddChildNode { graph: g, deps: vec![], child: graph })
    else {
        panic!("{}", d.log())
    };
    // Another session's memory at either end, the staging area, a copy past the end: refused.
    for copy in [
        d2d(theirs, MemSpace::Device(dst), 256),
        d2d(buf, MemSpace::Device(theirs), 256),
        d2d(buf, MemSpace::Staging(0), 256),
        d2d(buf, MemSpace::Device(dst), 8192),
    ] {
        assert_eq!(code(&c.call(Request::GraphAddMemcpyNode { graph: g, deps: vec![fill], copy })), INVALID_VALUE);
    }
    // The session's own memory is copied when the graph runs.
    let Reply::GraphNode { .. } =
        c.call(Request::GraphAddMemcpyNode { graph: g, deps: vec![fill], copy: d2d(buf, MemSpace::Device(dst), 256) })
    else {
        panic!("{}", d.log())
    };
    let exec = instantiate(&mut c, g);
    c.send_async(Request::GraphLaunch { exec, stream });
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0);
    assert!(c.async_errors.is_empty(), "{:?}", c.async_errors);
    let Reply::Bytes { data } = c.call(Request::MemcpyDtoHInline { src: dst, len: 256 }) else { panic!() };
    assert!(data.0.chunks(4).all(|w| w == 7u32.to_le_bytes()), "{:?}", &data.0[..16]);
    let Reply::Bytes { data } = other.call(Request::MemcpyDtoHInline { src: theirs, len: 256 }) else { panic!() };
    assert!(data.0.iter().all(|&b| b == 0x11), "another session's memory was written");
}

/// A client SIGKILLed while the daemon's graph waits in its host function (tests/c/host_fn_hang.c,
/// whose function never returns): meanwhile another tenant launches, synchronises and reads back on
/// its own stream; after the kill the daemon's host node is released, the session ends, and the
/// sessions list and the ledger are empty.
#[test]
fn a_client_killed_in_its_host_function_leaves_nothing_behind() {
    use std::io::{BufRead, BufReader};
    ensure_interposer();
    let config = format!(
        "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n\n[[tenant]]\nname = \"b\"\ntoken_sha256 = \"{}\"\n",
        gpupool_quota::hash_token("token-a"),
        gpupool_quota::hash_token("token-b")
    );
    let d = Daemon::start(Some(&config));
    let exe = gpupool_e2e::compile_c("host_fn_hang", &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("graphs"));
    let mut child = Command::new(&exe)
        .env("LD_PRELOAD", PathBuf::from(env!("CARGO_BIN_EXE_gpupool")).with_file_name("libgpupool.so"))
        .env("GPUPOOL_ENDPOINT", d.endpoint())
        .env("GPUPOOL_TOKEN", "token-a")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // In either order: the host function runs on the library's thread as soon as the daemon gets there.
    let mut lines: Vec<String> =
        BufReader::new(child.stdout.take().unwrap()).lines().take(2).map(Result::unwrap).collect();
    lines.sort();
    assert_eq!(lines, ["in host function", "launched"], "{}", d.log());
    assert_eq!(d.used("a", 0), 16 << 20);

    // Tenant b works while a's stream is held in its host function.
    let t0 = Instant::now();
    let mut b = Client::connect_as(&d.socket, None, Some("token-b")).unwrap();
    let ctx = b.ctx(0);
    let buf = b.alloc(ctx, 4096).unwrap();
    let (func, packed) = b.fill_kernel(ctx, buf, 7);
    let Reply::Stream { stream } = b.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    b.send_async(Request::LaunchKernel {
        func,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
        stream,
        params: KernelParams(packed),
        cooperative: false,
    });
    assert_eq!(code(&b.call(Request::StreamSynchronize { stream })), 0, "{}", d.log());
    let back = gpupool_protocol::ops::StagingRegion { offset: 0, len: 256 };
    assert_eq!(code(&b.call(Request::MemcpyDtoH { src: buf, dst: back })), 0);
    let mut got = vec![0u8; 256];
    gpupool_protocol::transport::Transport::staging(&b.t).unwrap().read(0, &mut got).unwrap();
    assert!(got.chunks(4).all(|w| w == 7u32.to_le_bytes()), "{got:?}");
    assert!(t0.elapsed() < Duration::from_secs(10), "tenant b waited {:?}", t0.elapsed());
    assert_eq!(d.status()["sessions"].as_array().unwrap().len(), 2);

    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    while d.used("a", 0) != 0 || d.status()["sessions"].as_array().unwrap().len() != 1 {
        assert!(killed.elapsed() < Duration::from_secs(5), "a's session is still there: {}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("session and memory gone {} ms after SIGKILL in a host function", killed.elapsed().as_millis());
    // The daemon keeps serving b; b's end leaves nothing either.
    assert_eq!(code(&b.call(Request::StreamSynchronize { stream })), 0);
    drop(b);
    while !d.status()["sessions"].as_array().unwrap().is_empty() || d.used("b", 0) != 0 {
        assert!(killed.elapsed() < Duration::from_secs(10), "b's session is still there: {}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = d.log();
    assert!(log.contains("client gone"), "{log}");
}

/// A second connection of the test, not greeted: the host-function channel's side.
fn raw_connection(d: &Daemon) -> gpupool_protocol::transport::shm::ShmTransport {
    use gpupool_protocol::transport::shm::{ShmTransport, WaitPolicy};
    let s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    ShmTransport::connect(s, WaitPolicy::default()).unwrap()
}

/// Sends `op` as request `id` on `t`; its reply, if one comes within `wait`.
fn ask_raw(
    t: &mut gpupool_protocol::transport::shm::ShmTransport,
    id: u64,
    op: Request,
    wait: Duration,
) -> Option<Reply> {
    use gpupool_protocol::Message;
    use gpupool_protocol::transport::{Transport, TransportError};
    t.send(&Message::Request { id, no_reply: false, op }.encode().unwrap()).unwrap();
    match t.recv(Some(wait)) {
        Ok(f) => match Message::decode(&f).unwrap().0 {
            Message::Reply { id: rid, op } if rid == id => Some(op),
            other => panic!("unexpected {other:?}"),
        },
        Err(TransportError::Timeout) => None,
        Err(e) => panic!("{e}"),
    }
}

/// On the wire: a session's host-function channel attaches only with its own session's secret, once;
/// host nodes need it; a launched graph's host node waits for the channel's answer (the stream is not
/// ready until then) and its successor runs after; another session cannot name the node.
#[test]
fn host_nodes_wait_for_their_sessions_channel() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let mut other = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let buf = c.alloc(ctx, 4096).unwrap();
    let (func, packed) = c.fill_kernel(ctx, buf, 9);
    let Reply::Stream { stream } = c.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    let Reply::Graph { graph } = c.call(Request::GraphCreate { ctx, flags: 0 }) else { panic!() };
    let host = |deps: Vec<u64>| Request::GraphAddHostNode { graph, deps, func: 0x1000, user: 0x2000 };
    assert_eq!(code(&c.call(host(vec![]))), 801, "no channel yet: NOT_SUPPORTED");
    assert_eq!(code(&c.call(Request::HostCallNext { done: 0 })), INVALID_VALUE);
    let Reply::HostChannelKey { session, secret } = c.call(Request::HostChannelOpen {}) else { panic!() };
    let Reply::HostChannelKey { session: s2, secret: again } = c.call(Request::HostChannelOpen {}) else { panic!() };
    assert_eq!((s2, again), (session, secret), "the same secret until a connection attaches");
    let Reply::HostChannelKey { session: other_session, .. } = other.call(Request::HostChannelOpen {}) else {
        panic!()
    };
    let mut wrong = secret;
    wrong[0] ^= 1;
    for (s, k) in [(session, wrong), (other_session, secret)] {
        let mut t = raw_connection(&d);
        let r = ask_raw(&mut t, 1, Request::HostChannelAttach { session: s, secret: k }, Duration::from_secs(5));
        assert_eq!(r.as_ref().map(code), Some(800), "{r:?}");
    }
    let mut ch = raw_connection(&d);
    let r = ask_raw(&mut ch, 1, Request::HostChannelAttach { session, secret }, Duration::from_secs(5));
    assert_eq!(r, Some(Reply::Ok {}));
    let mut twice = raw_connection(&d);
    let r = ask_raw(&mut twice, 1, Request::HostChannelAttach { session, secret }, Duration::from_secs(5));
    assert_eq!(r.as_ref().map(code), Some(800), "attached once only: {r:?}");

    // memset(buf, 1) -> host node -> fill(buf, 9)
    let set = gpupool_protocol::ops::Memset {
        dst: buf,
        value: gpupool_protocol::ops::MemsetValue::U32(1),
        width: 64,
        height: 1,
        pitch: 0,
    };
    let Reply::GraphNode { node: m } = c.call(Request::GraphAddMemsetNode { graph, deps: vec![], set }) else {
        panic!("{}", d.log())
    };
    let Reply::GraphNode { node: h } = c.call(host(vec![m])) else { panic!("{}", d.log()) };
    let kernel = gpupool_protocol::ops::KernelNode {
        func,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
        params: KernelParams(packed),
    };
    let Reply::GraphNode { .. } = c.call(Request::GraphAddKernelNode { graph, deps: vec![h], kernel }) else {
        panic!("{}", d.log())
    };
    assert_eq!(c.call(Request::GraphHostNodeGetParams { node: h }), Reply::HostFn { func: 0x1000, user: 0x2000 });
    assert_eq!(code(&other.call(Request::GraphHostNodeGetParams { node: h })), INVALID_VALUE);
    assert_eq!(code(&other.call(Request::GraphHostNodeSetParams { node: h, func: 1, user: 2 })), INVALID_VALUE);
    let exec = instantiate(&mut c, graph);
    c.send_async(Request::GraphLaunch { exec, stream });
    // The host call comes, and until it is answered the stream is not done and buf holds the memset.
    let r = ask_raw(&mut ch, 2, Request::HostCallNext { done: 0 }, Duration::from_secs(10));
    let Some(Reply::HostCall { call, func: 0x1000, user: 0x2000 }) = r else { panic!("{r:?} {}", d.log()) };
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.call(Request::StreamQuery { stream }), Reply::Ready { ready: false });
    // Answered: the next poll waits (nothing due) while the graph finishes.
    let r = ask_raw(&mut ch, 3, Request::HostCallNext { done: call }, Duration::from_millis(300));
    assert_eq!(r, None, "no second call is due");
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0, "{}", d.log());
    let back = gpupool_protocol::ops::StagingRegion { offset: 0, len: 256 };
    assert_eq!(code(&c.call(Request::MemcpyDtoH { src: buf, dst: back })), 0);
    let mut got = vec![0u8; 256];
    gpupool_protocol::transport::Transport::staging(&c.t).unwrap().read(0, &mut got).unwrap();
    assert!(got.chunks(4).all(|w| w == 9u32.to_le_bytes()), "the kernel ran after the host node: {got:?}");
    // The channel going away releases what waits on it: a second launch's host node is skipped.
    drop(ch);
    c.send_async(Request::GraphLaunch { exec, stream });
    let t0 = Instant::now();
    assert_eq!(code(&c.call(Request::StreamSynchronize { stream })), 0, "{}", d.log());
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

/// A client gone in the middle of a capture forked to a second stream (its forked stream holding
/// a captured allocation, charged to the tenant) leaves nothing behind: the ledger is back to 0,
/// the daemon serves the next client, whose own fork/join capture works. Over the wire, as a
/// client that never ends its capture sends it.
#[test]
fn a_client_gone_mid_cross_stream_capture_leaves_nothing_behind() {
    let d = Daemon::start(Some(&common::tenant_config("64MiB")));
    let capture_forked = |c: &mut Client| {
        let ctx = c.ctx(0);
        let stream = |c: &mut Client| match c.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) {
            Reply::Stream { stream } => stream,
            r => panic!("{r:?}"),
        };
        let (s0, s1) = (stream(c), stream(c));
        let Reply::Event { event } = c.call(Request::EventCreate { ctx, flags: 2 }) else { panic!("event") };
        assert_eq!(code(&c.call(Request::StreamBeginCapture { stream: s0, mode: 0 })), 0, "{}", d.log());
        assert_eq!(code(&c.call(Request::EventRecord { event, stream: s0 })), 0);
        assert_eq!(code(&c.call(Request::StreamWaitEvent { stream: s1, event, flags: 0 })), 0, "{}", d.log());
        let r = c.call(Request::CaptureMemAlloc { stream: s1, device: 0, bytes: 8 << 20 });
        assert!(matches!(r, Reply::CapturedMemNode { .. }), "{r:?}\n{}", d.log());
        (s0, s1, event)
    };
    let mut a = Client::connect(&d.socket);
    capture_forked(&mut a);
    assert_eq!(d.used("team", 0), 8 << 20, "the captured allocation is charged: {}", d.status());
    drop(a);
    let t0 = Instant::now();
    while d.used("team", 0) != 0 || !d.status()["sessions"].as_array().unwrap().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(5), "left behind: {}\n{}", d.status(), d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut b = Client::connect(&d.socket);
    let (s0, s1, event) = capture_forked(&mut b);
    let ctx = b.ctx(0);
    let Reply::Event { event: back } = b.call(Request::EventCreate { ctx, flags: 2 }) else { panic!() };
    assert_eq!(code(&b.call(Request::EventRecord { event: back, stream: s1 })), 0);
    assert_eq!(code(&b.call(Request::StreamWaitEvent { stream: s0, event: back, flags: 0 })), 0);
    assert!(matches!(b.call(Request::StreamEndCapture { stream: s0 }), Reply::Graph { .. }), "{}", d.log());
    assert_eq!(code(&b.call(Request::EventDestroy { event })), 0);
}

/// An event shared between processes through IPC never stands for a capture's nodes (the
/// sessions of a tenant share the backend event, so another process's stream waiting for it
/// would join this process's capture): recorded on a capturing stream once exported, it is
/// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the capture is invalidated; recorded in a capture
/// and then exported, the export is CUDA_ERROR_CAPTURED_EVENT, until it is recorded outside.
#[test]
fn an_ipc_shared_event_never_stands_for_a_capture() {
    let d = Daemon::start(Some(&common::tenant_config("64MiB")));
    let mut a = Client::connect(&d.socket);
    let ctx = a.ctx(0);
    let Reply::Stream { stream } = a.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    // CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING.
    let mut event = || match a.call(Request::EventCreate { ctx, flags: 6 }) {
        Reply::Event { event } => event,
        r => panic!("{r:?}"),
    };
    let (shared, captured) = (event(), event());
    let r = a.call(Request::IpcGetEventHandle { event: shared });
    assert!(matches!(r, Reply::MemExported { .. }), "{r:?}");
    assert_eq!(code(&a.call(Request::StreamBeginCapture { stream, mode: 0 })), 0);
    assert_eq!(code(&a.call(Request::EventRecord { event: shared, stream })), 900, "{}", d.log());
    assert_eq!(code(&a.call(Request::StreamEndCapture { stream })), 901, "the capture was not invalidated");
    assert!(d.log().contains("IPC-shared event on a capturing stream"), "{}", d.log());

    assert_eq!(code(&a.call(Request::StreamBeginCapture { stream, mode: 0 })), 0);
    assert_eq!(code(&a.call(Request::EventRecord { event: captured, stream })), 0);
    assert_eq!(code(&a.call(Request::IpcGetEventHandle { event: captured })), 907, "{}", d.log());
    assert!(matches!(a.call(Request::StreamEndCapture { stream }), Reply::Graph { .. }));
    assert_eq!(code(&a.call(Request::EventRecord { event: captured, stream })), 0);
    let r = a.call(Request::IpcGetEventHandle { event: captured });
    assert!(matches!(r, Reply::MemExported { .. }), "recorded outside capture, it is exported: {r:?}");
}
