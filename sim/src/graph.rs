//! CUDA graphs, as stream capture makes them: the work a stream received between
//! `cuStreamBeginCapture` and `cuStreamEndCapture`, in order, replayed on a stream by
//! `cuGraphLaunch`. Graphs built node by node (`cuGraphAdd*Node`) are not simulated.

use crate::stream::{Job, Work};

/// A captured graph: a chain of work, in capture order.
pub struct Graph {
    pub ctx_handle: u64,
    pub nodes: Vec<(Work, Job)>,
}

/// An instantiated graph (`cuGraphInstantiateWithFlags`): its own copy of the chain,
/// unaffected by later changes to (or destruction of) the graph.
pub struct GraphExec {
    pub ctx_handle: u64,
    pub nodes: Vec<(Work, Job)>,
}
