//! `gpupool dra`: the DRA kubelet plugin of driver gpupool.io ([`gpupool_k8s::dra_driver`]),
//! given what its claims' CDI specs name from this binary: the library directory (as `gpupool
//! cdi generate` makes it), the interposer and this executable as the OCI hook.
//!
//! Must not: reach the daemon other than through its sockets (the plugin asks it itself).

use anyhow::{Context as _, Result};
use gpupool_k8s::dra_driver::{self, Options, prepare::CdiBase};
use std::path::PathBuf;
use std::time::Duration;

pub struct Args {
    pub endpoint: Option<String>,
    pub node_name: Option<String>,
    pub registrar_dir: PathBuf,
    pub plugin_dir: PathBuf,
    pub cdi_dir: PathBuf,
    pub lib_dir: PathBuf,
    pub poll: f64,
}

pub fn run(a: Args) -> Result<()> {
    crate::daemon::init_logging();
    anyhow::ensure!(a.poll.is_finite() && a.poll >= 0.05, "--poll {}: at least 0.05 seconds", a.poll);
    let node = a.node_name.or_else(|| std::env::var("NODE_NAME").ok()).filter(|n| !n.is_empty());
    let node = node.context("--node-name (or NODE_NAME): the node this plugin serves")?;
    let socket = match &a.endpoint {
        Some(e) => crate::daemon::listener::parse_endpoint(e)?,
        None => crate::daemon::listener::default_socket_path(),
    };
    let base = CdiBase {
        lib_dir: crate::container::libdir::prepare(&a.lib_dir)?,
        interposer: crate::run::interposer()?,
        gpupool: std::env::current_exe().context("this executable's path (the claims' OCI hook)")?,
        cdi_version: "0.5.0".into(),
    };
    dra_driver::run(Options {
        node,
        socket,
        registrar_dir: a.registrar_dir,
        plugin_dir: a.plugin_dir,
        cdi_dir: a.cdi_dir,
        base,
        poll: Duration::from_secs_f64(a.poll),
    })
}
