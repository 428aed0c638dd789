//! cuMemPoolSetAccess / cuMemPoolGetAccess and the runtime's through the pool
//! (tests/python/pool_access_checks.py --cudart under `gpupool run`): read-write for a pool's own
//! device accepted and read back, anything else CUDA_ERROR_INVALID_VALUE, as on the simulator.

mod common;

use common::{Daemon, ensure_interposer};
use std::path::PathBuf;

#[test]
fn pool_access_through_the_pool() {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let d = Daemon::start(None);
    let mut cmd = common::gpupool_run_script(&d, &python, "pool_access_checks.py");
    cmd.arg("--cudart");
    common::run_checks(cmd, "pool_access_checks", 9, &d);
}
