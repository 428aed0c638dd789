//! One fuzzing tenant: runs a driver-call sequence drawn from a seed and prints every call's
//! result (see `gpupool_e2e::fuzz::tenant_main`). Started by `tests/tests/fuzz.rs` directly on
//! the simulator and under `gpupool run`.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    gpupool_e2e::fuzz::tenant_main(&args)
}
