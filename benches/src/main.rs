//! `gpupool-bench`: figures as ratios to baselines measured in the same run.
//!
//!   cargo run --release -p gpupool-benches -- sim [--json PATH]
//!
//! `sim` measures the simulated driver (release build, `scripts/sim-libdir --release`, or
//! `$GPUPOOL_SIM_LIBDIR`) through its C ABI, loaded with libloading exactly as the daemon
//! loads a vendor driver. See benches/README.md for what each baseline means.

mod report;
mod sim;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: gpupool-bench sim [--json PATH]";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
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
            "sim" if command.is_none() => command = Some(a),
            other => {
                eprintln!("unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if command.as_deref() != Some("sim") {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    match sim::run() {
        Ok(run) => {
            print!("{}", report::table(&run));
            if let Some(path) = json {
                if let Err(e) = std::fs::write(&path, report::json(&run)) {
                    eprintln!("writing {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
                println!("JSON written to {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench sim: {e}");
            ExitCode::FAILURE
        }
    }
}
