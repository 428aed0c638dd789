//! Memset and memcpy node parameters changed through the pool (`cuGraphMemsetNodeSetParams`,
//! `cuGraphExecMemsetNodeSetParams`, `cuGraphMemcpyNodeSetParams`,
//! `cuGraphExecMemcpyNodeSetParams`): the new parameters are checked exactly as a new node's
//! ([`Session::memset_node_params`], [`Session::memcpy_node_params`]: this session's memory on the
//! graph's device, page-locked host regions) before the backend sees them; the backend then checks
//! the node's kind and, for an instantiated graph, NVIDIA's limits (one-dimensional operands).
//! Reading parameters back: the client answers what it added or set itself; for a node it never
//! described (captured, or of a cloned graph) it asks here, and the backend's parameters are
//! answered in the session's terms (a host end as the session's region and offset, an array by
//! its handle). Event nodes' events are read back and changed here too (events of the session on
//! the graph's device). This module owns no state.

use super::dispatch::{Fail, INVALID_VALUE, NOT_SUPPORTED, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::EventId;
use gpupool_protocol::ops::{Copy3D, Copy3DEnd, DevicePtr, GraphExecId, MemSpace, Memset, MemsetValue, answer};
use gpupool_shim::cuda::{CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUevent, CUgraphNode, CUmemorytype};

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
    pub(super) fn param_node(&self, node: u64, exec: Option<GraphExecId>) -> Result<(CUgraphNode, u32)> {
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

impl Session {
    /// A memset node's parameters as the backend holds them.
    pub(super) fn memset_node_get_params(&mut self, node: u64) -> Result<answer::MemsetParams> {
        let (n, d) = self.param_node(node, None)?;
        self.enter(d)?;
        let mut p = CUDA_MEMSET_NODE_PARAMS { dst: 0, pitch: 0, value: 0, elementSize: 0, width: 0, height: 0 };
        call!(self.shared.cuda, cuGraphMemsetNodeGetParams(n, &mut p))?;
        let value = match p.elementSize {
            1 => MemsetValue::U8(p.value as u8),
            2 => MemsetValue::U16(p.value as u16),
            4 => MemsetValue::U32(p.value),
            e => return Err(Fail::invalid_value(format!("the backend answered element size {e}"))),
        };
        let (width, height, pitch) = (p.width as u64, p.height as u64, p.pitch as u64);
        Ok(answer::MemsetParams { set: Memset { dst: DevicePtr(p.dst), value, width, height, pitch } })
    }

    /// A memcpy node's copy as the backend holds it, each end in the session's terms.
    pub(super) fn memcpy_node_get_params(&mut self, node: u64) -> Result<answer::CopyParams> {
        let (n, d) = self.param_node(node, None)?;
        self.enter(d)?;
        let mut c = CUDA_MEMCPY3D::default();
        call!(self.shared.cuda, cuGraphMemcpyNodeGetParams(n, &mut c))?;
        let src = self.node_copy_end(c.srcMemoryType, c.srcHost as u64, c.srcDevice, c.srcArray as u64)?;
        let dst = self.node_copy_end(c.dstMemoryType, c.dstHost as u64, c.dstDevice, c.dstArray as u64)?;
        let end = |space, x_bytes, y, z, pitch, height| Copy3DEnd {
            space,
            x_bytes: x_bytes as u64,
            y: y as u64,
            z: z as u64,
            pitch: pitch as u64,
            height: height as u64,
        };
        let copy = Copy3D {
            src: end(src, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch, c.srcHeight),
            dst: end(dst, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch, c.dstHeight),
            width_bytes: c.WidthInBytes as u64,
            height: c.Height as u64,
            depth: c.Depth as u64,
        };
        Ok(answer::CopyParams { copy: Box::new(copy) })
    }

    /// One end of a backend copy: device memory as it is, an array by its handle, host memory as
    /// the session's region holding it (a region the client has unmapped, held for the graph, has
    /// no name left: NOT_SUPPORTED).
    fn node_copy_end(&self, t: CUmemorytype, host: u64, device: u64, array: u64) -> Result<MemSpace> {
        match t {
            CUmemorytype::CU_MEMORYTYPE_ARRAY => Ok(MemSpace::Array(array)),
            CUmemorytype::CU_MEMORYTYPE_HOST => self
                .regions
                .iter()
                .find_map(|(&id, r)| {
                    let base = r.map.as_ptr() as u64;
                    (host >= base && host < base + r.map.len() as u64)
                        .then_some(MemSpace::Region { id, offset: host - base })
                })
                .ok_or_else(|| {
                    Fail::new(NOT_SUPPORTED, "the memcpy node's host memory is no longer mapped by the client")
                }),
            _ => Ok(MemSpace::Device(DevicePtr(device))),
        }
    }
}

impl Session {
    /// `cuGraphEventRecordNodeGetEvent` / `cuGraphEventWaitNodeGetEvent`: the node's event, as
    /// this session's id (every event a node of the session can hold is one of its own).
    pub(super) fn event_node_event(&mut self, node: u64, record: bool) -> Result<answer::Event> {
        let (n, d) = self.param_node(node, None)?;
        self.enter(d)?;
        let mut e: CUevent = std::ptr::null_mut();
        if record {
            call!(self.shared.cuda, cuGraphEventRecordNodeGetEvent(n, &mut e))?;
        } else {
            call!(self.shared.cuda, cuGraphEventWaitNodeGetEvent(n, &mut e))?;
        }
        match self.events.iter().find(|(_, (x, _))| x.0 == e) {
            Some((&event, _)) => Ok(answer::Event { event }),
            None => Err(Fail::new(NOT_SUPPORTED, format!("node {node}: its event is no longer one of the session's"))),
        }
    }

    /// `cuGraphEvent{Record,Wait}NodeSetEvent`, or with `exec` `cuGraphExecEvent{Record,Wait}NodeSetEvent`:
    /// the node's event becomes `event`, an event of this session on the graph's device.
    pub(super) fn event_node_set_event(
        &mut self,
        exec: Option<GraphExecId>,
        node: u64,
        event: EventId,
        record: bool,
    ) -> Result<()> {
        let (n, d) = self.param_node(node, exec)?;
        let (e, ed) = self.event(event)?;
        if ed != d {
            return Err(Fail::invalid_value("the event is on another device than the graph"));
        }
        let x = match exec {
            Some(x) => Some(self.exec(x, INVALID_VALUE)?.0),
            None => None,
        };
        self.enter(d)?;
        let cu = &self.shared.cuda;
        match (x, record) {
            (None, true) => call!(cu, cuGraphEventRecordNodeSetEvent(n, e.0)),
            (None, false) => call!(cu, cuGraphEventWaitNodeSetEvent(n, e.0)),
            (Some(x), true) => call!(cu, cuGraphExecEventRecordNodeSetEvent(x.0, n, e.0)),
            (Some(x), false) => call!(cu, cuGraphExecEventWaitNodeSetEvent(x.0, n, e.0)),
        }?;
        Ok(())
    }
}
