//! Kernel node parameters through the pool: `cuGraphKernelNodeGetParams` answers the backend's
//! launch in the session's terms (its function as the session's id, its parameters packed by the
//! function's layout, whether the backend holds them as `kernelParams` or `extra`), and
//! `cuGraphKernelNodeSetParams` gives a graph's node a new launch, checked as a new node's
//! ([`Session::with_kernel`]). Instantiated graphs are `daemon/graph.rs`'s. Owns no state.

use super::dispatch::{Fail, NOT_SUPPORTED, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{KernelNode, KernelParams, answer};
use gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS;

impl Session {
    pub(super) fn kernel_node_get_params(&mut self, node: u64) -> Result<answer::KernelNodeParams> {
        let (n, d) = self.param_node(node, None)?;
        self.enter(d)?;
        let mut p = CUDA_KERNEL_NODE_PARAMS {
            func: std::ptr::null_mut(),
            gridDimX: 0,
            gridDimY: 0,
            gridDimZ: 0,
            blockDimX: 0,
            blockDimY: 0,
            blockDimZ: 0,
            sharedMemBytes: 0,
            kernelParams: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        call!(self.shared.cuda, cuGraphKernelNodeGetParams_v2(n, &mut p))?;
        // A kernel the daemon launched for the session (a library's, captured) has no id the
        // client knows, so no handle to answer.
        let Some((&func, f)) = self.funcs.iter().find(|(_, f)| f.f.0 == p.func) else {
            return Err(Fail::new(NOT_SUPPORTED, "the kernel node runs a function the session did not load"));
        };
        let layout = f.params.iter().map(|q| (u64::from(q.offset), u64::from(q.size)));
        // SAFETY: the backend's answer: one pointer per parameter of its function, or an `extra`
        // list, owned by the node, which nothing changes during this call.
        let bytes = unsafe { gpupool_abi::launch::pack_kernel_params(layout, p.kernelParams, p.extra) }
            .map_err(|why| Fail::invalid_value(format!("the backend's kernel node parameters: {why}")))?;
        let kernel = KernelNode {
            func,
            grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
            block: [p.blockDimX, p.blockDimY, p.blockDimZ],
            shared_mem_bytes: p.sharedMemBytes,
            params: KernelParams(bytes),
        };
        Ok(answer::KernelNodeParams { kernel })
    }

    /// Changes the graph's node; graphs instantiated from it keep what they had, as in CUDA.
    pub(super) fn kernel_node_set_params(&mut self, node: u64, k: KernelNode) -> Result<()> {
        let (n, d) = self.param_node(node, None)?;
        self.enter(d)?;
        self.with_kernel(d, k, |p| Ok(call!(self.shared.cuda, cuGraphKernelNodeSetParams_v2(n, p))?))
    }
}
