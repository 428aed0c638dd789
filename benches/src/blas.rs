//! `gpupool-bench blas`: cuBLAS GEMMs through the pool against the simulator's cuBLAS called
//! directly and against the GEMM crate alone, all in one run.
//!
//! One client program (`tests/c/gemm_client.c`) runs twice side by side: under `gpupool run`
//! against the release daemon (`--sim`), where its `libcublas.so.13` is libgpupool.so and every
//! call is forwarded to the daemon, which runs the simulator's cuBLAS (sim-blas) on the tenant's
//! stream; and with the release simulator's libdir on `LD_LIBRARY_PATH`, where the same calls
//! reach sim-blas in the client's own process. The third figure is `matrixmultiply` (the crate
//! sim-blas computes with, same `threading` feature, same column-major strides) called here on
//! host buffers. The parent asks each side for its GEMMs in turn, round by round (the order
//! alternating), so the three see the same machine; each GEMM is timed from the call to the
//! return of a context synchronize, and the client checks C against the host before answering.
//! Target (issue 17): through the pool >= 90% of the direct simulator's rate at 1024^3 and above.

use crate::pool::{Daemon, build_pool, loadavg, pass, release_dir};
use crate::report::{cpus, grid};
use crate::stats::{Summary, summarize};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: gpupool-bench blas [--quick]";
/// The target's share of the direct simulator's rate, and the smallest size it applies to.
const TARGET_SHARE: f64 = 0.90;
const TARGET_FROM_N: usize = 1024;
/// How long one command (its GEMMs and the check) may take before the client counts as hung.
const REPLY_LIMIT: Duration = Duration::from_secs(600);

/// One figure: `rounds` rounds in which each side times `per_round` GEMMs of `op` at `n`^3.
#[derive(Clone, Copy)]
struct Shape {
    op: Op,
    n: usize,
    rounds: usize,
    per_round: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Sgemm,
    Hgemm,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Sgemm => "sgemm",
            Op::Hgemm => "hgemm",
        }
    }
}

fn shapes(quick: bool) -> Vec<Shape> {
    let s = |op, n, rounds, per_round| Shape { op, n, rounds, per_round };
    if quick {
        vec![s(Op::Sgemm, 256, 3, 3), s(Op::Sgemm, 1024, 3, 1), s(Op::Hgemm, 1024, 3, 1)]
    } else {
        vec![
            s(Op::Sgemm, 64, 9, 20),
            s(Op::Sgemm, 256, 9, 5),
            s(Op::Sgemm, 1024, 9, 1),
            s(Op::Sgemm, 4096, 7, 1),
            s(Op::Hgemm, 2048, 9, 1),
        ]
    }
}

/// A `gemm_client` process: commands on its stdin, `times ...` lines read by a thread.
struct Client {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Client {
    fn start(name: &'static str, mut cmd: Command) -> Result<Client, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the {name} client: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut c = Client { name, child, stdin, lines };
        let first = c.line()?;
        if first != "ready" {
            return Err(format!("the {name} client said {first:?} instead of \"ready\""));
        }
        Ok(c)
    }

    fn line(&mut self) -> Result<String, String> {
        self.lines.recv_timeout(REPLY_LIMIT).map_err(|_| {
            let st = self.child.try_wait().ok().flatten().map_or("no reply".into(), |s| s.to_string());
            format!("the {} client stopped answering ({st}; its stderr is above)", self.name)
        })
    }

    /// Nanoseconds of each of `reps` GEMMs of `op` at `n`^3 (the client checks C first).
    fn time(&mut self, op: Op, n: usize, reps: usize) -> Result<Vec<f64>, String> {
        writeln!(self.stdin, "{} {n} {reps}", op.name()).map_err(|e| format!("{} client: {e}", self.name))?;
        let line = self.line()?;
        let head = format!("times {} {n} ", op.name());
        let times: Vec<f64> = line
            .strip_prefix(&head)
            .ok_or_else(|| format!("{} client: unexpected {line:?}", self.name))?
            .split_whitespace()
            .map(|w| w.parse::<f64>().map_err(|e| format!("{} client: {w:?}: {e}", self.name)))
            .collect::<Result<_, _>>()?;
        if times.len() != reps {
            return Err(format!("{} client: {} times for {reps} GEMMs: {line:?}", self.name, times.len()));
        }
        Ok(times)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `matrixmultiply::sgemm` on host buffers holding the client's matrices' shape, column-major
/// as sim-blas passes cuBLAS's (row stride 1, column stride n); for hgemm the crate's fp32
/// GEMM of the same size (the crate has no fp16: widening and narrowing are sim-blas's own).
struct CrateGemm {
    n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl CrateGemm {
    fn new(n: usize) -> CrateGemm {
        let fill = |which: usize| -> Vec<f32> {
            (0..n * n).map(|x| ((x % n * 7 + x / n * 3 + which * 5) % 17) as f32 / 8.0 - 1.0).collect()
        };
        let mut g = CrateGemm { n, a: fill(0), b: fill(1), c: vec![0.0; n * n] };
        g.gemm(); // warm-up: page faults on C and the crate's thread pool stay out
        g
    }

    fn gemm(&mut self) -> f64 {
        let (n, s) = (self.n, self.n as isize);
        let t = Instant::now();
        // SAFETY: a, b and c hold n*n elements each; with row stride 1 and column stride n every
        // access stays inside them, and c does not overlap a or b.
        unsafe {
            matrixmultiply::sgemm(
                n,
                n,
                n,
                1.0,
                self.a.as_ptr(),
                1,
                s,
                self.b.as_ptr(),
                1,
                s,
                0.0,
                self.c.as_mut_ptr(),
                1,
                s,
            )
        };
        t.elapsed().as_nanos() as f64
    }
}

struct Row {
    shape: Shape,
    pool: Summary,
    direct: Summary,
    krate: Summary,
}

impl Row {
    fn gflops(&self, s: &Summary) -> f64 {
        2.0 * (self.shape.n as f64).powi(3) / s.median
    }
    /// Rate through the pool as a share of the direct simulator's (medians).
    fn pool_share(&self) -> f64 {
        self.direct.median / self.pool.median
    }
    /// The direct simulator's rate as a share of the crate's alone.
    fn direct_share(&self) -> f64 {
        self.krate.median / self.direct.median
    }
}

struct BlasRun {
    rows: Vec<Row>,
    daemon: String,
    sim_libdir: String,
    wall_s: f64,
    load: (String, String),
}

pub fn main(args: &[String]) -> ExitCode {
    let mut quick = false;
    for a in args {
        match a.as_str() {
            "--quick" => quick = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("gpupool-bench blas: unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match run(&shapes(quick)) {
        Ok(r) => {
            print!("{}", table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench blas: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(shapes: &[Shape]) -> Result<BlasRun, String> {
    let started = Instant::now();
    let load_start = loadavg();
    build_pool()?;
    // The release simulator the daemon's `--sim` loads (not $GPUPOOL_SIM_LIBDIR, which may name
    // another build): both sides must run the same sim-blas.
    let sim_libdir = gpupool_e2e::build_sim_libdir(true)?;
    let rel = release_dir();
    let program = gpupool_e2e::compile_c("gemm_client", &rel.join("bench-c"));
    let dir = std::env::temp_dir().join(format!("gpupool-bench-blas-{}", std::process::id()));
    let daemon = Daemon::start_with(&rel.join("gpupool"), dir, &[])?;
    let mut pool_cmd = Command::new(rel.join("gpupool"));
    pool_cmd.args(["run", "--endpoint", &daemon.endpoint(), "--"]).arg(&program);
    let mut pool = Client::start("pool", pool_cmd)?;
    let mut direct = Client::start("direct", direct_command(&program, &sim_libdir))?;
    let mut rows = Vec::new();
    for &shape in shapes {
        eprintln!("blas: {} {}^3, {} rounds", shape.op.name(), shape.n, shape.rounds);
        let mut krate = CrateGemm::new(shape.n);
        let (mut p, mut d, mut k) = (Vec::new(), Vec::new(), Vec::new());
        // The first command of a shape allocates, fills and warms up on each side, untimed.
        pool.time(shape.op, shape.n, 1)?;
        direct.time(shape.op, shape.n, 1)?;
        for round in 0..shape.rounds {
            let reps = shape.per_round;
            if round % 2 == 0 {
                p.extend(pool.time(shape.op, shape.n, reps)?);
                d.extend(direct.time(shape.op, shape.n, reps)?);
            } else {
                d.extend(direct.time(shape.op, shape.n, reps)?);
                p.extend(pool.time(shape.op, shape.n, reps)?);
            }
            k.extend((0..reps).map(|_| krate.gemm()));
        }
        rows.push(Row { shape, pool: summarize(p), direct: summarize(d), krate: summarize(k) });
    }
    Ok(BlasRun {
        rows,
        daemon: format!("{} daemon --sim", rel.join("gpupool").display()),
        sim_libdir: sim_libdir.display().to_string(),
        wall_s: started.elapsed().as_secs_f64(),
        load: (load_start, loadavg()),
    })
}

/// The client on the simulator directly: its libdir first on the library path, nothing of the
/// pool in the environment.
fn direct_command(program: &Path, sim_libdir: &Path) -> Command {
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", sim_libdir.display()),
        _ => sim_libdir.display().to_string(),
    };
    let mut c = Command::new(program);
    c.env("LD_LIBRARY_PATH", ld).env_remove("LD_PRELOAD").env_remove("GPUPOOL_ENDPOINT");
    c
}

/// Milliseconds with three significant digits or more.
fn ms(ns: f64) -> String {
    let ms = ns / 1e6;
    if ms < 1.0 {
        format!("{ms:.3}")
    } else if ms < 100.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

fn table(run: &BlasRun) -> String {
    let threads = std::env::var("MATMUL_NUM_THREADS").unwrap_or_else(|_| "unset: physical CPUs, up to 4".into());
    let mut t = format!(
        "gpupool-bench blas: pool = tests/c/gemm_client.c under gpupool run against {}; direct = the same program\n\
         with {} on LD_LIBRARY_PATH; crate = matrixmultiply::sgemm in this process\n\
         {} CPUs, MATMUL_NUM_THREADS {threads}; run took {:.1} s; load average (1 min) {} at the start, {} at the end\n\
         (a shared machine: other work moves every figure; compare ratios within one run)\n\
         medians of per-GEMM times (call to cuCtxSynchronize returning); GFLOP/s = 2n^3 / median;\n\
         pool/direct and direct/crate = rate as a share of the baseline's; every C checked against the host\n\n",
        run.daemon,
        run.sim_libdir,
        cpus(),
        run.wall_s,
        run.load.0,
        run.load.1
    );
    let rows: Vec<Vec<String>> = run
        .rows
        .iter()
        .map(|r| {
            let target = if r.shape.n >= TARGET_FROM_N {
                format!(">= 90% {}", pass(r.pool_share() >= TARGET_SHARE))
            } else {
                "-".into()
            };
            vec![
                format!("{} {}^3", r.shape.op.name(), r.shape.n),
                r.pool.samples.to_string(),
                ms(r.pool.median),
                ms(r.direct.median),
                ms(r.krate.median),
                format!("{:.1}", r.gflops(&r.pool)),
                format!("{:.1}", r.gflops(&r.direct)),
                format!("{:.1}", r.gflops(&r.krate)),
                format!("{:.1}%", r.pool_share() * 100.0),
                format!("{:.1}%", r.direct_share() * 100.0),
                target,
            ]
        })
        .collect();
    let head = [
        "GEMM",
        "samples",
        "pool ms",
        "direct ms",
        "crate ms",
        "pool GFLOP/s",
        "direct GFLOP/s",
        "crate GFLOP/s",
        "pool/direct",
        "direct/crate",
        "target (issue 17)",
    ];
    t += &grid(&head, &rows, &[0, 10]);
    t += "  note: at the small sizes a GEMM is shorter than the thread wake-ups around it (the client's call and sync,\n";
    t += "  the daemon's session thread, the stream worker), so those rows swing with the load; the pool's cost is per call\n";
    t += "  and fades as n grows\n";
    t += "  note: hgemm's crate figure is the crate's fp32 GEMM of the same size (it has no fp16); sim-blas widens\n";
    t += "  fp16 to fp32 around it, so direct/crate shows what that costs\n";
    t
}
