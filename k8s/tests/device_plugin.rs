//! The device plugin against a kubelet stand-in, over real unix sockets: registration of the
//! three resources, ListAndWatch as devices are lost and found and the daemon goes away,
//! Allocate and GetPreferredAllocation as the kubelet calls them, re-registration when the
//! kubelet restarts, and HAMi's names. The devices come from an inventory the test controls;
//! pool-daemon/tests/device_plugin.rs runs `gpupool device-plugin` against a simulated daemon.

use gpupool_k8s::device_plugin::{self, Names, Options};
use gpupool_k8s::deviceplugin::v1beta1 as dp;
use gpupool_k8s::node::{Device, Inventory};
use gpupool_k8s::unix;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

/// The daemon as the test wants it: its devices, or no answer.
struct Fake(Mutex<Option<Vec<Device>>>);

impl Inventory for Fake {
    fn devices(&self) -> anyhow::Result<Vec<Device>> {
        self.0.lock().unwrap().clone().ok_or_else(|| anyhow::anyhow!("no daemon"))
    }
}

fn device(ordinal: u32, healthy: bool) -> Device {
    Device {
        ordinal,
        kind: "gpu".into(),
        name: "gpupool sim H100 80GB HBM3".into(),
        uuid: format!("GPU-{ordinal}"),
        total_memory: 1 << 30,
        compute_capability: "9.0".into(),
        healthy,
    }
}

/// The kubelet's registration server: each Register request, in order.
struct Kubelet(mpsc::UnboundedSender<dp::RegisterRequest>);

#[tonic::async_trait]
impl dp::registration_server::Registration for Kubelet {
    async fn register(&self, r: Request<dp::RegisterRequest>) -> Result<Response<dp::Empty>, Status> {
        self.0.send(r.into_inner()).unwrap();
        Ok(Response::new(dp::Empty {}))
    }
}

/// Serves a kubelet.sock in `dir`, as a starting kubelet does: the old plugin sockets are removed first.
fn start_kubelet(dir: &Path) -> (mpsc::UnboundedReceiver<dp::RegisterRequest>, tokio::task::JoinHandle<()>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let _ = std::fs::remove_file(e.unwrap().path());
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let incoming = unix::listen(&dir.join(dp::KUBELET_SOCKET)).unwrap();
    let task = tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(dp::registration_server::RegistrationServer::new(Kubelet(tx)))
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    (rx, task)
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("timed out").expect("closed")
}

async fn next_list(s: &mut Streaming<dp::ListAndWatchResponse>) -> HashMap<String, String> {
    let r = tokio::time::timeout(Duration::from_secs(10), s.message()).await.expect("no ListAndWatch update");
    r.unwrap().expect("stream ended").devices.into_iter().map(|d| (d.id, d.health)).collect()
}

/// The distinct healths of the IDs starting with `prefix`.
fn health_of<'a>(list: &'a HashMap<String, String>, prefix: &str) -> Vec<&'a str> {
    let mut v: Vec<&str> = list.iter().filter(|(id, _)| id.starts_with(prefix)).map(|(_, h)| h.as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

async fn plugin(dir: &Path, socket: &str) -> dp::device_plugin_client::DevicePluginClient<tonic::transport::Channel> {
    dp::device_plugin_client::DevicePluginClient::new(unix::dial(&dir.join(socket)).await.unwrap())
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpupool-k8s-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn options(dir: &Path, names: Names) -> Options {
    Options {
        kubelet_dir: dir.to_owned(),
        shares: 4,
        names,
        gpumem_unit_mib: 64,
        health_interval: Duration::from_millis(50),
    }
}

#[tokio::test]
async fn kubelet_stand_in_registers_lists_allocates_and_sees_health() {
    let dir = tempdir("dp");
    let (mut registered, kubelet) = start_kubelet(&dir);
    let fake = Arc::new(Fake(Mutex::new(Some(vec![device(0, true), device(1, true)]))));
    let plugin_task = tokio::spawn(device_plugin::serve(options(&dir, Names::Gpupool), fake.clone()));

    let mut names = Vec::new();
    for _ in 0..3 {
        let r = next(&mut registered).await;
        assert_eq!(r.version, dp::VERSION);
        let opts = r.options.unwrap();
        assert!(opts.get_preferred_allocation_available && !opts.pre_start_required);
        assert!(dir.join(&r.endpoint).exists(), "{} is not served", r.endpoint);
        names.push((r.resource_name, r.endpoint));
    }
    names.sort();
    assert_eq!(
        names,
        [
            ("gpupool.io/gpu".to_string(), "gpupool-gpu.sock".to_string()),
            ("gpupool.io/gpucores".into(), "gpupool-gpucores.sock".into()),
            ("gpupool.io/gpumem".into(), "gpupool-gpumem.sock".into()),
        ]
    );

    let mut gpu = plugin(&dir, "gpupool-gpu.sock").await;
    let mut mem = plugin(&dir, "gpupool-gpumem.sock").await;
    let mut cores = plugin(&dir, "gpupool-gpucores.sock").await;
    let o = gpu.get_device_plugin_options(dp::Empty {}).await.unwrap().into_inner();
    assert!(o.get_preferred_allocation_available);

    // The lists: 4 shares, 1 GiB / 64 MiB and 100 percent per device, all healthy.
    let mut gpu_list = gpu.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    let list = next_list(&mut gpu_list).await;
    let mut ids: Vec<&String> = list.keys().collect();
    ids.sort();
    assert_eq!(ids, ["gpu0-0", "gpu0-1", "gpu0-2", "gpu0-3", "gpu1-0", "gpu1-1", "gpu1-2", "gpu1-3"]);
    assert_eq!(health_of(&list, "gpu"), [dp::HEALTHY]);
    let mut mem_list = mem.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    let list = next_list(&mut mem_list).await;
    assert_eq!(list.len(), 32);
    assert!(list.contains_key("mem1-15") && !list.contains_key("mem1-16"));
    let mut cores_list = cores.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    assert_eq!(next_list(&mut cores_list).await.len(), 200);

    // Device 1 lost (the daemon no longer lists it): its IDs turn unhealthy, device 0's stay.
    fake.0.lock().unwrap().as_mut().unwrap().retain(|d| d.ordinal == 0);
    let list = next_list(&mut gpu_list).await;
    assert_eq!(list.len(), 8, "a lost device stays listed");
    assert_eq!(health_of(&list, "gpu1-"), [dp::UNHEALTHY]);
    assert_eq!(health_of(&list, "gpu0-"), [dp::HEALTHY]);
    assert_eq!(health_of(&next_list(&mut mem_list).await, "mem1-"), [dp::UNHEALTHY]);
    // Reported but unhealthy: still unhealthy (no update); then found again: healthy.
    fake.0.lock().unwrap().as_mut().unwrap().push(device(1, false));
    tokio::time::sleep(Duration::from_millis(200)).await;
    fake.0.lock().unwrap().as_mut().unwrap()[1].healthy = true;
    let list = next_list(&mut gpu_list).await;
    assert_eq!(health_of(&list, "gpu"), [dp::HEALTHY]);
    // The daemon gone: everything unhealthy; back: healthy.
    let saved = fake.0.lock().unwrap().take();
    assert_eq!(health_of(&next_list(&mut gpu_list).await, "gpu"), [dp::UNHEALTHY]);
    *fake.0.lock().unwrap() = saved;
    assert_eq!(health_of(&next_list(&mut gpu_list).await, "gpu"), [dp::HEALTHY]);

    // Allocate, one request per container as the kubelet sends them.
    let req = |ids: &[&[&str]]| dp::AllocateRequest {
        container_requests: ids
            .iter()
            .map(|c| dp::ContainerAllocateRequest { devices_ids: c.iter().map(|s| s.to_string()).collect() })
            .collect(),
    };
    let r = gpu.allocate(req(&[&["gpu1-0", "gpu0-2", "gpu1-3"], &["gpu0-1"]])).await.unwrap().into_inner();
    let cdi: Vec<Vec<&str>> =
        r.container_responses.iter().map(|c| c.cdi_devices.iter().map(|d| d.name.as_str()).collect()).collect();
    assert_eq!(cdi, [vec!["gpupool.io/gpu=0", "gpupool.io/gpu=1"], vec!["gpupool.io/gpu=0"]]);
    let ids: Vec<String> = (0..8).map(|k| format!("mem0-{k}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let r = mem.allocate(req(&[&ids])).await.unwrap().into_inner();
    let c = &r.container_responses[0];
    assert_eq!(c.envs.get("GPUPOOL_MEMORY").map(String::as_str), Some("512MiB"));
    assert_eq!(c.annotations.get("gpupool.io/memory").map(String::as_str), Some("512MiB"));
    assert!(c.cdi_devices.is_empty());
    let ids: Vec<String> = (0..20).map(|k| format!("cores1-{k}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let r = cores.allocate(req(&[&ids])).await.unwrap().into_inner();
    assert_eq!(r.container_responses[0].envs.get("GPUPOOL_COMPUTE").map(String::as_str), Some("20"));
    assert_eq!(r.container_responses[0].annotations.get("gpupool.io/compute").map(String::as_str), Some("20"));
    // More than a device's 100 percent, an ID this plugin never listed, another plugin's ID: refused.
    let ids: Vec<String> = (0..101).map(|k| format!("cores{}-{}", k / 100, k % 100)).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let e = cores.allocate(req(&[&ids])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    for bad in ["gpu2-0", "gpu0-4", "mem0-0"] {
        let e = gpu.allocate(req(&[&[bad]])).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e}");
        assert!(e.message().contains(bad), "{e}");
    }

    // GetPreferredAllocation: two shares go to two devices; memory packs on one device.
    let pref = |available: Vec<String>, must: Vec<String>, size| dp::PreferredAllocationRequest {
        container_requests: vec![dp::ContainerPreferredAllocationRequest {
            available_device_i_ds: available,
            must_include_device_i_ds: must,
            allocation_size: size,
        }],
    };
    let all =
        |p: &str, n: u32, per: u32| (0..n * per).map(|k| format!("{p}{}-{}", k / per, k % per)).collect::<Vec<_>>();
    let r = gpu.get_preferred_allocation(pref(all("gpu", 2, 4), vec![], 2)).await.unwrap().into_inner();
    let mut got = r.container_responses[0].device_i_ds.clone();
    got.sort();
    assert_eq!(got, ["gpu0-0", "gpu1-0"]);
    let r = mem.get_preferred_allocation(pref(all("mem", 2, 16), vec!["mem1-5".into()], 4)).await.unwrap();
    let got = &r.into_inner().container_responses[0].device_i_ds;
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|id| id.starts_with("mem1-")) && got[0] == "mem1-5", "{got:?}");

    // The kubelet restarts: its sockets wiped, a new kubelet.sock; the plugins register again
    // and serve the kubelet on new sockets.
    kubelet.abort();
    let (mut registered, _kubelet) = start_kubelet(&dir);
    let mut again: Vec<String> = Vec::new();
    for _ in 0..3 {
        again.push(next(&mut registered).await.resource_name);
    }
    again.sort();
    assert_eq!(again, ["gpupool.io/gpu", "gpupool.io/gpucores", "gpupool.io/gpumem"]);
    let mut gpu = plugin(&dir, "gpupool-gpu.sock").await;
    let mut s = gpu.list_and_watch(dp::Empty {}).await.unwrap().into_inner();
    assert_eq!(next_list(&mut s).await.len(), 8);
    assert!(!plugin_task.is_finished());
    plugin_task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn hami_names_register_the_same_resources_under_nvidia_com() {
    let dir = tempdir("hami");
    let (mut registered, _kubelet) = start_kubelet(&dir);
    let fake = Arc::new(Fake(Mutex::new(Some(vec![device(0, true)]))));
    let task = tokio::spawn(device_plugin::serve(options(&dir, Names::Hami), fake));
    let mut names: Vec<String> = Vec::new();
    for _ in 0..3 {
        names.push(next(&mut registered).await.resource_name);
    }
    names.sort();
    assert_eq!(names, ["nvidia.com/gpu", "nvidia.com/gpucores", "nvidia.com/gpumem"]);
    // Allocate still answers gpupool's CDI devices: the names change, the pool does not.
    let mut gpu = plugin(&dir, "gpupool-gpu.sock").await;
    let r = gpu
        .allocate(dp::AllocateRequest {
            container_requests: vec![dp::ContainerAllocateRequest { devices_ids: vec!["gpu0-1".into()] }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.container_responses[0].cdi_devices[0].name, "gpupool.io/gpu=0");
    task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
