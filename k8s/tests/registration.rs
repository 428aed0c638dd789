//! The shared registration pieces over real unix sockets: a device plugin's `Register` reaching
//! a stand-in kubelet's registration server, and the plugin watcher's `GetInfo` /
//! `NotifyRegistrationStatus` answered by [`PluginRegistration`].

use gpupool_k8s::deviceplugin::v1beta1 as dp;
use gpupool_k8s::pluginregistration::v1 as pr;
use gpupool_k8s::registration::{PluginRegistration, register_device_plugin};
use gpupool_k8s::unix;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

struct Kubelet(mpsc::UnboundedSender<dp::RegisterRequest>);

#[tonic::async_trait]
impl dp::registration_server::Registration for Kubelet {
    async fn register(&self, r: Request<dp::RegisterRequest>) -> Result<Response<dp::Empty>, Status> {
        let r = r.into_inner();
        if r.version != dp::VERSION {
            return Err(Status::invalid_argument(format!("version {} is not supported", r.version)));
        }
        self.0.send(r).unwrap();
        Ok(Response::new(dp::Empty {}))
    }
}

#[tokio::test]
async fn device_plugin_register_reaches_the_kubelet() {
    let dir = tempdir();
    let kubelet_sock = dir.join(dp::KUBELET_SOCKET);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let incoming = unix::listen(&kubelet_sock).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(dp::registration_server::RegistrationServer::new(Kubelet(tx)))
            .serve_with_incoming(incoming),
    );
    let request = dp::RegisterRequest {
        version: dp::VERSION.into(),
        endpoint: "gpupool-gpu.sock".into(),
        resource_name: "gpupool.io/gpu".into(),
        options: Some(dp::DevicePluginOptions { pre_start_required: false, get_preferred_allocation_available: true }),
    };
    register_device_plugin(&kubelet_sock, request.clone()).await.unwrap();
    assert_eq!(rx.recv().await.unwrap(), request);

    // The kubelet's refusal is an error naming the resource.
    let bad = dp::RegisterRequest { version: "v1alpha".into(), ..request };
    let err = register_device_plugin(&kubelet_sock, bad).await.unwrap_err();
    assert!(format!("{err:#}").contains("refused to register gpupool.io/gpu"), "{err:#}");

    // No kubelet: an error naming the socket, not a hang.
    let gone = dir.join("nobody.sock");
    let err = register_device_plugin(&gone, dp::RegisterRequest::default()).await.unwrap_err();
    assert!(format!("{err:#}").contains("nobody.sock"), "{err:#}");
}

#[tokio::test]
async fn plugin_watcher_registration_answers_the_kubelet() {
    let dir = tempdir();
    let sock = dir.join("gpupool.io-reg.sock");
    let info = pr::PluginInfo {
        r#type: pr::DRA_PLUGIN.into(),
        name: "gpupool.io".into(),
        endpoint: "/var/lib/kubelet/plugins/gpupool.io/dra.sock".into(),
        supported_versions: vec![gpupool_k8s::dra::v1::SERVICE.into()],
    };
    let reg = PluginRegistration::new(info.clone());
    let mut status = reg.status();
    // A stale socket from an earlier run is replaced.
    std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let incoming = unix::listen(&sock).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(pr::registration_server::RegistrationServer::new(reg))
            .serve_with_incoming(incoming),
    );
    let mut kubelet = pr::registration_client::RegistrationClient::new(unix::dial(&sock).await.unwrap());
    assert_eq!(kubelet.get_info(pr::InfoRequest {}).await.unwrap().into_inner(), info);
    assert!(status.borrow().is_none());
    let verdict = pr::RegistrationStatus { plugin_registered: false, error: "version mismatch".into() };
    kubelet.notify_registration_status(verdict.clone()).await.unwrap();
    status.changed().await.unwrap();
    assert_eq!(status.borrow().as_ref(), Some(&verdict));

    // A regular file where the socket goes is not deleted.
    let file = dir.join("not-a-socket");
    std::fs::write(&file, b"keep").unwrap();
    assert!(unix::listen(&file).is_err());
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "gpupool-k8s-reg-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
