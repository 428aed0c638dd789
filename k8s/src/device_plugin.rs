//! `gpupool device-plugin`: the kubelet's device plugin API (v1beta1), for clusters without DRA.
//!
//! Three resources, each its own plugin (socket, `Register`, `ListAndWatch`), all counted in
//! units the kubelet can hand out one ID at a time:
//! - `<domain>/gpu`: `--shares` IDs per device (`gpu<N>-<share>`). `Allocate` answers the CDI
//!   devices of the spec `gpupool cdi generate` writes (`gpupool.io/gpu=<N>`), whose edits and
//!   hook put the container in the pool;
//! - `<domain>/gpumem`: the device's memory in `--gpumem-unit` MiB (`mem<N>-<k>`): the container's
//!   memory limit per device, as HAMi's `nvidia.com/gpumem`;
//! - `<domain>/gpucores`: 100 per device (`cores<N>-<k>`): the container's compute percent.
//!
//! `<domain>` is `gpupool.io`, or `nvidia.com` with `--resource-names hami` (HAMi's names, so its
//! users' manifests run unchanged; one set per node, so the node's capacity is not counted twice).
//!
//! The kubelet never tells a device plugin which pod it allocates for, so the limits travel with
//! the container: `Allocate` of gpumem and gpucores sets the annotations `gpupool.io/memory` and
//! `gpupool.io/compute` (the OCI hook makes them the container socket's limits, which the program
//! cannot lift) and the variables `GPUPOOL_MEMORY` and `GPUPOOL_COMPUTE` (the interposer's hello
//! narrows with them, for runtimes that drop the annotations). Either only narrows the tenant's
//! quota; the tenant is the pod's `gpupool.io/tenant` annotation as the runtime passes it.
//!
//! Health: every `--health-interval` the daemon is asked for its devices ([`crate::node::Inventory`]);
//! a device it no longer reports, or reports unhealthy, and every device while the daemon does not
//! answer, is `Unhealthy` in `ListAndWatch` until the daemon sees it again.
//!
//! Must not: reach a device or the daemon other than through the inventory; decide quotas (the
//! daemon does, from the tenant's config).

use crate::deviceplugin::v1beta1 as dp;
use crate::node::{Device, Inventory};
use crate::{registration, unix};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;
use tonic::{Request, Response, Status};

/// The CDI kind of `gpupool cdi generate`'s spec.
pub const CDI_KIND: &str = "gpupool.io/gpu";
/// The annotations the OCI hook reads (pool-daemon/src/container).
pub const ANNOTATION_MEMORY: &str = "gpupool.io/memory";
pub const ANNOTATION_COMPUTE: &str = "gpupool.io/compute";
/// The variables the interposer sends in its hello.
pub const ENV_MEMORY: &str = "GPUPOOL_MEMORY";
pub const ENV_COMPUTE: &str = "GPUPOOL_COMPUTE";
/// The kubelet's gRPC client takes messages up to 4 MiB: a ListAndWatch answer must fit.
const MAX_LIST: usize = 4 << 20;
/// How often the kubelet's socket is checked for a restart.
const KUBELET_CHECK: Duration = Duration::from_secs(1);

/// Which names the resources go by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// `gpupool.io/gpu`, `gpupool.io/gpumem`, `gpupool.io/gpucores`.
    Gpupool,
    /// HAMi's: `nvidia.com/gpu`, `nvidia.com/gpumem`, `nvidia.com/gpucores`.
    Hami,
}

/// The three resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Gpu,
    Memory,
    Cores,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::Gpu, Resource::Memory, Resource::Cores];

    fn suffix(self) -> &'static str {
        match self {
            Resource::Gpu => "gpu",
            Resource::Memory => "gpumem",
            Resource::Cores => "gpucores",
        }
    }

    /// The extended resource name pods ask for.
    pub fn name(self, names: Names) -> String {
        let domain = match names {
            Names::Gpupool => "gpupool.io",
            Names::Hami => "nvidia.com",
        };
        format!("{domain}/{}", self.suffix())
    }

    /// The plugin's socket file name in the kubelet's device plugin directory.
    pub fn socket(self) -> String {
        format!("gpupool-{}.sock", self.suffix())
    }

    fn id_prefix(self) -> &'static str {
        match self {
            Resource::Gpu => "gpu",
            Resource::Memory => "mem",
            Resource::Cores => "cores",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    /// The kubelet's device plugin directory: its `kubelet.sock`, and where the plugins' sockets go.
    pub kubelet_dir: PathBuf,
    /// `gpu` IDs per device: how many containers may share one.
    pub shares: u32,
    pub names: Names,
    /// MiB per `gpumem` ID.
    pub gpumem_unit_mib: u64,
    /// How often the daemon is asked for its devices.
    pub health_interval: Duration,
}

impl Options {
    fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=1000).contains(&self.shares), "--shares {}: 1 to 1000", self.shares);
        anyhow::ensure!(self.gpumem_unit_mib >= 1, "--gpumem-unit: at least 1 MiB");
        anyhow::ensure!(self.health_interval >= Duration::from_millis(50), "--health-interval: at least 0.05 s");
        Ok(())
    }
}

/// One device as the plugins show it: what the daemon last said of it, and whether it is usable.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    device: Device,
    healthy: bool,
}

/// Every device the daemon ever reported (a device it loses stays, unhealthy), by ordinal.
type View = BTreeMap<u32, Seen>;

/// The IDs of `resource` on `d`.
fn ids(o: &Options, resource: Resource, d: &Device) -> u64 {
    match resource {
        Resource::Gpu => o.shares.into(),
        Resource::Memory => (d.total_memory >> 20) / o.gpumem_unit_mib,
        Resource::Cores => 100,
    }
}

fn list(o: &Options, resource: Resource, view: &View) -> dp::ListAndWatchResponse {
    let mut devices = Vec::new();
    for (ordinal, s) in view {
        let health = if s.healthy { dp::HEALTHY } else { dp::UNHEALTHY };
        for k in 0..ids(o, resource, &s.device) {
            devices.push(dp::Device {
                id: format!("{}{ordinal}-{k}", resource.id_prefix()),
                health: health.into(),
                topology: None,
            });
        }
    }
    dp::ListAndWatchResponse { devices }
}

/// `(ordinal, k)` of an ID of `resource`.
fn parse_id(resource: Resource, id: &str) -> Option<(u32, u64)> {
    let (ordinal, k) = id.strip_prefix(resource.id_prefix())?.split_once('-')?;
    Some((ordinal.parse().ok()?, k.parse().ok()?))
}

/// The plugin of one resource.
pub struct Plugin {
    resource: Resource,
    options: Arc<Options>,
    view: watch::Receiver<View>,
}

impl Plugin {
    fn known(&self, id: &str) -> Result<u32, Status> {
        let view = self.view.borrow();
        match parse_id(self.resource, id) {
            Some((ordinal, k))
                if view.get(&ordinal).is_some_and(|s| k < ids(&self.options, self.resource, &s.device)) =>
            {
                Ok(ordinal)
            }
            _ => {
                let why = format!("{}: no device ID {id:?} of this plugin", self.resource.name(self.options.names));
                tracing::warn!("{why}");
                Err(Status::invalid_argument(why))
            }
        }
    }

    fn allocate_one(&self, ids: &[String]) -> Result<dp::ContainerAllocateResponse, Status> {
        let ordinals = ids.iter().map(|id| self.known(id)).collect::<Result<Vec<u32>, Status>>()?;
        let mut r = dp::ContainerAllocateResponse::default();
        let count = ids.len() as u64;
        match self.resource {
            Resource::Gpu => {
                let mut devices = ordinals;
                devices.sort_unstable();
                devices.dedup();
                r.cdi_devices = devices.iter().map(|d| dp::CdiDevice { name: format!("{CDI_KIND}={d}") }).collect();
            }
            Resource::Memory => {
                let mib = format!("{}MiB", count * self.options.gpumem_unit_mib);
                r.envs.insert(ENV_MEMORY.into(), mib.clone());
                r.annotations.insert(ANNOTATION_MEMORY.into(), mib);
            }
            Resource::Cores => {
                if count > 100 {
                    let why = format!(
                        "{} {count}: a percent of a device, at most 100",
                        self.resource.name(self.options.names)
                    );
                    tracing::warn!("{why}");
                    return Err(Status::invalid_argument(why));
                }
                r.envs.insert(ENV_COMPUTE.into(), count.to_string());
                r.annotations.insert(ANNOTATION_COMPUTE.into(), count.to_string());
            }
        }
        Ok(r)
    }
}

/// `size` of `available`, with `must` first. `gpu`: one share per device before a second on any,
/// devices with the most free shares first (a container asking for 2 gets 2 devices, and load
/// spreads). `gpumem`, `gpucores`: packed on as few devices as possible, the device of `must`
/// first, then those with the most free.
fn prefer(resource: Resource, available: &[String], must: &[String], size: usize) -> Vec<String> {
    let mut chosen: Vec<String> = must.to_vec();
    let mut free: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for id in available.iter().filter(|id| !must.contains(id)) {
        if let Some((ordinal, _)) = parse_id(resource, id) {
            free.entry(ordinal).or_default().push(id.clone());
        }
    }
    let must_devices: Vec<u32> = must.iter().filter_map(|id| parse_id(resource, id)).map(|(o, _)| o).collect();
    // Most free first; a device `must` already uses comes last for gpu (spread) and first otherwise.
    let mut order: Vec<u32> = free.keys().copied().collect();
    order.sort_by_key(|o| {
        let used = must_devices.contains(o);
        let rank = if resource == Resource::Gpu { used } else { !used };
        (rank, std::cmp::Reverse(free[o].len()), *o)
    });
    if resource == Resource::Gpu {
        let mut round = 0;
        while chosen.len() < size {
            let before = chosen.len();
            for o in &order {
                if chosen.len() == size {
                    break;
                }
                if let Some(id) = free[o].get(round) {
                    chosen.push(id.clone());
                }
            }
            if chosen.len() == before {
                break;
            }
            round += 1;
        }
    } else {
        for o in &order {
            let take = size.saturating_sub(chosen.len()).min(free[o].len());
            chosen.extend(free[o][..take].iter().cloned());
        }
    }
    chosen
}

type ListStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for Plugin {
    type ListAndWatchStream = ListStream;

    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(plugin_options()))
    }

    async fn list_and_watch(&self, _: Request<dp::Empty>) -> Result<Response<ListStream>, Status> {
        let (o, resource) = (self.options.clone(), self.resource);
        let mut last: Option<dp::ListAndWatchResponse> = None;
        // Every change of the view, as the kubelet wants it: the whole list each time, and only
        // when this resource's list changed.
        let stream = tokio_stream::wrappers::WatchStream::new(self.view.clone()).filter_map(move |view| {
            let now = list(&o, resource, &view);
            if last.as_ref() == Some(&now) {
                return None;
            }
            last = Some(now.clone());
            Some(Ok(now))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| dp::ContainerPreferredAllocationResponse {
                device_i_ds: prefer(
                    self.resource,
                    &c.available_device_i_ds,
                    &c.must_include_device_i_ds,
                    usize::try_from(c.allocation_size).unwrap_or(0),
                ),
            })
            .collect();
        Ok(Response::new(dp::PreferredAllocationResponse { container_responses }))
    }

    async fn allocate(&self, request: Request<dp::AllocateRequest>) -> Result<Response<dp::AllocateResponse>, Status> {
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| self.allocate_one(&c.devices_ids))
            .collect::<Result<Vec<_>, Status>>()?;
        Ok(Response::new(dp::AllocateResponse { container_responses }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        // Not advertised (pre_start_required is false): nothing to do before a container starts.
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

fn plugin_options() -> dp::DevicePluginOptions {
    dp::DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }
}

/// Asks the daemon once and updates `view`; logs each device lost and found, and the daemon
/// going away and coming back (`reachable`: what the last question found).
async fn poll(inventory: &Arc<dyn Inventory>, view: &watch::Sender<View>, reachable: &mut Option<bool>) {
    let inv = inventory.clone();
    let answer = tokio::task::spawn_blocking(move || inv.devices())
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the inventory panicked: {e}")));
    let ok = answer.is_ok();
    if *reachable != Some(ok) {
        match &answer {
            Ok(d) => tracing::info!(devices = d.len(), "the daemon answers"),
            Err(e) => tracing::error!("the daemon does not answer, every device is unhealthy: {e:#}"),
        }
        *reachable = Some(ok);
    }
    let current: HashMap<u32, Device> = answer.unwrap_or_default().into_iter().map(|d| (d.ordinal, d)).collect();
    view.send_if_modified(|v| {
        let before = v.clone();
        for s in v.values_mut() {
            s.healthy = false;
        }
        for (ordinal, d) in &current {
            v.insert(*ordinal, Seen { device: d.clone(), healthy: d.healthy });
        }
        for (ordinal, s) in v.iter() {
            match before.get(ordinal).map(|b| b.healthy) {
                Some(was) if was != s.healthy => {
                    if s.healthy {
                        tracing::info!(device = ordinal, "device is back: healthy");
                    } else {
                        tracing::warn!(device = ordinal, "device lost: unhealthy");
                    }
                }
                None => tracing::info!(device = ordinal, name = %s.device.name, healthy = s.healthy, "device found"),
                _ => {}
            }
        }
        *v != before
    });
}

/// Runs the plugins until an error: serves each resource's socket in `kubelet_dir`, registers
/// them with the kubelet, and does both again whenever the kubelet restarts (a new
/// `kubelet.sock`, or the plugins' sockets removed, as a starting kubelet does).
pub async fn serve(options: Options, inventory: Arc<dyn Inventory>) -> anyhow::Result<()> {
    options.check()?;
    let options = Arc::new(options);
    let (tx, rx) = watch::channel(View::new());
    // The first answer before registering, so the kubelet's first list is the daemon's devices.
    let mut reachable = None;
    poll(&inventory, &tx, &mut reachable).await;
    let interval = options.health_interval;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            poll(&inventory, &tx, &mut reachable).await;
        }
    });
    let kubelet = options.kubelet_dir.join(dp::KUBELET_SOCKET);
    let mut waiting_logged = false;
    loop {
        let Some(kubelet_id) = unix::identity(&kubelet) else {
            if !waiting_logged {
                tracing::info!("waiting for the kubelet's {}", kubelet.display());
                waiting_logged = true;
            }
            tokio::time::sleep(KUBELET_CHECK).await;
            continue;
        };
        waiting_logged = false;
        let servers = start(&options, &rx)?;
        let registered = register(&options, &kubelet).await;
        if let Err(e) = &registered {
            tracing::error!("{e:#}; trying again");
        }
        loop {
            tokio::time::sleep(KUBELET_CHECK).await;
            let restarted = unix::identity(&kubelet) != Some(kubelet_id);
            let removed = servers.iter().any(|(path, _)| unix::identity(path).is_none());
            if restarted || removed || registered.is_err() {
                if registered.is_ok() {
                    tracing::info!(
                        "the kubelet restarted (a new kubelet.sock, or our sockets removed): registering again"
                    );
                }
                break;
            }
        }
        for (_, task) in servers {
            task.abort();
        }
    }
}

/// Serves every resource's plugin on its socket; the sockets exist when this returns.
fn start(
    options: &Arc<Options>,
    view: &watch::Receiver<View>,
) -> anyhow::Result<Vec<(PathBuf, tokio::task::JoinHandle<()>)>> {
    Resource::ALL
        .iter()
        .map(|&resource| {
            let path = options.kubelet_dir.join(resource.socket());
            let incoming = unix::listen(&path).map_err(|e| anyhow::anyhow!("serving {}: {e}", path.display()))?;
            let plugin = Plugin { resource, options: options.clone(), view: view.clone() };
            let server = tonic::transport::Server::builder()
                .add_service(dp::device_plugin_server::DevicePluginServer::new(plugin))
                .serve_with_incoming(incoming);
            let shown = path.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = server.await {
                    tracing::error!("serving {}: {e}", shown.display());
                }
            });
            Ok((path, task))
        })
        .collect()
}

async fn register(options: &Options, kubelet: &Path) -> anyhow::Result<()> {
    for resource in Resource::ALL {
        let name = resource.name(options.names);
        let request = dp::RegisterRequest {
            version: dp::VERSION.into(),
            endpoint: resource.socket(),
            resource_name: name.clone(),
            options: Some(plugin_options()),
        };
        registration::register_device_plugin(kubelet, request).await?;
        tracing::info!(resource = %name, socket = %resource.socket(), "registered with the kubelet");
    }
    Ok(())
}

/// Refuses a device whose list would not fit in the kubelet's message limit (a large device
/// with a small `--gpumem-unit`), naming the unit that would.
pub fn check_list_size(options: &Options, devices: &[Device]) -> anyhow::Result<()> {
    use prost::Message as _;
    let view: View = devices.iter().map(|d| (d.ordinal, Seen { device: d.clone(), healthy: true })).collect();
    let len = list(options, Resource::Memory, &view).encoded_len();
    if len > MAX_LIST {
        let unit = options.gpumem_unit_mib * (len as u64).div_ceil(MAX_LIST as u64).next_power_of_two();
        anyhow::bail!(
            "{} IDs of {} MiB make a {len}-byte ListAndWatch answer, over the kubelet's {MAX_LIST}; use --gpumem-unit {unit} or more",
            Resource::Memory.name(options.names),
            options.gpumem_unit_mib
        );
    }
    Ok(())
}

/// `gpupool device-plugin`: [`serve`] on a runtime of its own; the first answer of the daemon
/// is checked against the kubelet's message limit before anything is registered.
pub fn run(options: Options, inventory: Arc<dyn Inventory>) -> anyhow::Result<()> {
    options.check()?;
    if let Ok(devices) = inventory.devices() {
        check_list_size(&options, &devices)?;
    }
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(serve(options, inventory))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(r: Resource, spec: &[(u32, u64)]) -> Vec<String> {
        spec.iter().map(|(o, k)| format!("{}{o}-{k}", r.id_prefix())).collect()
    }

    #[test]
    fn gpu_spreads_over_devices_and_memory_packs() {
        let available = ids(Resource::Gpu, &[(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0)]);
        // Two shares: two devices, the ones with the most free shares.
        assert_eq!(prefer(Resource::Gpu, &available, &[], 2), ids(Resource::Gpu, &[(0, 0), (1, 0)]));
        // A device already given is the last choice for the next share.
        let must = ids(Resource::Gpu, &[(0, 0)]);
        assert_eq!(prefer(Resource::Gpu, &available, &must, 2), ids(Resource::Gpu, &[(0, 0), (1, 0)]));
        // More shares than devices: a second round.
        assert_eq!(prefer(Resource::Gpu, &available, &[], 4).len(), 4);
        assert_eq!(prefer(Resource::Gpu, &available, &[], 9).len(), 6);
        let mem = ids(Resource::Memory, &[(0, 0), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(prefer(Resource::Memory, &mem, &[], 2), ids(Resource::Memory, &[(1, 0), (1, 1)]));
        let must = ids(Resource::Memory, &[(0, 0)]);
        assert_eq!(prefer(Resource::Memory, &mem, &must, 3), ids(Resource::Memory, &[(0, 0), (1, 0), (1, 1)]));
    }

    #[test]
    fn ids_round_trip_and_foreign_ids_do_not_parse() {
        assert_eq!(parse_id(Resource::Gpu, "gpu3-7"), Some((3, 7)));
        assert_eq!(parse_id(Resource::Memory, "gpu3-7"), None);
        assert_eq!(parse_id(Resource::Cores, "cores1-99"), Some((1, 99)));
        assert_eq!(parse_id(Resource::Cores, "cores1"), None);
        assert_eq!(parse_id(Resource::Gpu, "gpu-1-2"), None);
    }

    #[test]
    fn a_list_over_the_kubelets_limit_is_refused_with_a_unit_that_fits() {
        let d = |ordinal| Device {
            ordinal,
            kind: "gpu".into(),
            name: "H100".into(),
            uuid: String::new(),
            total_memory: 80 << 30,
            compute_capability: "9.0".into(),
            healthy: true,
        };
        let mut o = Options {
            kubelet_dir: PathBuf::new(),
            shares: 10,
            names: Names::Gpupool,
            gpumem_unit_mib: 1,
            health_interval: Duration::from_secs(1),
        };
        let eight: Vec<Device> = (0..8).map(d).collect();
        check_list_size(&o, &eight[..1]).unwrap();
        let err = check_list_size(&o, &eight).unwrap_err().to_string();
        assert!(err.contains("--gpumem-unit"), "{err}");
        let unit: u64 = err.rsplit("--gpumem-unit ").next().unwrap().split(' ').next().unwrap().parse().unwrap();
        o.gpumem_unit_mib = unit;
        check_list_size(&o, &eight).unwrap();
    }
}
