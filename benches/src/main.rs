//! `gpupool-bench`: figures as ratios to baselines measured in the same run.
//!
//!   cargo run --release -p gpupool-benches -- sim [--json PATH]
//!   cargo run --release -p gpupool-benches -- ptx [--json PATH]
//!   cargo run --release -p gpupool-benches -- transport [--json PATH]
//!   cargo run --release -p gpupool-benches -- pool [--json PATH]
//!   cargo run --release -p gpupool-benches -- compute [--json PATH]
//!   cargo run --release -p gpupool-benches -- runtime [--json PATH]
//!   cargo run --release -p gpupool-benches -- remote [--json PATH]
//!   cargo run --release -p gpupool-benches -- npu [--json PATH]
//!   cargo run --release -p gpupool-benches -- fuzz [--seconds S] [--seed N] [--tenants T]
//!   cargo run --release -p gpupool-benches -- blas [--quick]
//!   cargo run --release -p gpupool-benches -- torch-start [--quick]
//!   cargo run --release -p gpupool-benches -- containers [--quick]
//!   cargo run --release -p gpupool-benches -- evict [--quick]
//!   cargo run --release -p gpupool-benches -- checkpoint [--quick|--full]
//!   cargo run --release -p gpupool-benches -- printf
//!
//! `sim` measures the simulated driver (release build, `scripts/sim-libdir --release`, or
//! `$GPUPOOL_SIM_LIBDIR`) through its C ABI, loaded with libloading exactly as the daemon
//! loads a vendor driver. `ptx` measures that simulator's PTX interpreter: thread-
//! instructions per second on hand-written kernels and a 1M-element vector add end to end,
//! next to Rust loops doing the same work. `pool` starts the release daemon on the release
//! simulator and measures calls through `libgpupool.so` against the simulator loaded
//! directly, plain memcpy and a unix-socket ping-pong. `remote` measures the same client
//! over `tls://` and `tcp://` on loopback against plain TCP. `blas` times cuBLAS GEMMs through
//! the pool against the simulator's cuBLAS in the client's process and the GEMM crate alone;
//! `torch-start` times PyTorch's start to its first CUDA allocation under `gpupool run`;
//! `containers` times a runc container's start to its first CUDA call with `gpupool oci-hook`
//! against the same container put in the pool by hand. `evict` times memory preemption's
//! eviction and restore against a plain device-to-host copy of the same bytes;
//! `checkpoint` times `gpupool checkpoint` (full, incremental, the pause a client sees) against a
//! plain device-to-host copy plus a file write of the same bytes.
//! See benches/README.md for what each baseline means.

mod admission;
mod blas;
mod ceiling;
mod chaos;
mod checkpoint;
mod compute;
mod containers;
mod evict;
mod fuzz;
mod npu;
mod pool;
mod printf;
mod ptx;
mod remote;
mod report;
mod runtime;
mod sim;
mod stats;
mod torch_start;
mod transport;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: gpupool-bench sim|ptx|transport|pool|compute|runtime|remote|npu [--json PATH]\n       \
                     gpupool-bench admission|chaos|fuzz|blas|torch-start|containers|evict|checkpoint|printf [OPTIONS] (see benches/README.md)";

fn main() -> ExitCode {
    let all: Vec<String> = std::env::args().skip(1).collect();
    if all.first().map(String::as_str) == Some(pool::CLIENT_COMMAND) {
        return pool::client_main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some(remote::CLIENT_COMMAND) {
        return remote::client_main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("admission") {
        return admission::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("blas") {
        return blas::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("torch-start") {
        return torch_start::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("containers") {
        return containers::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("evict") {
        return evict::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("checkpoint") {
        return checkpoint::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("printf") {
        return printf::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some(printf::CLIENT_COMMAND) {
        return printf::client_main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("chaos") {
        return chaos::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("fuzz") {
        return fuzz::main(&all[1..]);
    }
    if all.first().map(String::as_str) == Some(fuzz::TENANT_COMMAND) {
        return gpupool_e2e::fuzz::tenant_main(&all[1..]);
    }
    let mut args = all.into_iter();
    let mut command = None;
    let mut json: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => match args.next() {
                Some(p) => json = Some(PathBuf::from(p)),
                None => {
                    eprintln!("--json needs a path\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "sim" | "ptx" | "transport" | "pool" | "compute" | "runtime" | "remote" | "npu" if command.is_none() => {
                command = Some(a)
            }
            other => {
                eprintln!("unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(command) = command else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match command.as_str() {
        "sim" => sim::run().map(|run| (report::table(&run), report::json(&run))),
        "transport" => transport::run().map(|run| (transport::table(&run), transport::json(&run))),
        "pool" => pool::run().map(|run| (pool::table(&run), pool::json(&run))),
        "compute" => compute::run().map(|run| (compute::table(&run), compute::json(&run))),
        "runtime" => runtime::run().map(|run| (runtime::table(&run), runtime::json(&run))),
        "remote" => remote::run().map(|run| (remote::table(&run), remote::json(&run))),
        "npu" => npu::run().map(|run| (npu::table(&run), npu::json(&run))),
        _ => ptx::run().map(|run| (ptx::table(&run), ptx::json(&run))),
    };
    match result {
        Ok((table, doc)) => {
            print!("{table}");
            if let Some(path) = json {
                if let Err(e) = std::fs::write(&path, doc) {
                    eprintln!("writing {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                println!("JSON written to {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench {command}: {e}");
            ExitCode::FAILURE
        }
    }
}
