//! `libgpupool.so`: loaded with LD_PRELOAD (or installed under the vendor sonames)
//! into unmodified programs.
//!
//! Owns: the exported CUDA driver API and NVML symbols ([`api`], the same names and
//! signatures as the simulator's, checked at compile time against bindgen's declarations
//! through the `cuGetProcAddress` table), the CUDA runtime API of `libcudart.so.12` /
//! `.13` layered on those driver exports ([`runtime`]), cuBLAS and cuBLASLt forwarded to the
//! daemon ([`blas`]), the `dlopen` / `dlmopen` hooks that
//! answer loads of the vendor libraries with itself and hand every other load to glibc as
//! if the caller had called it, so its RUNPATH, `$ORIGIN` and `RTLD_NEXT` still apply
//! ([`hooks`]), the client state and the connection to the daemon ([`client`]), and fork
//! safety.
//!
//! Must not: execute anything on a device itself, recurse through its own hooks, do
//! work in library constructors (the connection opens on the first call that needs it),
//! or let a panic cross `extern "C"` (every export runs under `catch_unwind`).
//!
//! Environment: `GPUPOOL_ENDPOINT` (`unix:///path`; default the daemon's own default:
//! `/run/gpupool/gpupool.sock` for root, else `$XDG_RUNTIME_DIR/gpupool.sock`, else
//! `/tmp/gpupool-<uid>/gpupool.sock`), `GPUPOOL_MEMORY` / `CUDA_DEVICE_MEMORY_LIMIT` / `NPU_MEM_QUOTA` (MB)
//! and `GPUPOOL_COMPUTE` / `CUDA_DEVICE_SM_LIMIT` / `NPU_PRIORITY` (requests that may only narrow the
//! tenant's quota), `GPUPOOL_TOKEN`, `GPUPOOL_LOG=1` (one stderr line per failure).
//!
//! Errors: a daemon that cannot be reached makes `cuInit` fail with
//! `CUDA_ERROR_NOT_INITIALIZED` (calls before a successful `cuInit` get the same); a daemon
//! that goes away later is waited for up to `GPUPOOL_RECONNECT` seconds (default 30; 0: not
//! at all) in case one comes back with the session restored (`client::resume`), else every
//! call that needs it fails with `CUDA_ERROR_DEVICE_UNAVAILABLE` (never a hang). NVML: `NVML_ERROR_DRIVER_NOT_LOADED`
//! and `NVML_ERROR_GPU_IS_LOST`. After `fork`, the child drops the parent's connection
//! without disturbing it and connects afresh on its next call; handles from the parent
//! are not valid in the child.
//!
//! Limits of this release (each documented where it is implemented):
//! - a thread's per-thread default stream (`_ptds`/`_ptsz`, handle 0x2) is a blocking
//!   stream created on its first use and kept until its context goes;
//! - async device-to-host copies into pageable memory wait for their stream and complete
//!   before returning (as CUDA's do); host functions and stream callbacks run on the
//!   calling thread once the stream's earlier work is done;
//! - page-locked host memory from `cuMemAllocHost` / `cuMemHostAlloc` lives in shared
//!   memory (a sealed memfd the daemon maps and page-locks with its backend): copies whose
//!   host side lies inside one allocation need no staging pass, and async ones are queued
//!   on their stream. Memory registered with `cuMemHostRegister` stays plain client
//!   memory, copied through staging like pageable memory; kernels cannot dereference
//!   either;
//! - module images must fit the staging area (8 MiB by default; a larger fat binary is cut
//!   to the device's own cubin and best PTX first); the JIT linker (`cuLink*`) links one
//!   PTX input; device `printf` output comes back from the daemon in `DeviceOutput` frames
//!   and is written through the C library's `stdout` (`client/conn.rs`); the client's
//!   `CU_LIMIT_PRINTF_FIFO_SIZE` is kept here, not applied;
//! - stream capture and graphs are held by the daemon (`api/graph.rs`); the capture mode's
//!   rules are enforced here; graphs built node by node are held there too, except host
//!   and memcpy nodes (refused with `CUDA_ERROR_NOT_SUPPORTED`);
//! - virtual memory management is forwarded (`api/vmm.rs`, pool-daemon/README.md): a
//!   mapped, accessible run is an allocation of the context that reserved its range, and a
//!   shareable handle is a sealed memfd naming the allocation to processes of the same
//!   tenant, valid while the allocation lives rather than while the descriptor is open;
//! - memory pools are kept here over the daemon's allocations (`api/mempool.rs`); an
//!   exportable pool's shareable handle is likewise a sealed memfd naming the pool to the
//!   same tenant, and imported pointers are opened as IPC handles are;
//! - 2D and 3D copies with a pageable host end go through staging (a row wider than the
//!   staging area is `CUDA_ERROR_NOT_SUPPORTED` there); a page-locked end is named in
//!   place, like a linear copy's;
//! - `cuModuleLoad` and `cuLink*` are answered here and are not in the `cuGetProcAddress`
//!   table shared with the simulator (which lacks them): found by symbol; `cuOccupancy*`,
//!   the library API and `cuStreamGetCaptureInfo_v2`/`_v3` are in this library's own addition to
//!   that table (`api/proc_address.rs`), for NVIDIA's runtime;
//! - NVML's running compute processes are the caller's own process alone, with the bytes of
//!   its allocations on the device; no other process is listed, not even the same tenant's
//!   (`api/nvml.rs`); NVLink, fabric and peer-to-peer queries answer as a device without them;
//! - the runtime: see [`runtime`] and README "The CUDA runtime API"; NVIDIA's own runtime
//!   (statically linked, or its libcudart) runs over this library's driver API through the
//!   private `cuGetExportTable` tables served in `api/export_tables` (EXPORT_TABLES.md).
#![deny(unsafe_op_in_unsafe_fn)]

mod acl;
mod api;
mod blas;
mod client;
mod hooks;
mod runtime;
mod util;
