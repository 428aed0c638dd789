//! Where the daemons are (`GPUPOOL_ENDPOINT`, `GPUPOOL_TOKEN`, `GPUPOOL_CA`,
//! `GPUPOOL_TIMEOUT`) and dialling a network one: the protocol crate's parser and dialler,
//! shared with `gpupool run`, `gpupool status` and `gpupool top`, so every command accepts
//! exactly the endpoints this library does.

pub use gpupool_protocol::transport::endpoint::{Endpoint, NetSettings, configured, dial};
