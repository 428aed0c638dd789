//! `gpupool device-plugin`: the Kubernetes device plugin ([`gpupool_k8s::device_plugin`]) fed with
//! this host's daemon's devices, read as `gpupool status` reads them (its control socket's
//! status document).
//!
//! Must not: hold anything of the daemon's open between questions: each is one connection.

use anyhow::Result;
use gpupool_k8s::device_plugin::{self, Names, Options};
use gpupool_k8s::node::{Device, Inventory, devices_from_status};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The daemon serving `socket`, asked through its control socket.
pub struct DaemonInventory(pub PathBuf);

impl Inventory for DaemonInventory {
    fn devices(&self) -> Result<Vec<Device>> {
        devices_from_status(&crate::status::fetch(&self.0)?)
    }
}

/// Which names the resources are registered under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ResourceNames {
    /// gpupool.io/gpu, gpupool.io/gpumem, gpupool.io/gpucores.
    Gpupool,
    /// HAMi's: nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpucores.
    Hami,
}

pub struct Args {
    pub endpoint: Option<String>,
    pub kubelet_dir: PathBuf,
    pub shares: u32,
    pub resource_names: ResourceNames,
    pub gpumem_unit: u64,
    pub health_interval: f64,
}

pub fn run(a: Args) -> Result<()> {
    crate::daemon::init_logging();
    let socket = match &a.endpoint {
        Some(e) => crate::daemon::listener::parse_endpoint(e)?,
        None => crate::daemon::listener::default_socket_path(),
    };
    anyhow::ensure!(
        a.health_interval.is_finite() && a.health_interval >= 0.05,
        "--health-interval {}: at least 0.05 seconds",
        a.health_interval
    );
    let options = Options {
        kubelet_dir: a.kubelet_dir,
        shares: a.shares,
        names: match a.resource_names {
            ResourceNames::Gpupool => Names::Gpupool,
            ResourceNames::Hami => Names::Hami,
        },
        gpumem_unit_mib: a.gpumem_unit,
        health_interval: Duration::from_secs_f64(a.health_interval),
    };
    device_plugin::run(options, Arc::new(DaemonInventory(socket)))
}
