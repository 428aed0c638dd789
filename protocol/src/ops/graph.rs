//! Ids of the graph family (`0x0bxx`): CUDA graphs and instantiated graphs the daemon holds
//! for a session, made by stream capture (`cuStreamBeginCapture`/`cuStreamEndCapture`) or
//! `cuGraphCreate`, and launched on a daemon-held stream under the compute scheduler.

use crate::codec::wire_id;

wire_id! {
    /// A graph (`CUgraph`) of one session.
    GraphId;
    /// An instantiated graph (`CUgraphExec`) of one session.
    GraphExecId;
}

crate::codec::wire_struct! {
    /// A kernel node's launch: the function, its configuration and its packed parameters.
    pub struct KernelNode {
        pub func: crate::FuncId, pub grid: [u32; 3], pub block: [u32; 3], pub shared_mem_bytes: u32,
        pub params: crate::ops::KernelParams,
    }
}
