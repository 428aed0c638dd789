//! The simulated accelerator: a real `libcuda.so.1` and `libnvidia-ml.so.1` that run
//! on the CPU.
//!
//! Owns: device configuration, the driver state machine (init, devices, primary and
//! regular contexts, per-thread context stacks), device memory in per-context
//! device-only address spaces with exact accounting, streams executed by worker
//! threads in real wall time, events, modules parsed from PTX, launches, and the
//! NVML view of the same devices. Every exported symbol is the vendor's name and
//! signature (checked against `gpupool-shim`, which is checked against NVIDIA's
//! headers), and every pointer or handle a caller passes is validated.
//!
//! Must not: know about the pool (daemon, quotas, tenants). It is a driver; the
//! daemon loads it exactly as it loads NVIDIA's.
//!
//! Layout: `api/` holds the `extern "C"` edge, split by API family; everything under
//! it is safe Rust over [`driver`], [`context`], [`memory`], [`stream`], [`event`],
//! [`module`] and [`launch`]; [`array`] and [`texture`] hold CUDA arrays and texture
//! and surface objects.

pub mod api;
pub mod array;
pub mod capture;
pub mod config;
pub mod context;
pub mod device;
pub mod driver;
pub mod error;
pub mod event;
pub mod exec;
pub mod fatbin;
pub mod graph;
pub mod graph_cond;
pub mod graph_mem;
pub mod handles;
pub mod launch;
pub mod memory;
pub mod mempool;
pub mod module;
pub mod preempt;
pub mod printf;
pub mod ptx;
pub mod stream;
pub mod texture;
pub mod utilization;
