//! cuBLAS and cuBLASLt through the pool: tests/python/cublas_checks.py, run unmodified under
//! `gpupool run` against a daemon on the simulator, loads `libcublas.so.13` and
//! `libcublasLt.so.13` by name (it must get libgpupool.so, and no cuBLAS may be mapped in it),
//! runs Sgemm (every transpose, padded leading dimensions), Dgemm, Hgemm, GemmEx (fp16 and
//! bf16), GemmStridedBatchedEx, SgemmStridedBatched, GemmBatchedEx, Sgemv/Dgemv, Sdot (to host
//! and to device memory), Saxpy, Sscal, device-pointer-mode scalars and cublasLtMatmul with
//! every epilogue, each against NumPy; and the refusals: a GEMM whose B runs past its
//! allocation and one writing into another tenant's memory are CUBLAS_STATUS_INVALID_VALUE,
//! with a daemon log line saying why.

mod common;

use common::{Client, Daemon, ensure_interposer, gpupool_run_script, run_checks, uid};
use gpupool_protocol::ops::answer;
use std::path::PathBuf;

#[test]
fn cublas_and_cublaslt_run_in_the_daemon_and_match_numpy() {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let config = format!(
        "[[tenant]]\nname = \"team\"\nuids = [{}]\n\n[[tenant]]\nname = \"other\"\ntoken_sha256 = \"{}\"\n",
        uid(),
        gpupool_quota::hash_token("tk-other")
    );
    let d = Daemon::start(Some(&config));
    // Memory of another tenant, whose address the program tries to write through cuBLAS.
    let mut other = Client::connect_as(&d.socket, None, Some("tk-other")).expect("the other tenant's session");
    let ctx = other.ctx(0);
    let foreign = other.alloc(ctx, 4096).expect("the other tenant's allocation");
    let before = other.call(gpupool_protocol::Request::MemcpyDtoHInline { src: foreign, len: 64 });

    let mut cmd = gpupool_run_script(&d, &python, "cublas_checks.py");
    cmd.arg(format!("{:#x}", foreign.0));
    run_checks(cmd, "cublas_checks", 33, &d);
    let log = d.log();
    // Each refusal is logged with its reason, and the other tenant's bytes are untouched.
    assert!(
        log.lines().any(|l| l.contains("request=\"BlasGemm\"") && l.contains("code=7") && l.contains("B (16384 bytes")),
        "no log line for the GEMM past B's allocation:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("request=\"BlasGemm\"") && l.contains(&format!("C (64 bytes at {:#x})", foreign.0))),
        "no log line for the GEMM into another tenant's memory:\n{log}"
    );
    let after = other.call(gpupool_protocol::Request::MemcpyDtoHInline { src: foreign, len: 64 });
    assert_eq!(answer::Bytes::try_from(before).ok(), answer::Bytes::try_from(after).ok());
    // The program launched no kernel of its own: what the compute scheduler charged the tenant
    // on device 0 is its cuBLAS calls, one charge each by measured device time.
    let st = d.status();
    let team = st["tenants"].as_array().unwrap().iter().find(|t| t["tenant"] == "team").unwrap();
    let c = &team["devices"][0]["compute"];
    assert!(c["kernels"].as_u64().unwrap_or(0) >= 20, "cuBLAS calls not charged as device work: {st}");
    assert!(c["charged_ns"].as_u64().unwrap_or(0) > 0, "no device time charged for cuBLAS: {st}");
}
