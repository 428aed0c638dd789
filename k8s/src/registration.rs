//! Registering with the kubelet, both ways it offers:
//! - device plugins call `Registration.Register` on the kubelet's own socket
//!   (`<device-plugins dir>/kubelet.sock`), naming their socket in the same directory
//!   ([`register_device_plugin`]);
//! - DRA plugins (and device plugins, optionally) put a socket in the plugin watcher's directory
//!   (`/var/lib/kubelet/plugins_registry`) serving `pluginregistration.Registration`: the kubelet
//!   asks `GetInfo`, then reports the outcome with `NotifyRegistrationStatus`
//!   ([`PluginRegistration`]).

use crate::deviceplugin::v1beta1 as dp;
use crate::pluginregistration::v1 as pr;
use anyhow::Context as _;
use std::path::Path;
use std::time::Duration;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// How long a Register call may take: the kubelet answers at once, or is not there.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// Registers a device plugin with the kubelet listening on `kubelet_socket`. `request.endpoint`
/// is the plugin's socket file name, relative to the kubelet's device plugin directory, and must
/// already be served: the kubelet dials it (GetDevicePluginOptions, ListAndWatch) right away.
pub async fn register_device_plugin(kubelet_socket: &Path, request: dp::RegisterRequest) -> anyhow::Result<()> {
    let channel = crate::unix::dial(kubelet_socket)
        .await
        .with_context(|| format!("dialing the kubelet at {}", kubelet_socket.display()))?;
    let mut client = dp::registration_client::RegistrationClient::new(channel);
    let resource = request.resource_name.clone();
    tokio::time::timeout(REGISTER_TIMEOUT, client.register(request))
        .await
        .with_context(|| format!("the kubelet at {} did not answer Register", kubelet_socket.display()))?
        .with_context(|| format!("the kubelet refused to register {resource}"))?;
    Ok(())
}

/// The plugin watcher's `Registration` service for one plugin: answers `GetInfo` with `info`
/// and keeps the kubelet's last `NotifyRegistrationStatus` (see [`PluginRegistration::status`]).
pub struct PluginRegistration {
    info: pr::PluginInfo,
    status: watch::Sender<Option<pr::RegistrationStatus>>,
}

impl PluginRegistration {
    pub fn new(info: pr::PluginInfo) -> PluginRegistration {
        PluginRegistration { info, status: watch::channel(None).0 }
    }

    /// The kubelet's verdicts as they come (`None` until the first).
    pub fn status(&self) -> watch::Receiver<Option<pr::RegistrationStatus>> {
        self.status.subscribe()
    }
}

#[tonic::async_trait]
impl pr::registration_server::Registration for PluginRegistration {
    async fn get_info(&self, _: Request<pr::InfoRequest>) -> Result<Response<pr::PluginInfo>, Status> {
        tracing::debug!(name = %self.info.name, "kubelet asked for the plugin's info");
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<pr::RegistrationStatus>,
    ) -> Result<Response<pr::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            tracing::info!(name = %self.info.name, "registered with the kubelet");
        } else {
            tracing::error!(name = %self.info.name, error = %status.error, "the kubelet refused the registration");
        }
        self.status.send_replace(Some(status));
        Ok(Response::new(pr::RegistrationStatusResponse {}))
    }
}
