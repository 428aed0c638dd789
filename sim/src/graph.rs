//! CUDA graphs: nodes and the dependencies between them, made by stream capture (the work a
//! stream received between `cuStreamBeginCapture` and `cuStreamEndCapture`, a chain in capture
//! order) or node by node (`cuGraphAdd*Node`, `cuGraphAddDependencies`, child graphs).
//!
//! An instantiated graph (`cuGraphInstantiateWithFlags`) is the nodes in an order that honours
//! every dependency (of the valid orders, the one closest to the order the nodes were added),
//! child graphs inlined; `cuGraphLaunch` queues them on the stream in that order. A GPU may run
//! independent nodes at once; running them one after another is one of the schedules it may pick.

use crate::error::{CuResult, fail};
use crate::event::Event;
use crate::launch::LaunchConfig;
use crate::module::Function;
use crate::stream::{Job, Work};
use gpupool_shim::cuda::CUresult;
use std::sync::{Arc, Mutex, MutexGuard};

/// The most nodes a graph may hold (a node's handle carries its index in 15 bits).
pub const MAX_NODES: usize = (1 << 15) - 1;

/// A kernel node's launch (made by `cuGraphAddKernelNode` or captured from `cuLaunchKernel`), kept
/// so that `cuGraphKernelNodeGetParams` can answer it.
#[derive(Clone)]
pub struct KernelLaunch {
    /// The `CUfunction` the application named.
    pub handle: u64,
    pub f: Arc<Function>,
    pub cfg: LaunchConfig,
    /// Shared by the node's copies, so the addresses `cuGraphKernelNodeGetParams` hands out stay
    /// valid as long as the node (NVIDIA's promise) whichever copy answered.
    pub args: Arc<KernelArgs>,
}

/// A kernel's packed parameter buffer and the address of each parameter in it (the
/// `kernelParams` array `cuGraphKernelNodeGetParams` answers).
pub struct KernelArgs {
    pub bytes: Vec<u8>,
    ptrs: Vec<usize>,
}

impl KernelArgs {
    pub fn new(f: &Function, bytes: Vec<u8>) -> Arc<KernelArgs> {
        let base = bytes.as_ptr() as usize;
        // The buffer is never written again, so its heap address is fixed from here on.
        let ptrs = f.entry.params.iter().map(|p| base + p.offset as usize).collect();
        Arc::new(KernelArgs { bytes, ptrs })
    }

    /// The `void**` array: one pointer per parameter, into [`KernelArgs::bytes`].
    pub fn array(&self) -> *mut *mut std::ffi::c_void {
        self.ptrs.as_ptr().cast_mut().cast()
    }
}

/// A host node's function and argument (the application's addresses), kept so that
/// `cuGraphHostNodeGetParams` can answer them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HostFn {
    pub f: usize,
    pub user: usize,
}

impl HostFn {
    /// The node's work: the function called with its argument on the stream's worker (each stream
    /// has its own, so a host function that blocks holds back its stream only, as on a GPU).
    pub fn job(self) -> Job {
        Arc::new(move || {
            // SAFETY: `f` is the CUhostFn the application passed (non-null, checked when the node
            // was made or changed), restored to its type.
            let f: unsafe extern "C" fn(*mut std::ffi::c_void) = unsafe { std::mem::transmute(self.f) };
            // SAFETY: the application's function with its own argument, each time the graph runs.
            unsafe { f(self.user as *mut std::ffi::c_void) };
            Ok(())
        })
    }
}

/// A memset node's parameters as given (the context is the graph's).
pub type MemsetParams = gpupool_shim::cuda::CUDA_MEMSET_NODE_PARAMS;

/// A memcpy node's parameters as given.
pub struct MemcpyParams(pub gpupool_shim::cuda::CUDA_MEMCPY3D);
impl MemcpyParams {
    /// The parameters (a method, so that a closure captures the whole wrapper, which is `Sync`).
    pub fn get(&self) -> &gpupool_shim::cuda::CUDA_MEMCPY3D {
        &self.0
    }
}
// SAFETY: the host pointers in it are the application's, which it keeps valid for the graph's runs
// (as CUDA requires of a memcpy node's host memory); nothing here writes through them.
unsafe impl Send for MemcpyParams {}
// SAFETY: as above.
unsafe impl Sync for MemcpyParams {}

#[derive(Clone)]
pub enum Op {
    /// Captured work.
    Captured(Work, Job),
    Kernel(KernelLaunch, Job),
    /// A memset or memcpy node keeps its parameters, which `cuGraphMemsetNodeGetParams` and
    /// `cuGraphMemcpyNodeGetParams` answer.
    Memset(MemsetParams, Job),
    Memcpy(Arc<MemcpyParams>, Job),
    Host(HostFn, Job),
    EventRecord(Arc<Event>),
    EventWait(Arc<Event>),
    /// The node's own copy of the child graph, made when the node was added (as CUDA clones
    /// it); `cuGraphChildGraphNodeGetGraph` hands it out, and changes to it are the node's.
    Child(Arc<Graph>),
    Empty,
    /// Graph memory ([`crate::graph_mem`]): allocated when the graph is uploaded or launched,
    /// so nothing runs at the node itself.
    MemAlloc(Arc<crate::graph_mem::AllocParams>),
    MemFree(u64),
    /// A conditional node ([`crate::graph_cond`]).
    Conditional(Arc<CondNode>),
    /// A node `cuGraphDestroyNode` removed: a hole, so that the other nodes keep their indices
    /// (their handles carry them) and a clone's nodes the indices of the original's.
    Removed,
}

impl Op {
    /// The node type's name, as `cuGraphDebugDotPrint` shows it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Op::Captured(Work::Kernel, _) | Op::Kernel(..) => "KERNEL",
            Op::Captured(Work::Memory, _) | Op::Memcpy(..) => "MEMCPY",
            Op::Memset(..) => "MEMSET",
            Op::Captured(Work::Control, _) | Op::Host(..) => "HOST",
            Op::EventRecord(_) => "EVENT_RECORD",
            Op::EventWait(_) => "WAIT_EVENT",
            Op::Child(_) => "CHILD_GRAPH",
            Op::Empty => "EMPTY",
            Op::MemAlloc(_) => "MEM_ALLOC",
            Op::MemFree(_) => "MEM_FREE",
            Op::Conditional(_) => "CONDITIONAL",
            Op::Removed => "REMOVED",
        }
    }
}

/// A conditional node as added: its handle, type, body graphs (made by the driver, each with a
/// handle of its own that goes with the node) and the array of those handles the application was
/// given (`phGraph_out`, valid while the node lives).
pub struct CondNode {
    pub handle: u64,
    pub kind: u32,
    pub bodies: Vec<Arc<Graph>>,
    /// The bodies' `CUgraph` handles (pointer-sized, as the application reads them).
    pub handles_out: Box<[u64]>,
}

#[derive(Clone)]
pub struct Node {
    pub op: Op,
    /// Indices of the nodes this one depends on.
    pub deps: Vec<usize>,
}

/// A graph of one context.
pub struct Graph {
    pub ctx_handle: u64,
    nodes: Mutex<Vec<Node>>,
    /// For a clone (`cuGraphClone`): the original's handle and how many node indices it had then;
    /// node `i` below that is the clone of the original's node `i` (`cuGraphNodeFindInClone`).
    pub origin: Option<(u64, usize)>,
    /// For a child graph node's graph: its handle, once `cuGraphChildGraphNodeGetGraph` gave one
    /// (it goes with the node; the application cannot destroy it).
    pub embedded: std::sync::OnceLock<u64>,
}

impl Graph {
    pub fn new(ctx_handle: u64, nodes: Vec<Node>) -> Graph {
        Graph { ctx_handle, nodes: Mutex::new(nodes), origin: None, embedded: std::sync::OnceLock::new() }
    }

    /// A copy of `original` (handle `handle`): the same nodes at the same indices.
    pub fn clone_of(original: &Graph, handle: u64) -> Graph {
        let nodes = Graph::copy_nodes(&original.nodes());
        let origin = Some((handle, nodes.len()));
        Graph { origin, ..Graph::new(original.ctx_handle, nodes) }
    }

    /// A copy of `nodes` that shares no child graph with them (each child node gets its own).
    pub fn copy_nodes(nodes: &[Node]) -> Vec<Node> {
        nodes
            .iter()
            .map(|n| match &n.op {
                Op::Child(c) => Node {
                    op: Op::Child(Arc::new(Graph::new(c.ctx_handle, Graph::copy_nodes(&c.nodes())))),
                    deps: n.deps.clone(),
                },
                _ => n.clone(),
            })
            .collect()
    }

    /// The handles `cuGraphChildGraphNodeGetGraph` gave out for child graphs in `nodes`, at any
    /// depth: they go with the nodes.
    pub fn embedded_handles(nodes: &[Node], out: &mut Vec<u64>) {
        for n in nodes {
            match &n.op {
                Op::Child(c) => {
                    out.extend(c.embedded.get().copied());
                    Graph::embedded_handles(&c.nodes(), out);
                }
                Op::Conditional(c) => {
                    for b in &c.bodies {
                        out.extend(b.embedded.get().copied());
                        Graph::embedded_handles(&b.nodes(), out);
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether `nodes` hold a conditional node, at any depth of child graphs.
    pub fn has_conditionals(nodes: &[Node]) -> bool {
        nodes.iter().any(|n| match &n.op {
            Op::Conditional(_) => true,
            Op::Child(c) => Graph::has_conditionals(&c.nodes()),
            _ => false,
        })
    }

    /// Whether `i` names a node of this graph (not one destroyed).
    pub fn live(nodes: &[Node], i: usize) -> bool {
        nodes.get(i).is_some_and(|n| !matches!(n.op, Op::Removed))
    }

    /// `cuGraphDestroyNode`: node `i` goes, and with it every edge to or from it.
    pub fn destroy_node(&self, i: usize) -> CuResult<()> {
        let mut nodes = self.nodes();
        if !Graph::live(&nodes, i) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the node is not in the graph".into());
        }
        nodes[i] = Node { op: Op::Removed, deps: Vec::new() };
        for n in nodes.iter_mut() {
            n.deps.retain(|&d| d != i);
        }
        Ok(())
    }

    /// `cuGraphRemoveDependencies`: the edges `from[k] -> to[k]`, all or none: an edge that does
    /// not exist (or is named twice) is CUDA_ERROR_INVALID_VALUE and removes nothing.
    pub fn remove_deps(&self, from: &[usize], to: &[usize]) -> CuResult<()> {
        let mut nodes = self.nodes();
        for (k, (&a, &b)) in from.iter().zip(to).enumerate() {
            let twice = from[..k].iter().zip(&to[..k]).any(|(&x, &y)| (x, y) == (a, b));
            if !Graph::live(&nodes, a) || !Graph::live(&nodes, b) || !nodes[b].deps.contains(&a) || twice {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the dependency does not exist".into());
            }
        }
        for (&a, &b) in from.iter().zip(to) {
            nodes[b].deps.retain(|&d| d != a);
        }
        Ok(())
    }

    pub fn nodes(&self) -> MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a node after checking its dependencies (nodes of this graph, none twice); its index.
    pub fn add(&self, op: Op, deps: Vec<usize>) -> CuResult<usize> {
        let mut nodes = self.nodes();
        if nodes.len() >= MAX_NODES {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("a graph holds at most {MAX_NODES} nodes"));
        }
        for (k, &d) in deps.iter().enumerate() {
            if !Graph::live(&nodes, d) || deps[..k].contains(&d) {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    "a dependency is not a node of this graph, or is named twice".into()
                });
            }
        }
        nodes.push(Node { op, deps });
        Ok(nodes.len() - 1)
    }
}

/// A step of an instantiated graph, as `cuGraphLaunch` queues it.
#[derive(Clone)]
pub enum Step {
    Run(Work, Job),
    Record(Arc<Event>),
    Wait(Arc<Event>),
    /// A conditional node, run where the launch gets to it ([`crate::graph_cond::Cond::run`]).
    Cond(Arc<crate::graph_cond::Cond>),
}

/// The order of `nodes` that honours every dependency, preferring lower indices; a cycle is
/// CUDA_ERROR_INVALID_VALUE.
fn order(nodes: &[Node]) -> CuResult<Vec<usize>> {
    let n = nodes.len();
    let mut waiting: Vec<usize> = nodes.iter().map(|x| x.deps.len()).collect();
    let mut dependents = vec![Vec::new(); n];
    for (i, x) in nodes.iter().enumerate() {
        for &d in &x.deps {
            dependents[d].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut out = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        out.push(i);
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.insert(j);
            }
        }
    }
    if out.len() != n {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the graph's dependencies form a cycle".into());
    }
    Ok(out)
}

/// The steps of `nodes` in dependency order, child graphs inlined; `top` gets, for each top-level
/// kernel, host, memset, memcpy or event node, the index of its step (its parameters can be changed
/// there).
fn flatten(nodes: &[Node], steps: &mut Vec<Step>, mut top: Option<&mut Vec<Option<usize>>>) -> CuResult<()> {
    if let Some(t) = top.as_deref_mut() {
        t.resize(nodes.len(), None);
    }
    for i in order(nodes)? {
        let at = steps.len();
        match &nodes[i].op {
            Op::Captured(w, j) => steps.push(Step::Run(*w, j.clone())),
            Op::Kernel(_, j) => steps.push(Step::Run(Work::Kernel, j.clone())),
            Op::Memset(_, j) | Op::Memcpy(_, j) => steps.push(Step::Run(Work::Memory, j.clone())),
            Op::Host(_, j) => steps.push(Step::Run(Work::Control, j.clone())),
            Op::EventRecord(e) => steps.push(Step::Record(e.clone())),
            Op::EventWait(e) => steps.push(Step::Wait(e.clone())),
            Op::Conditional(c) => steps.push(Step::Cond(Arc::new(cond_steps(c)?))),
            Op::Child(c) => flatten(&c.nodes(), steps, None)?,
            Op::Empty | Op::MemAlloc(_) | Op::MemFree(_) | Op::Removed => {}
        }
        let settable = matches!(
            nodes[i].op,
            Op::Kernel(..)
                | Op::Captured(Work::Kernel, _)
                | Op::Host(..)
                | Op::Memset(..)
                | Op::Memcpy(..)
                | Op::EventRecord(_)
                | Op::EventWait(_)
        );
        if let Some(t) = top.as_deref_mut()
            && settable
        {
            t[i] = Some(at);
        }
    }
    Ok(())
}

/// Why `cuGraphExecUpdate` refused: the `CUgraphExecUpdateResult`, and the graph's nodes it names
/// (`errorNode`, and `errorFromNode` for an edge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateError {
    pub result: u32,
    pub node: Option<usize>,
    pub from: Option<usize>,
}

/// A conditional node's bodies as steps: the node types CUDA allows in a body (kernels,
/// memsets, copies, empty nodes, child graphs and conditionals), others refused.
fn cond_steps(c: &CondNode) -> CuResult<crate::graph_cond::Cond> {
    let handle = crate::graph_cond::lookup(c.handle)?;
    let mut bodies = Vec::with_capacity(c.bodies.len());
    for b in &c.bodies {
        let nodes = b.nodes();
        let bad = nodes.iter().find(|n| {
            matches!(n.op, Op::Host(..) | Op::EventRecord(_) | Op::EventWait(_) | Op::MemAlloc(_) | Op::MemFree(_))
                || matches!(n.op, Op::Captured(Work::Control, _))
        });
        if let Some(n) = bad {
            let t = n.op.type_name();
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("a conditional node's body cannot hold a {t} node")
            });
        }
        let mut steps = Vec::new();
        flatten(&nodes, &mut steps, None)?;
        bodies.push(steps);
    }
    Ok(crate::graph_cond::Cond { handle, kind: c.kind, bodies })
}

/// The conditional handles `steps` use, at any depth (given their defaults at each launch).
fn cond_handles(steps: &[Step], out: &mut Vec<Arc<crate::graph_cond::Handle>>) {
    for s in steps {
        if let Step::Cond(c) = s {
            if !out.iter().any(|h| Arc::ptr_eq(h, &c.handle)) {
                out.push(c.handle.clone());
            }
            for b in &c.bodies {
                cond_handles(b, out);
            }
        }
    }
}

/// What `cuGraphExecUpdate` compares: each node's type and dependencies, child graphs' inside.
#[derive(PartialEq, Eq)]
pub struct Topology(Vec<(&'static str, Vec<usize>, Option<Topology>)>);

impl Topology {
    pub fn of(nodes: &[Node]) -> Topology {
        Topology(
            nodes
                .iter()
                .map(|n| {
                    let inner = match &n.op {
                        Op::Child(c) => Some(Topology::of(&c.nodes())),
                        _ => None,
                    };
                    (n.op.type_name(), n.deps.clone(), inner)
                })
                .collect(),
        )
    }

    /// Why `other` cannot update a graph of this topology: the result code (a
    /// `CUgraphExecUpdateResult`), the first node that differs, if one does, and for an edge that
    /// differs its other end (CUDA's `errorFromNode`).
    /// Nodes are paired in the order they were added, destroyed nodes left out (so their holes
    /// do not count); the nodes answered are `other`'s indices.
    pub fn mismatch(&self, other: &Topology) -> Option<UpdateError> {
        const TOPOLOGY_CHANGED: u32 = 2;
        const NODE_TYPE_CHANGED: u32 = 3;
        let (a, b) = (self.live(), other.live());
        if a.len() != b.len() {
            return Some(UpdateError { result: TOPOLOGY_CHANGED, node: None, from: None });
        }
        for (x, y) in a.iter().zip(&b) {
            if x.1 != y.1 {
                return Some(UpdateError { result: NODE_TYPE_CHANGED, node: Some(y.0), from: None });
            }
            if x.2 != y.2 {
                // The first dependency one side has and the other has not, as `other`'s node.
                let added = y.2.iter().find(|d| !x.2.contains(d));
                let removed = x.2.iter().find(|d| !y.2.contains(d));
                let from = added.or(removed).map(|&pos| b[pos].0);
                return Some(UpdateError { result: TOPOLOGY_CHANGED, node: Some(y.0), from });
            }
            if x.3 != y.3 {
                return Some(UpdateError { result: TOPOLOGY_CHANGED, node: Some(y.0), from: None });
            }
        }
        None
    }

    /// The nodes that are not holes: (index, type, dependencies as positions in this list,
    /// sorted, child topology).
    #[allow(clippy::type_complexity)]
    fn live(&self) -> Vec<(usize, &'static str, Vec<usize>, Option<&Topology>)> {
        let kept: Vec<usize> = (0..self.0.len()).filter(|&i| self.0[i].0 != "REMOVED").collect();
        kept.iter()
            .map(|&i| {
                let t = &self.0[i];
                let mut deps: Vec<usize> = t.1.iter().filter_map(|d| kept.iter().position(|k| k == d)).collect();
                deps.sort_unstable();
                (i, t.0, deps, t.2.as_ref())
            })
            .collect()
    }
}

/// An instantiated graph: its own copy of the steps, unaffected by later changes to (or the
/// destruction of) the graph; a kernel node's step can be changed in place, and every node's
/// parameters from a graph of the same topology (`cuGraphExecUpdate`).
pub struct GraphExec {
    pub ctx_handle: u64,
    /// The graph it was made from (nodes are named by that graph's node handles).
    pub graph: u64,
    /// The flags it was instantiated with (`cuGraphExecGetFlags`).
    pub flags: u64,
    steps: Mutex<Vec<Step>>,
    /// The conditional handles its steps use.
    pub cond_handles: Vec<Arc<crate::graph_cond::Handle>>,
    /// Per node of the graph: its step, if it is a kernel, host, memset, memcpy or event node.
    top: Vec<Option<usize>>,
    topology: Topology,
}

impl GraphExec {
    pub fn new(graph: &Graph, graph_handle: u64, flags: u64) -> CuResult<GraphExec> {
        let nodes = graph.nodes();
        let (mut steps, mut top) = (Vec::new(), Vec::new());
        flatten(&nodes, &mut steps, Some(&mut top))?;
        let topology = Topology::of(&nodes);
        let mut cond_handles = Vec::new();
        self::cond_handles(&steps, &mut cond_handles);
        let steps = Mutex::new(steps);
        Ok(GraphExec { ctx_handle: graph.ctx_handle, graph: graph_handle, flags, steps, cond_handles, top, topology })
    }

    /// `cuGraphExecUpdate`: every node's parameters from `graph`, whose topology must be this one's
    /// (then its steps come in the same order). `Err`: why, with the nodes that differ.
    pub fn update(&self, graph: &Graph) -> Result<(), UpdateError> {
        const ERROR: UpdateError = UpdateError { result: 1, node: None, from: None };
        let nodes = graph.nodes();
        if let Some(why) = self.topology.mismatch(&Topology::of(&nodes)) {
            return Err(why);
        }
        if graph.ctx_handle != self.ctx_handle {
            return Err(ERROR);
        }
        let mut steps = Vec::new();
        flatten(&nodes, &mut steps, None).map_err(|_| ERROR)?;
        *self.steps.lock().unwrap_or_else(|e| e.into_inner()) = steps;
        Ok(())
    }

    pub fn steps(&self) -> Vec<Step> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The type name (as [`Op::type_name`]) of node `index` of the graph this was made from.
    pub fn node_type(&self, index: usize) -> Option<&'static str> {
        self.topology.0.get(index).map(|t| t.0)
    }

    /// Replaces the event of node `index`'s step, an event record (`record`) or wait node's.
    pub fn set_event(&self, index: usize, record: bool, event: Arc<Event>) -> CuResult<()> {
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        match (self.top.get(index), record) {
            (Some(&Some(at)), true) if matches!(steps[at], Step::Record(_)) => steps[at] = Step::Record(event),
            (Some(&Some(at)), false) if matches!(steps[at], Step::Wait(_)) => steps[at] = Step::Wait(event),
            _ => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!(
                        "not an event {} node of the graph this was instantiated from",
                        if record { "record" } else { "wait" }
                    )
                });
            }
        }
        Ok(())
    }

    /// Replaces the job of node `index`'s step, which must be a `work` step (a kernel node's is
    /// `Work::Kernel`, a host node's `Work::Control`).
    pub fn set_job(&self, index: usize, work: Work, job: Job) -> CuResult<()> {
        let mut steps = self.steps.lock().unwrap_or_else(|e| e.into_inner());
        match self.top.get(index) {
            Some(&Some(at)) if matches!(steps[at], Step::Run(w, _) if w == work) => {
                steps[at] = Step::Run(work, job);
                Ok(())
            }
            _ => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("not a {work:?} node of the graph this was instantiated from")
            }),
        }
    }
}
