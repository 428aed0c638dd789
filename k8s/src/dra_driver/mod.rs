//! `gpupool dra`: the DRA kubelet plugin and ResourceSlice publisher of driver `gpupool.io`.
//!
//! - Registers with the kubelet's plugin watcher: a `Registration` socket in the registrar
//!   directory (`gpupool.io-reg.sock`) answering `GetInfo` with type `DRAPlugin`, the driver name
//!   and the plugin socket (`<plugin dir>/dra.sock`), which serves `v1.DRAPlugin`.
//! - Publishes the node's devices, as the daemon reports them, in one ResourceSlice
//!   (`<node>-gpupool.io`, [`slices`]) by server-side apply, again whenever they change (a lost
//!   device is tainted, [`slices::LOST_TAINT`]), polling the daemon every `--poll` seconds.
//! - `NodePrepareResources`: reads each claim from the API server (its allocation and opaque
//!   parameters, [`claims`]), checks its uid, and prepares it ([`prepare`]): an endpoint of the
//!   daemon and a CDI spec, answered with the CDI device IDs. `NodeUnprepareResources` undoes it.
//!
//! The API server is reached with kube-rs (`KUBECONFIG`, else the pod's service account).
//!
//! Must not: touch a device, or write any API object but this node's ResourceSlice.

pub mod claims;
pub mod daemon;
pub mod prepare;
pub mod slices;

use crate::dra::v1 as api;
use crate::pluginregistration::v1 as pr;
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::Api;
use kube::api::{Patch, PatchParams};
use prepare::{CdiBase, Driver};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// The driver's name: DeviceClass selectors, ResourceSlices and claims' results name it.
pub const DRIVER: &str = "gpupool.io";
/// The registration socket's name in the registrar directory.
pub const REGISTRATION_SOCKET: &str = "gpupool.io-reg.sock";
/// The plugin socket's name in the plugin directory.
pub const PLUGIN_SOCKET: &str = "dra.sock";

pub struct Options {
    /// This node's name (the pool's, and the slice's `nodeName`).
    pub node: String,
    /// The daemon's main socket.
    pub socket: PathBuf,
    pub registrar_dir: PathBuf,
    pub plugin_dir: PathBuf,
    pub cdi_dir: PathBuf,
    pub base: CdiBase,
    /// How often the daemon's devices are read.
    pub poll: Duration,
}

pub fn run(o: Options) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(serve(o))
}

async fn serve(o: Options) -> Result<()> {
    let client = kube::Client::try_default().await.context("no API server (KUBECONFIG, or in-cluster)")?;
    std::fs::create_dir_all(&o.plugin_dir).with_context(|| format!("creating {}", o.plugin_dir.display()))?;
    let driver = Arc::new(Driver::new(
        o.node.clone(),
        o.socket.clone(),
        o.cdi_dir.clone(),
        o.plugin_dir.join("checkpoint.json"),
        o.base.clone(),
    ));

    let plugin_socket = o.plugin_dir.join(PLUGIN_SOCKET);
    let plugin = crate::unix::listen(&plugin_socket).with_context(|| format!("binding {}", plugin_socket.display()))?;
    let reg_socket = o.registrar_dir.join(REGISTRATION_SOCKET);
    let registrar = crate::unix::listen(&reg_socket).with_context(|| format!("binding {}", reg_socket.display()))?;
    let registration = crate::registration::PluginRegistration::new(pr::PluginInfo {
        r#type: pr::DRA_PLUGIN.into(),
        name: DRIVER.into(),
        endpoint: plugin_socket.display().to_string(),
        supported_versions: vec![api::SERVICE.into()],
    });
    let service = Plugin { driver: driver.clone(), client: client.clone() };
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let plugin_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(api::dra_plugin_server::DraPluginServer::new(service))
            .serve_with_incoming_shutdown(plugin, stopped(stop.clone())),
    );
    let reg_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pr::registration_server::RegistrationServer::new(registration))
            .serve_with_incoming_shutdown(registrar, stopped(stop.clone())),
    );
    tracing::info!(
        node = %o.node, plugin = %plugin_socket.display(), registration = %reg_socket.display(),
        "DRA plugin {DRIVER} serving"
    );
    let publisher = tokio::spawn(publish(client, driver, o.node.clone(), o.socket.clone(), o.poll, stop.clone()));

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping: the registration and plugin sockets go; the slice and prepared claims stay");
    let _ = stop_tx.send(true);
    let _ = publisher.await;
    let (a, b) = (plugin_server.await, reg_server.await);
    let _ = std::fs::remove_file(&reg_socket);
    let _ = std::fs::remove_file(&plugin_socket);
    a?.context("the plugin's gRPC server")?;
    b?.context("the registration's gRPC server")?;
    Ok(())
}

/// Reads the daemon's devices every `poll` and applies the node's slice when it changes (and
/// once at start). A failed apply is retried at the next poll.
async fn publish(
    client: kube::Client,
    driver: Arc<Driver>,
    node: String,
    socket: PathBuf,
    poll: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let name = slices::slice_name(&node);
    let mut node_uid: Option<String> = None;
    let mut generation: Option<i64> = None;
    let mut dirty = true;
    loop {
        let s = socket.clone();
        let now = match tokio::task::spawn_blocking(move || daemon::status(&s)).await {
            Ok(Ok(doc)) => crate::node::devices_from_status(&doc).ok(),
            Ok(Err(e)) => {
                tracing::warn!("the daemon does not answer ({e:#}): its devices are published as lost");
                None
            }
            Err(_) => None,
        };
        dirty |= driver.seen.lock().unwrap_or_else(|e| e.into_inner()).update(now);
        if node_uid.is_none() {
            match Api::<Node>::all(client.clone()).get(&node).await {
                Ok(n) => {
                    node_uid = n.metadata.uid;
                    dirty = true;
                }
                Err(e) => tracing::warn!("reading Node {node} for the slice's owner: {e}"),
            }
        }
        if generation.is_none() {
            match slices.get_opt(&name).await {
                Ok(existing) => generation = Some(existing.map_or(0, |s| s.spec.pool.generation)),
                Err(e) => tracing::warn!("reading ResourceSlice {name}: {e}"),
            }
        }
        if dirty && let Some(g) = generation {
            let devices = driver.seen.lock().unwrap_or_else(|e| e.into_inner()).devices();
            let (count, lost) = (devices.len(), devices.iter().filter(|d| d.taints.is_some()).count());
            let slice = slices::slice(&node, node_uid.as_deref(), g + 1, devices);
            match slices.patch(&name, &PatchParams::apply(DRIVER).force(), &Patch::Apply(&slice)).await {
                Ok(_) => {
                    tracing::info!(slice = %name, generation = g + 1, devices = count, lost, "ResourceSlice published");
                    generation = Some(g + 1);
                    dirty = false;
                }
                Err(e) => tracing::warn!("publishing ResourceSlice {name}: {e}; retrying"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The `v1.DRAPlugin` service.
struct Plugin {
    driver: Arc<Driver>,
    client: kube::Client,
}

impl Plugin {
    async fn prepare_one(&self, c: api::Claim) -> api::NodePrepareResourceResponse {
        let who = format!("{}/{} ({})", c.namespace, c.name, c.uid);
        let claim = match Api::<ResourceClaim>::namespaced(self.client.clone(), &c.namespace).get(&c.name).await {
            Ok(claim) => claim,
            Err(e) => return failed(&who, format!("reading the claim from the API server: {e}")),
        };
        if claim.metadata.uid.as_deref() != Some(c.uid.as_str()) {
            return failed(&who, format!("the API server's claim has uid {:?}: it was replaced", claim.metadata.uid));
        }
        let driver = self.driver.clone();
        let prepared = tokio::task::spawn_blocking(move || driver.prepare(&c.namespace, &c.name, &c.uid, &claim)).await;
        match prepared {
            Ok(Ok(devices)) => api::NodePrepareResourceResponse {
                devices: devices
                    .into_iter()
                    .map(|d| api::Device {
                        request_names: vec![d.request],
                        pool_name: d.pool,
                        device_name: d.device,
                        cdi_device_ids: vec![d.cdi_id],
                        share_id: d.share_id,
                    })
                    .collect(),
                error: String::new(),
            },
            Ok(Err(e)) => failed(&who, e),
            Err(e) => failed(&who, format!("preparing panicked: {e}")),
        }
    }
}

fn failed(who: &str, error: String) -> api::NodePrepareResourceResponse {
    tracing::warn!(claim = %who, "prepare failed: {error}");
    api::NodePrepareResourceResponse { devices: Vec::new(), error }
}

#[tonic::async_trait]
impl api::dra_plugin_server::DraPlugin for Plugin {
    async fn node_prepare_resources(
        &self,
        request: Request<api::NodePrepareResourcesRequest>,
    ) -> Result<Response<api::NodePrepareResourcesResponse>, Status> {
        let mut out = api::NodePrepareResourcesResponse::default();
        for c in request.into_inner().claims {
            let uid = c.uid.clone();
            let r = self.prepare_one(c).await;
            out.claims.insert(uid, r);
        }
        Ok(Response::new(out))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<api::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<api::NodeUnprepareResourcesResponse>, Status> {
        let mut out = api::NodeUnprepareResourcesResponse::default();
        for c in request.into_inner().claims {
            let driver = self.driver.clone();
            let uid = c.uid.clone();
            let r = tokio::task::spawn_blocking(move || driver.unprepare(&uid)).await;
            let error = match r {
                Ok(Ok(())) => String::new(),
                Ok(Err(e)) => e,
                Err(e) => format!("unpreparing panicked: {e}"),
            };
            if !error.is_empty() {
                tracing::warn!(claim = %format!("{}/{} ({})", c.namespace, c.name, c.uid), "unprepare failed: {error}");
            }
            out.claims.insert(c.uid, api::NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(out))
    }
}
