//! The demo's NPU tenant: `gpupool __demo-npu-tenant ...`, run by `gpupool demo` under
//! `LD_PRELOAD=libgpupool.so` with the interposer's CANN sonames first on `LD_LIBRARY_PATH` (as
//! `gpupool run` gives a CANN program). It is an ordinary AscendCL program: it loads
//! `libascendcl.so` and `libopapi.so` by name and follows CANN's sequence (aclInit, aclrtSetDevice,
//! a stream, aclrtMalloc, copies, the two-phase aclnnMatmul, aclrtSynchronizeStream). It checks one
//! product against the CPU, reads aclrtGetMemInfo, allocates until the pool answers
//! ACL_ERROR_RT_MEMORY_ALLOCATION, then runs matmuls back to back.
//!
//! Output, one line each on stdout: `start <monotonic ns>`, `meminfo <free> <total>`,
//! `oom <bytes> <call>(<code>)`, `ops <monotonic ns> <operators>` (every 100 ms and at the end), `end
//! <monotonic ns>` (after the last operator). Its share of the NPU is not measured here: an NPU has
//! no clock a program's operator can read, so the demo reads the operator time the daemon charged
//! this tenant (`summary`).

use super::workload::monotonic_ns;
use crate::acl_call;
use crate::backend::{Acl, Opapi};
use anyhow::{Context as _, Result, bail, ensure};
use gpupool_shim::acl::{
    ACL_ERROR_RT_MEMORY_ALLOCATION, aclrtMemAttr, aclrtMemMallocPolicy, aclrtMemcpyKind, aclrtStream,
};
use gpupool_shim::aclnn::{aclDataType, aclFormat, aclOpExecutor, aclTensor};
use std::os::raw::c_void;
use std::time::{Duration, Instant};

/// What the NPU tenant does.
#[derive(Debug, Clone, clap::Args)]
pub struct NpuWorkload {
    /// Run for this many seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// The matrices' side (fp32, square).
    #[arg(long, default_value_t = 96)]
    pub side: usize,
    /// First allocate 64 MiB blocks until the pool says ACL_ERROR_RT_MEMORY_ALLOCATION (and keep them).
    #[arg(long)]
    pub oom: bool,
}

const BLOCK: usize = 64 << 20;

/// A square fp32 matrix in device memory and its tensor description.
struct Matrix {
    dev: *mut c_void,
    tensor: *mut aclTensor,
}

pub fn run(w: &NpuWorkload) -> Result<()> {
    let acl = Acl::load(std::path::Path::new("libascendcl.so")).context("loading libascendcl.so")?;
    let op = Opapi::load(std::path::Path::new("libopapi.so")).context("loading libopapi.so")?;
    acl_call!(acl, aclInit(std::ptr::null()))?;
    acl_call!(acl, aclrtSetDevice(0))?;
    let mut stream: aclrtStream = std::ptr::null_mut();
    acl_call!(acl, aclrtCreateStream(&mut stream))?;
    let n = w.side;
    let bytes = n * n * 4;
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
    let matrix = |host: Option<&[f32]>| -> Result<Matrix> {
        let mut dev: *mut c_void = std::ptr::null_mut();
        acl_call!(acl, aclrtMalloc(&mut dev, bytes, aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST))?;
        if let Some(h) = host {
            let kind = aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE;
            acl_call!(acl, aclrtMemcpy(dev, bytes, h.as_ptr().cast(), bytes, kind))?;
        }
        let shape = [n as i64, n as i64];
        let strides = [n as i64, 1];
        // SAFETY: shape and strides are 2-element arrays that live across the call; the storage is
        // `dev`, an allocation of exactly n*n fp32 elements.
        let tensor = unsafe {
            (op.aclCreateTensor)(
                shape.as_ptr(),
                2,
                aclDataType::ACL_FLOAT,
                strides.as_ptr(),
                0,
                aclFormat::ACL_FORMAT_ND,
                shape.as_ptr(),
                2,
                dev,
            )
        };
        ensure!(!tensor.is_null(), "aclCreateTensor returned NULL");
        Ok(Matrix { dev, tensor })
    };
    let (ma, mb, mc) = (matrix(Some(&a))?, matrix(Some(&b))?, matrix(None)?);
    let matmul = || -> Result<()> {
        let mut ws = 0u64;
        let mut exec: *mut aclOpExecutor = std::ptr::null_mut();
        // SAFETY: three live tensor descriptions this process made; the out-pointers are locals.
        let st = unsafe { (op.aclnnMatmulGetWorkspaceSize)(ma.tensor, mb.tensor, mc.tensor, 0, &mut ws, &mut exec) };
        if st != 0 {
            bail!("aclnnMatmulGetWorkspaceSize failed: {st}");
        }
        ensure!(ws == 0, "aclnnMatmul asked for a {ws}-byte workspace");
        // SAFETY: the executor was just made for this call and runs once, on this process's stream.
        let st = unsafe { (op.aclnnMatmul)(std::ptr::null_mut(), 0, exec, stream) };
        if st != 0 {
            bail!("aclnnMatmul failed: {st}");
        }
        Ok(())
    };
    // One product checked against the CPU, so the operators that follow are known to compute.
    matmul()?;
    acl_call!(acl, aclrtSynchronizeStream(stream))?;
    let mut c = vec![0f32; n * n];
    let kind = aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST;
    acl_call!(acl, aclrtMemcpy(c.as_mut_ptr().cast(), bytes, mc.dev, bytes, kind))?;
    for i in 0..n {
        for j in 0..n {
            let want: f32 = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
            let got = c[i * n + j];
            ensure!((got - want).abs() <= 1e-3 * want.abs().max(1.0), "C[{i}][{j}] = {got}, the CPU says {want}");
        }
    }
    let (mut free, mut total) = (0usize, 0usize);
    acl_call!(acl, aclrtGetMemInfo(aclrtMemAttr::ACL_HBM_MEM, &mut free, &mut total))?;
    println!("meminfo {free} {total}");
    let mut held = Vec::new();
    if w.oom {
        let code = loop {
            let mut p: *mut c_void = std::ptr::null_mut();
            match acl_call!(acl, aclrtMalloc(&mut p, BLOCK, aclrtMemMallocPolicy::ACL_MEM_MALLOC_HUGE_FIRST)) {
                Ok(()) => held.push(p),
                Err(crate::backend::AclError::Call { call, code }) if code == ACL_ERROR_RT_MEMORY_ALLOCATION => {
                    break format!("{call}(ACL_ERROR_RT_MEMORY_ALLOCATION({code}))");
                }
                Err(crate::backend::AclError::Call { call, code }) => break format!("{call}({code})"),
                Err(e) => return Err(e.into()),
            }
            if held.len() > 4096 {
                bail!("no quota: allocated {} blocks", held.len());
            }
        };
        println!("oom {} {code}", held.len() * BLOCK);
    }
    let start = monotonic_ns();
    println!("start {start}");
    let end = Instant::now() + Duration::from_secs_f64(w.duration);
    let mut next_report = Instant::now();
    let mut ops = 0u64;
    while Instant::now() < end {
        // Eight operators, then the stream drained: the pool runs each to its end anyway, and the
        // synchronisation keeps this process's view of the count honest.
        for _ in 0..8 {
            matmul()?;
        }
        acl_call!(acl, aclrtSynchronizeStream(stream))?;
        ops += 8;
        if Instant::now() >= next_report {
            println!("ops {} {ops}", monotonic_ns());
            next_report += Duration::from_millis(100);
        }
    }
    println!("ops {} {ops}", monotonic_ns());
    println!("end {}", monotonic_ns());
    for p in held {
        acl_call!(acl, aclrtFree(p))?;
    }
    for m in [ma, mb, mc] {
        // SAFETY: each description was made above and is destroyed once.
        unsafe { (op.aclDestroyTensor)(m.tensor) };
        acl_call!(acl, aclrtFree(m.dev))?;
    }
    acl_call!(acl, aclrtDestroyStream(stream))?;
    Ok(())
}
