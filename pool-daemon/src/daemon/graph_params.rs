//! Memset and memcpy node parameters changed through the pool (`cuGraphMemsetNodeSetParams`,
//! `cuGraphExecMemsetNodeSetParams`, `cuGraphMemcpyNodeSetParams`,
//! `cuGraphExecMemcpyNodeSetParams`): the new parameters are checked exactly as a new node's
//! ([`Session::memset_node_params`], [`Session::memcpy_node_params`]: this session's memory on the
//! graph's device, page-locked host regions) before the backend sees them; the backend then checks
//! the node's kind and, for an instantiated graph, NVIDIA's limits (one-dimensional operands).
//! Reading parameters back is the client's (it keeps what it set); this module owns no state.

use super::dispatch::{Fail, INVALID_VALUE, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{Copy3D, DevicePtr, GraphExecId, MemSpace, Memset, MemsetValue};
use gpupool_shim::cuda::{CUDA_MEMSET_NODE_PARAMS, CUgraphNode};

impl Session {
    /// A memset node's backend parameters, its memory checked as this session's on device `d`.
    pub(super) fn memset_node_params(&mut self, set: Memset, d: u32) -> Result<CUDA_MEMSET_NODE_PARAMS> {
        let es = u64::from(set.value.element_size());
        let (w, h) = (set.width, set.height.max(1));
        let pitch = if h == 1 { w * es } else { set.pitch };
        let extent = pitch
            .checked_mul(h - 1)
            .and_then(|x| w.checked_mul(es).and_then(|r| x.checked_add(r)))
            .ok_or_else(|| Fail::invalid_value("memset extent overflows"))?;
        self.map_for_node(set.dst.0)?;
        if pitch < w * es || self.owned(set.dst, extent)? != d {
            return Err(Fail::invalid_value("a memset node's memory must be this session's, on the graph's device"));
        }
        let value = match set.value {
            MemsetValue::U8(v) => u32::from(v),
            MemsetValue::U16(v) => u32::from(v),
            MemsetValue::U32(v) => v,
        };
        Ok(CUDA_MEMSET_NODE_PARAMS {
            dst: set.dst.0,
            pitch: pitch as usize,
            value,
            elementSize: es as u32,
            width: w as usize,
            height: h as usize,
        })
    }

    /// Node `node` of this session with its graph's device, checked to be a node of the graph
    /// `exec` was instantiated from when `exec` is given.
    fn param_node(&self, node: u64, exec: Option<GraphExecId>) -> Result<(CUgraphNode, u32)> {
        let Some(&(g, n)) = self.graphs.nodes.get(&node) else {
            return Err(Fail::invalid_value(format!("node {node} is not a node this session holds")));
        };
        if let Some(x) = exec
            && self.graphs.exec_graph.get(&x) != Some(&g)
        {
            return Err(Fail::invalid_value(format!("node {node} is not a node of the instantiated graph")));
        }
        Ok((n.0, self.graph(g)?.1))
    }

    pub(super) fn memset_node_set_params(&mut self, exec: Option<GraphExecId>, node: u64, set: Memset) -> Result<()> {
        let e = exec.map(|x| self.exec(x, INVALID_VALUE)).transpose()?;
        let (n, d) = self.param_node(node, exec)?;
        let p = self.memset_node_params(set, d)?;
        self.enter(d)?;
        match e {
            Some((e, _)) => {
                let ctx = self.tenant_ctxs[&d].ctx.0;
                call!(self.shared.cuda, cuGraphExecMemsetNodeSetParams(e.0, n, &p, ctx))?
            }
            None => call!(self.shared.cuda, cuGraphMemsetNodeSetParams(n, &p))?,
        }
        Ok(())
    }

    pub(super) fn memcpy_node_set_params(&mut self, exec: Option<GraphExecId>, node: u64, copy: Copy3D) -> Result<()> {
        let e = exec.map(|x| self.exec(x, INVALID_VALUE)).transpose()?;
        let (n, d) = self.param_node(node, exec)?;
        for end in [&copy.src, &copy.dst] {
            if let MemSpace::Device(DevicePtr(p)) = end.space {
                self.map_for_node(p)?;
            }
        }
        let p = self.memcpy_node_params(copy, d)?;
        self.enter(d)?;
        match e {
            Some((e, _)) => {
                let ctx = self.tenant_ctxs[&d].ctx.0;
                call!(self.shared.cuda, cuGraphExecMemcpyNodeSetParams(e.0, n, &p, ctx))?
            }
            None => call!(self.shared.cuda, cuGraphMemcpyNodeSetParams(n, &p))?,
        }
        Ok(())
    }
}
