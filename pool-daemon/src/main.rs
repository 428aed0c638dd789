//! `gpupool`: the pool daemon and its command line.
//!
//! Owns: the devices, reached only through the vendor libraries loaded at run time
//! (`backend`), and the commands operators run. Today that is `gpupool probe`, which
//! loads a driver exactly as the daemon will and exercises every device; the daemon
//! proper (sessions, quotas, transport) builds on the same backend.
//!
//! Must not: link a vendor library at build time, or trust anything a client sends.

mod backend;
mod probe;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "gpupool", version, about = "Pool GPUs between unmodified programs under hard quotas")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load the CUDA driver and NVML as the daemon does, list the devices and
    /// exercise each one (allocate, copy, verify, launch, free).
    Probe {
        /// Use the simulated devices built from this workspace (libgpupool_sim.so).
        #[arg(long)]
        sim: bool,
        /// Directory holding libcuda.so.1 and libnvidia-ml.so.1 (default: the
        /// dynamic loader's search path, or the simulator with --sim).
        #[arg(long)]
        driver_dir: Option<PathBuf>,
        /// Bytes to copy through each device.
        #[arg(long, default_value_t = 64 << 20)]
        bytes: usize,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe { sim, driver_dir, bytes } => probe::run(sim, driver_dir, bytes),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpupool: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
