//! Driver API semantics of the simulator, checked through its C ABI against NVIDIA's
//! documented behaviour: error codes for bad inputs, context stacks, stream ordering,
//! events, modules and launches, and concurrent use. One file per API family under
//! `driver_semantics/`.
//!
//! Tests that need their own simulator configuration, or must run before `cuInit`, are
//! `isolated_test!`s: each runs in a fresh copy of this binary. The others share one
//! initialised simulator in this process and each work in a context of their own.

#[path = "driver_semantics/arrays.rs"]
mod arrays;
#[path = "driver_semantics/concurrency.rs"]
mod concurrency;
#[path = "driver_semantics/context.rs"]
mod context;
#[path = "driver_semantics/device.rs"]
mod device;
#[path = "driver_semantics/event.rs"]
mod event;
#[path = "driver_semantics/init.rs"]
mod init;
#[path = "driver_semantics/lifetimes.rs"]
mod lifetimes;
#[path = "driver_semantics/memory.rs"]
mod memory;
#[path = "driver_semantics/module_launch.rs"]
mod module_launch;
#[path = "driver_semantics/proc_address.rs"]
mod proc_address;
#[path = "driver_semantics/stream.rs"]
mod stream;
#[path = "driver_semantics/unified_copy.rs"]
mod unified_copy;
#[path = "driver_semantics/vmm.rs"]
mod vmm;
