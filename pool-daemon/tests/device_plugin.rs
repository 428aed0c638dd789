//! `gpupool device-plugin` as the README runs it (as root: the kubelet's default directory and
//! the daemon's default socket), against a simulated daemon and a kubelet stand-in serving
//! `kubelet.sock`: the three resources register, ListAndWatch lists the daemon's devices, a
//! device that falls off the bus (the simulator's `GPUPOOL_SIM_LOST`, which NVML reports as
//! `NVML_ERROR_GPU_IS_LOST`) turns unhealthy in the daemon's status and in ListAndWatch and comes
//! back when found again, and Allocate answers CDI devices that `gpupool cdi generate`'s spec holds.

mod common;

use common::Daemon;
use gpupool_k8s::deviceplugin::v1beta1 as dp;
use gpupool_k8s::unix;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

const KUBELET_DIR: &str = "/var/lib/kubelet/device-plugins";

struct Kubelet(mpsc::UnboundedSender<dp::RegisterRequest>);

#[tonic::async_trait]
impl dp::registration_server::Registration for Kubelet {
    async fn register(&self, r: Request<dp::RegisterRequest>) -> Result<Response<dp::Empty>, Status> {
        self.0.send(r.into_inner()).unwrap();
        Ok(Response::new(dp::Empty {}))
    }
}

/// The plugin's process, killed on drop; the kubelet directory removed if the test made it.
struct Cleanup {
    plugin: Option<Child>,
    made: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut c) = self.plugin.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(dir) = self.made.take() {
            let _ = std::fs::remove_dir_all(dir);
        } else {
            for f in ["kubelet.sock", "gpupool-gpu.sock", "gpupool-gpumem.sock", "gpupool-gpucores.sock"] {
                let _ = std::fs::remove_file(Path::new(KUBELET_DIR).join(f));
            }
        }
    }
}

/// Health by ID of the next ListAndWatch answer.
async fn next_list(s: &mut tonic::Streaming<dp::ListAndWatchResponse>) -> BTreeMap<String, String> {
    let r = tokio::time::timeout(Duration::from_secs(15), s.message()).await.expect("no ListAndWatch update in 15 s");
    r.unwrap().expect("stream ended").devices.into_iter().map(|d| (d.id, d.health)).collect()
}

fn healths<'a>(list: &'a BTreeMap<String, String>, prefix: &str) -> Vec<&'a str> {
    let mut v: Vec<&str> = list.iter().filter(|(id, _)| id.starts_with(prefix)).map(|(_, h)| h.as_str()).collect();
    v.dedup();
    v
}

#[test]
fn readme_device_plugin_registers_lists_health_and_allocates_cdi_devices() {
    common::ensure_interposer();
    assert_eq!(
        common::uid(),
        0,
        "the README's line uses the kubelet's directory and the daemon's default socket: run as root"
    );
    let kubelet_sock = Path::new(KUBELET_DIR).join(dp::KUBELET_SOCKET);
    assert!(
        std::os::unix::net::UnixStream::connect(&kubelet_sock).is_err(),
        "a kubelet already serves {}: not testing beside a real one",
        kubelet_sock.display()
    );
    let made = (!Path::new("/var/lib/kubelet").exists()).then(|| PathBuf::from("/var/lib/kubelet"));
    std::fs::create_dir_all(KUBELET_DIR).unwrap();
    let mut cleanup = Cleanup { plugin: None, made };

    let lost = std::env::temp_dir().join(format!("gpupool-dp-lost-{}", std::process::id()));
    std::fs::write(&lost, "").unwrap();
    let d = Daemon::start_env(
        None,
        &["--listen", "unix:///run/gpupool/gpupool.sock"],
        &[("GPUPOOL_SIM_LOST", lost.to_str().unwrap())],
    );

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (tx, mut registered) = mpsc::unbounded_channel();
        let incoming = unix::listen(&kubelet_sock).unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(dp::registration_server::RegistrationServer::new(Kubelet(tx)))
                .serve_with_incoming(incoming),
        );

        let line = gpupool_e2e::readme::command("gpupool device-plugin");
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_gpupool"));
        let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
        let log = d.dir.join("device-plugin.log");
        let plugin = Command::new("sh")
            .args(["-c", &format!("exec {line}")])
            .env("PATH", path)
            .env_remove("GPUPOOL_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        cleanup.plugin = Some(plugin);
        let log = || std::fs::read_to_string(&log).unwrap_or_default();

        let mut names = Vec::new();
        for _ in 0..3 {
            let r = tokio::time::timeout(Duration::from_secs(30), registered.recv())
                .await
                .unwrap_or_else(|_| panic!("no Register within 30 s: {}", log()))
                .unwrap();
            assert_eq!(r.version, "v1beta1");
            names.push(r.resource_name);
        }
        names.sort();
        assert_eq!(names, ["gpupool.io/gpu", "gpupool.io/gpucores", "gpupool.io/gpumem"]);

        let dial = |s: &'static str| async move {
            dp::device_plugin_client::DevicePluginClient::new(
                unix::dial(&Path::new(KUBELET_DIR).join(s)).await.unwrap(),
            )
        };
        let mut gpu = dial("gpupool-gpu.sock").await;
        let mut mem = dial("gpupool-gpumem.sock").await;
        let mut watch = gpu.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
        let list = next_list(&mut watch).await;
        // Two simulated devices, 4 shares each (--shares 4), both healthy.
        assert_eq!(list.len(), 8, "{list:?}");
        assert_eq!(healths(&list, "gpu"), ["Healthy"]);
        // 1 GiB devices in MiB.
        let mut mem_watch = mem.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
        assert_eq!(next_list(&mut mem_watch).await.len(), 2048);

        // Device 1 falls off the bus: the daemon notices (NVML), the kubelet is told.
        std::fs::write(&lost, "1\n").unwrap();
        let t0 = Instant::now();
        let list = next_list(&mut watch).await;
        assert_eq!(healths(&list, "gpu1-"), ["Unhealthy"], "{}", log());
        assert_eq!(healths(&list, "gpu0-"), ["Healthy"]);
        let status = d.status();
        assert_eq!(status["devices"][1]["healthy"], false, "{status}");
        assert!(status["devices"][1]["health_error"].as_str().unwrap().contains("error 15"), "{status}");
        assert_eq!(status["devices"][0]["healthy"], true);
        assert!(log().contains("device lost"), "{}", log());
        // Found again: healthy.
        std::fs::write(&lost, "").unwrap();
        let list = next_list(&mut watch).await;
        assert_eq!(healths(&list, "gpu"), ["Healthy"]);
        assert_eq!(d.status()["devices"][1]["healthy"], true);
        assert!(t0.elapsed() < Duration::from_secs(10), "health took {:?} with --health-interval 1", t0.elapsed());

        // Allocate: the CDI devices of the spec `gpupool cdi generate` writes for this daemon.
        let r = gpu
            .allocate(dp::AllocateRequest {
                container_requests: vec![dp::ContainerAllocateRequest { devices_ids: vec!["gpu1-2".into()] }],
            })
            .await
            .unwrap()
            .into_inner();
        let cdi: Vec<&str> = r.container_responses[0].cdi_devices.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(cdi, ["gpupool.io/gpu=1"]);
        let spec_path = d.dir.join("cdi.json");
        let out = Command::new(&bin)
            .args(["cdi", "generate", "--output", spec_path.to_str().unwrap(), "--endpoint", &d.endpoint()])
            .args(["--lib-dir", d.dir.join("lib").to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", gpupool_e2e::output_text(&out));
        let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
        let (kind, name) = cdi[0].split_once('=').unwrap();
        assert_eq!(spec["kind"], kind);
        assert!(spec["devices"].as_array().unwrap().iter().any(|d| d["name"] == name), "{spec}");
        let r = mem
            .allocate(dp::AllocateRequest {
                container_requests: vec![dp::ContainerAllocateRequest {
                    devices_ids: (0..512).map(|k| format!("mem1-{k}")).collect(),
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.container_responses[0].envs["GPUPOOL_MEMORY"], "512MiB");
        assert_eq!(r.container_responses[0].annotations["gpupool.io/memory"], "512MiB");
    });
    let _ = std::fs::remove_file(&lost);
}
