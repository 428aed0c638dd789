//! Conditional graph nodes (CUDA 12.4+): handles made by `cuGraphConditionalHandleCreate`, whose
//! 32-bit value a kernel sets with the device function `cudaGraphSetConditional(handle, value)`
//! ([`set`], called by the PTX interpreter), and IF, WHILE and SWITCH nodes that run their body
//! graphs on that value when the launch reaches them ([`Cond::run`]):
//!
//! - IF: body 0 when the value is non-zero, else body 1 if the node has two;
//! - WHILE: body 0 as long as the value is non-zero, tested before each iteration;
//! - SWITCH: body `n` when the value is `n < size`, none otherwise.
//!
//! A handle made with `CU_GRAPH_COND_ASSIGN_DEFAULT` is given its default value at the start of
//! each launch of a graph that uses it (in stream order); otherwise its value persists between
//! launches. One value per handle: two instantiations of one graph running at once share it (the
//! driver keeps one per instantiated graph).

use crate::error::{CuResult, fail};
use crate::graph::Step;
use gpupool_shim::cuda::CUresult;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// `CU_GRAPH_COND_TYPE_*`.
pub const IF: u32 = 0;
pub const WHILE: u32 = 1;
pub const SWITCH: u32 = 2;

/// One handle: the graph it was made for, its default and its current value.
pub struct Handle {
    pub graph: u64,
    pub ctx_handle: u64,
    default: Option<u32>,
    value: AtomicU32,
}

static HANDLES: Mutex<Option<HashMap<u64, Arc<Handle>>>> = Mutex::new(None);
/// Handle values start high and odd-spaced, so a stray small integer is not one.
static NEXT: AtomicU64 = AtomicU64::new(0x00c0_0d00_0000_0001);

fn with<T>(f: impl FnOnce(&mut HashMap<u64, Arc<Handle>>) -> T) -> T {
    f(HANDLES.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new))
}

/// `cuGraphConditionalHandleCreate`: a handle of `graph` with value `default` (applied at each
/// launch with `assign_default`).
pub fn create(graph: u64, ctx_handle: u64, default: u32, assign_default: bool) -> u64 {
    let h = NEXT.fetch_add(2, Ordering::Relaxed);
    let handle =
        Handle { graph, ctx_handle, default: assign_default.then_some(default), value: AtomicU32::new(default) };
    with(|m| m.insert(h, Arc::new(handle)));
    h
}

pub fn lookup(h: u64) -> CuResult<Arc<Handle>> {
    match with(|m| m.get(&h).cloned()) {
        Some(x) => Ok(x),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{h:#x} is not a conditional handle")),
    }
}

/// `cudaGraphSetConditional` from a kernel of context `ctx_handle`: `false` if `h` names no
/// handle of that context's graphs (another context's is as unknown as a forged one).
pub fn set(h: u64, value: u32, ctx_handle: u64) -> bool {
    with(|m| m.get(&h).filter(|x| x.ctx_handle == ctx_handle).map(|x| x.value.store(value, Ordering::Release)))
        .is_some()
}

/// The handles of a destroyed graph go with it.
pub fn graph_destroyed(graph: u64) {
    with(|m| m.retain(|_, x| x.graph != graph));
}

/// Gives the handles that have one their default value (the start of a launch).
pub fn assign_defaults(handles: &[Arc<Handle>]) {
    for h in handles {
        if let Some(d) = h.default {
            h.value.store(d, Ordering::Release);
        }
    }
}

/// An instantiated conditional node: its handle, its type and its bodies' steps.
pub struct Cond {
    pub handle: Arc<Handle>,
    pub kind: u32,
    pub bodies: Vec<Vec<Step>>,
}

impl Cond {
    /// Runs the node where its launch has got to (on the stream's worker, after the work before).
    pub fn run(&self) -> CuResult<()> {
        let value = || self.handle.value.load(Ordering::Acquire);
        match self.kind {
            IF => {
                let body = if value() != 0 { self.bodies.first() } else { self.bodies.get(1) };
                body.map_or(Ok(()), |b| run_steps(b))
            }
            WHILE => {
                while value() != 0 {
                    run_steps(&self.bodies[0])?;
                }
                Ok(())
            }
            _ => self.bodies.get(value() as usize).map_or(Ok(()), |b| run_steps(b)),
        }
    }
}

/// A body's steps, one after another on the calling thread (bodies hold only kernels, memsets,
/// copies, child graphs' steps and conditionals).
fn run_steps(steps: &[Step]) -> CuResult<()> {
    for s in steps {
        match s {
            Step::Run(_, job) => job()?,
            Step::Cond(c) => c.run()?,
            Step::Record(_) | Step::Wait(_) => {
                return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "an event node in a conditional body".into());
            }
        }
    }
    Ok(())
}
