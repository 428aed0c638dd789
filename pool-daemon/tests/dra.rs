//! `gpupool dra` (issue 21) without a cluster: an API-server stand-in (a small HTTP server in the
//! test speaking the real JSON, which the plugin's kube-rs client is pointed at by KUBECONFIG)
//! receives the node's ResourceSlice and serves ResourceClaims; a kubelet stand-in calls the
//! plugin-watcher registration (`GetInfo`, `NotifyRegistrationStatus`) and `NodePrepareResources`
//! / `NodeUnprepareResources` over the real unix sockets, as the kubelet does. End to end, the
//! README's `gpupool dra` line prepares a claim of 512 MiB and 20% whose CDI device podman runs a
//! container with (the containers test's rootfs and flags): the client in it sees 512 MiB, can
//! allocate no more, and is held to 20% of the device (measured); unprepare frees everything.
//! A device the daemon loses (gone from its list, NVML finding it lost, or the daemon gone) is
//! tainted in the slice, and claims on it are refused, until the daemon has it again.

mod common;

use common::{Daemon, MIB};
use gpupool_e2e::containers as ct;
use gpupool_k8s::dra::v1 as dra;
use gpupool_k8s::pluginregistration::v1 as pr;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODE: &str = "node-1";
const NODE_UID: &str = "6a1f0c1e-0000-4000-8000-00000000node";

fn gpupool() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpupool"))
}

/// One request the stand-in received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    body: Value,
}

#[derive(Default)]
struct ApiState {
    requests: Vec<Seen>,
    slices: HashMap<String, Value>,
    claims: HashMap<(String, String), Value>,
}

/// The API-server stand-in: the four calls the plugin makes (GET a Node, GET and server-side
/// apply a ResourceSlice, GET a ResourceClaim), in resource.k8s.io/v1's JSON.
struct ApiServer {
    port: u16,
    state: Arc<Mutex<ApiState>>,
}

fn status_404(what: &str) -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": format!("{what} not found"), "reason": "NotFound", "code": 404}),
    )
}

impl ApiServer {
    fn start() -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(ApiState::default()));
        let s = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let s = s.clone();
                std::thread::spawn(move || serve_connection(stream, &s));
            }
        });
        ApiServer { port, state }
    }

    fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let p = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: http://127.0.0.1:{}\n\
             users:\n- name: plugin\n  user: {{}}\ncontexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: plugin\n\
             current-context: stand-in\n",
            self.port
        );
        std::fs::write(&p, text).unwrap();
        p
    }

    fn add_claim(&self, claim: Value) {
        let key = (
            claim["metadata"]["namespace"].as_str().unwrap().to_string(),
            claim["metadata"]["name"].as_str().unwrap().to_string(),
        );
        self.state.lock().unwrap().claims.insert(key, claim);
    }

    fn slice(&self) -> Option<Value> {
        self.state.lock().unwrap().slices.get(&format!("{NODE}-gpupool.io")).cloned()
    }

    fn applies(&self) -> Vec<Seen> {
        self.state.lock().unwrap().requests.iter().filter(|r| r.method == "PATCH").cloned().collect()
    }

    /// Waits for a slice for which `ok` holds.
    fn wait_slice(&self, what: &str, ok: impl Fn(&Value) -> bool, plugin: &Plugin) -> Value {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.slice().filter(|s| ok(s)) {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no slice {what}: {:#?}\nplugin:\n{}",
                self.slice(),
                plugin.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn route(state: &Mutex<ApiState>, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let path = path.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut st = state.lock().unwrap();
    match (method, parts.as_slice()) {
        ("GET", ["api", "v1", "nodes", name]) if *name == NODE => (
            200,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": NODE_UID, "resourceVersion": "1"}}),
        ),
        ("GET", ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => match st.slices.get(*name) {
            Some(s) => (200, s.clone()),
            None => status_404(&format!("resourceslices.resource.k8s.io \"{name}\"")),
        },
        ("PATCH", ["apis", "resource.k8s.io", "v1", "resourceslices", name]) => {
            let mut obj = body.clone();
            obj["metadata"]["uid"] = json!("slice-uid");
            obj["metadata"]["resourceVersion"] = json!(st.requests.len().to_string());
            st.slices.insert(name.to_string(), obj.clone());
            (200, obj)
        }
        ("GET", ["apis", "resource.k8s.io", "v1", "namespaces", ns, "resourceclaims", name]) => {
            match st.claims.get(&(ns.to_string(), name.to_string())) {
                Some(c) => (200, c.clone()),
                None => status_404(&format!("resourceclaims.resource.k8s.io \"{name}\"")),
            }
        }
        _ => status_404(path),
    }
}

/// HTTP/1.1 with keep-alive, bodies by Content-Length (all the kube client sends).
fn serve_connection(stream: TcpStream, state: &Mutex<ApiState>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut words = line.split_whitespace();
        let (method, path) = (words.next().unwrap_or("").to_string(), words.next().unwrap_or("").to_string());
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "content-type" => content_type = v.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let body: Value =
            if body.is_empty() { Value::Null } else { serde_json::from_slice(&body).unwrap_or(Value::Null) };
        let (code, reply) = route(state, &method, &path, &body);
        state.lock().unwrap().requests.push(Seen { method, path, content_type, body });
        let text = reply.to_string();
        let head = format!(
            "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            if code == 200 { "OK" } else { "Not Found" },
            text.len()
        );
        if out.write_all(head.as_bytes()).and_then(|()| out.write_all(text.as_bytes())).is_err() {
            return;
        }
    }
}

/// A `gpupool dra` process; killed on drop.
struct Plugin {
    child: Child,
    log: PathBuf,
}

impl Plugin {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a plugin keeps its sockets and specs.
struct Dirs {
    registrar: PathBuf,
    plugin: PathBuf,
    cdi: PathBuf,
}

impl Dirs {
    fn under(dir: &Path) -> Dirs {
        Dirs { registrar: dir.join("registry"), plugin: dir.join("plugins/gpupool.io"), cdi: dir.join("cdi") }
    }
}

fn start_plugin(cmd: &mut Command, api: &ApiServer, dir: &Path) -> Plugin {
    let log = dir.join("dra.log");
    cmd.env("KUBECONFIG", api.kubeconfig(dir))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("GPUPOOL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    Plugin { child: cmd.spawn().expect("starting gpupool dra"), log }
}

fn plugin_with(api: &ApiServer, endpoint: &str, dirs: &Dirs, dir: &Path) -> Plugin {
    let mut cmd = Command::new(gpupool());
    cmd.args(["dra", "--node-name", NODE, "--endpoint", endpoint, "--poll", "0.1"])
        .arg("--registrar-dir")
        .arg(&dirs.registrar)
        .arg("--plugin-dir")
        .arg(&dirs.plugin)
        .arg("--cdi-dir")
        .arg(&dirs.cdi)
        .arg("--lib-dir")
        .arg(dir.join("lib"));
    start_plugin(&mut cmd, api, dir)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn wait_for(path: &Path, plugin: &Plugin) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no {}: {}", path.display(), plugin.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The kubelet's side of the plugin watcher: GetInfo on the registration socket, then the
/// verdict. Returns the plugin's info.
fn kubelet_registers(socket: &Path, rt: &tokio::runtime::Runtime) -> pr::PluginInfo {
    rt.block_on(async {
        let ch = gpupool_k8s::unix::dial(socket).await.unwrap();
        let mut c = pr::registration_client::RegistrationClient::new(ch);
        let info = c.get_info(pr::InfoRequest {}).await.unwrap().into_inner();
        c.notify_registration_status(pr::RegistrationStatus { plugin_registered: true, error: String::new() })
            .await
            .unwrap();
        info
    })
}

fn claim_ref(name: &str, uid: &str) -> dra::Claim {
    dra::Claim { namespace: "default".into(), uid: uid.into(), name: name.into() }
}

fn try_prepare(
    rt: &tokio::runtime::Runtime,
    socket: &Path,
    claims: Vec<dra::Claim>,
) -> Result<dra::NodePrepareResourcesResponse, String> {
    rt.block_on(async {
        let ch = gpupool_k8s::unix::dial(socket).await.map_err(|e| e.to_string())?;
        let mut c = dra::dra_plugin_client::DraPluginClient::new(ch);
        let r = c.node_prepare_resources(dra::NodePrepareResourcesRequest { claims }).await;
        r.map(|r| r.into_inner()).map_err(|e| e.to_string())
    })
}

fn prepare(rt: &tokio::runtime::Runtime, socket: &Path, claims: Vec<dra::Claim>) -> dra::NodePrepareResourcesResponse {
    try_prepare(rt, socket, claims).unwrap()
}

fn unprepare(
    rt: &tokio::runtime::Runtime,
    socket: &Path,
    claims: Vec<dra::Claim>,
) -> dra::NodeUnprepareResourcesResponse {
    rt.block_on(async {
        let ch = gpupool_k8s::unix::dial(socket).await.unwrap();
        let mut c = dra::dra_plugin_client::DraPluginClient::new(ch);
        c.node_unprepare_resources(dra::NodeUnprepareResourcesRequest { claims }).await.unwrap().into_inner()
    })
}

/// An allocated claim as the scheduler leaves it: one device of this node's pool with the
/// capacity consumed, and the claim's opaque parameters.
fn claim(name: &str, uid: &str, device: &str, memory: &str, compute: &str, params: Value) -> Value {
    let mut p = json!({"apiVersion": "gpupool.io/v1alpha1", "kind": "SliceParameters"});
    p.as_object_mut().unwrap().extend(params.as_object().unwrap().clone());
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpupool.io",
                          "capacity": {"requests": {"memory": memory, "compute": compute}}}}],
            "config": [{"requests": ["gpu"], "opaque": {"driver": "gpupool.io", "parameters": p.clone()}}],
        }},
        "status": {"allocation": {"devices": {
            "results": [{"request": "gpu", "driver": "gpupool.io", "pool": NODE, "device": device,
                         "shareID": format!("share-{uid}"),
                         "consumedCapacity": {"memory": memory, "compute": compute}}],
            "config": [{"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpupool.io", "parameters": p}}],
        }}},
    })
}

fn device_names(slice: &Value) -> Vec<String> {
    slice["spec"]["devices"].as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap().to_string()).collect()
}

fn tainted(slice: &Value) -> Vec<bool> {
    slice["spec"]["devices"].as_array().unwrap().iter().map(|d| d["taints"].is_array()).collect()
}

fn quota_config() -> String {
    "[[tenant]]\nname = \"alpha\"\nmemory = \"1GiB\"\ncompute = 100\nmode = \"limit\"\npriority = \"normal\"\n"
        .to_string()
}

#[test]
fn slices_registration_and_claims_shared_up_to_capacity_through_the_stand_ins() {
    let d = Daemon::start(Some(&quota_config()));
    let api = ApiServer::start();
    let dir = d.dir.join("dra");
    std::fs::create_dir_all(&dir).unwrap();
    let dirs = Dirs::under(&dir);
    let plugin = plugin_with(&api, &d.endpoint(), &dirs, &dir);

    // The slice: the daemon's two devices, their attributes and capacity, shareable, owned by the Node.
    let slice =
        api.wait_slice("with two devices", |s| s["spec"]["devices"].as_array().is_some_and(|d| d.len() == 2), &plugin);
    let doc = d.status();
    let uuid0 = doc["devices"][0]["uuid"].as_str().unwrap();
    assert_eq!(slice["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(slice["kind"], "ResourceSlice");
    assert_eq!(slice["metadata"]["name"], format!("{NODE}-gpupool.io"));
    assert_eq!(slice["metadata"]["ownerReferences"][0]["uid"], NODE_UID);
    assert_eq!(slice["metadata"]["ownerReferences"][0]["kind"], "Node");
    let spec = &slice["spec"];
    assert_eq!(
        (&spec["driver"], &spec["nodeName"], &spec["pool"]["name"]),
        (&json!("gpupool.io"), &json!(NODE), &json!(NODE))
    );
    assert_eq!(spec["pool"]["resourceSliceCount"], 1);
    let dev0 = &spec["devices"][0];
    let name0 = format!("gpu-{}", uuid0.trim_start_matches("GPU-"));
    assert_eq!(dev0["name"], name0);
    let a = &dev0["attributes"];
    assert_eq!(a["uuid"]["string"], uuid0);
    assert_eq!(a["index"]["int"], 0);
    assert_eq!(a["vendor"]["string"], "nvidia");
    assert_eq!(a["model"]["string"], doc["devices"][0]["name"]);
    assert_eq!(
        a["computeCapability"]["version"],
        format!("{}.0", doc["devices"][0]["compute_capability"].as_str().unwrap())
    );
    assert_eq!(dev0["capacity"]["memory"]["value"], "1024Mi");
    assert_eq!(dev0["capacity"]["compute"]["value"], "100");
    assert_eq!(dev0["capacity"]["compute"]["requestPolicy"]["validRange"]["max"], "100");
    assert_eq!(dev0["allowMultipleAllocations"], true);
    assert!(dev0.get("taints").is_none(), "{dev0}");
    // Published by server-side apply under the driver's field manager.
    let applies = api.applies();
    assert!(applies[0].content_type.starts_with("application/apply-patch"), "{:?}", applies[0]);
    assert!(applies[0].path.contains("fieldManager=gpupool.io"), "{:?}", applies[0]);
    // Round trip through k8s-openapi's type: nothing unknown, nothing misspelled.
    let typed: k8s_openapi::api::resource::v1::ResourceSlice = serde_json::from_value(applies[0].body.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), applies[0].body);

    // The kubelet's plugin watcher finds the registration socket and asks.
    let rt = rt();
    let reg = dirs.registrar.join("gpupool.io-reg.sock");
    wait_for(&reg, &plugin);
    let info = kubelet_registers(&reg, &rt);
    let sock = dirs.plugin.join("dra.sock");
    assert_eq!((info.r#type.as_str(), info.name.as_str()), ("DRAPlugin", "gpupool.io"));
    assert_eq!(info.endpoint, sock.display().to_string());
    assert_eq!(info.supported_versions, ["v1.DRAPlugin"]);

    // Two claims on device 0 fill it (512 MiB + 512 MiB, 20% + 60%); a third is refused.
    let uid = |n: u32| format!("0b1c2d3e-0000-4000-8000-{n:012}");
    api.add_claim(claim("a", &uid(1), &name0, "512Mi", "20", json!({"tenant": "alpha", "priority": "normal"})));
    api.add_claim(claim("b", &uid(2), &name0, "512Mi", "60", json!({"memoryMiB": 256})));
    api.add_claim(claim("c", &uid(3), &name0, "512Mi", "10", json!({})));
    let r = prepare(&rt, &sock, vec![claim_ref("a", &uid(1)), claim_ref("b", &uid(2))]);
    let first_a = r.claims[&uid(1)].devices.clone();
    for n in [1, 2] {
        let c = &r.claims[&uid(n)];
        assert_eq!(c.error, "", "{:?}\n{}", r, plugin.log());
        assert_eq!(c.devices.len(), 1);
        assert_eq!((c.devices[0].pool_name.as_str(), c.devices[0].device_name.as_str()), (NODE, name0.as_str()));
        assert_eq!(c.devices[0].request_names, ["gpu"]);
        assert_eq!(c.devices[0].cdi_device_ids, [format!("gpupool.io/claim={}-0", uid(n))]);
        assert_eq!(c.devices[0].share_id.as_deref(), Some(format!("share-{}", uid(n)).as_str()));
        let ep = d.dir.join("containers").join(format!("dra-{}.sock", uid(n)));
        assert!(ep.exists(), "{} missing: {}", ep.display(), d.log());
    }
    let r = prepare(&rt, &sock, vec![claim_ref("c", &uid(3))]);
    let e = &r.claims[&uid(3)].error;
    assert!(
        e.contains(&format!("device {name0} is full: 512 MiB asked, 768 MiB of its 1024 MiB")),
        "{e}\n{}",
        plugin.log()
    );
    assert!(!d.dir.join("containers").join(format!("dra-{}.sock", uid(3))).exists());
    // The claim's spec: the libraries, the preload file and the hook onto the claim's endpoint.
    let spec: Value =
        serde_json::from_slice(&std::fs::read(dirs.cdi.join(format!("gpupool.io-claim_{}.json", uid(1)))).unwrap())
            .unwrap();
    assert_eq!(spec["kind"], "gpupool.io/claim");
    assert_eq!(spec["devices"][0]["name"], format!("{}-0", uid(1)));
    let args: Vec<&str> =
        spec["containerEdits"]["hooks"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[1..6], ["oci-hook", "create-runtime", "--cdi", "--claim", &format!("dra-{}", uid(1))]);
    // The endpoints carry the claims' limits: b's parameters narrowed its 512 MiB to 256.
    assert!(d.log().contains(&format!("container=dra-{}", uid(2))), "{}", d.log());

    // Retried (the kubelet does): the same answer, nothing new.
    let again = prepare(&rt, &sock, vec![claim_ref("a", &uid(1))]);
    assert_eq!(again.claims[&uid(1)].devices, first_a);
    // A claim whose uid is not the API server's (deleted and made again) is refused.
    let r = prepare(&rt, &sock, vec![claim_ref("a", &uid(9))]);
    assert!(r.claims[&uid(9)].error.contains("replaced"), "{r:?}");
    // Bad parameters are refused with the reason.
    api.add_claim(claim("bad", &uid(4), &name0, "1Mi", "10", json!({"memoryMB": 5})));
    let r = prepare(&rt, &sock, vec![claim_ref("bad", &uid(4))]);
    assert!(r.claims[&uid(4)].error.contains("unknown field `memoryMB`"), "{r:?}");

    // Unprepare frees: the endpoint and spec go, and a's place is free again (c now fits).
    let r = unprepare(&rt, &sock, vec![claim_ref("a", &uid(1))]);
    assert_eq!(r.claims[&uid(1)].error, "");
    assert!(!d.dir.join("containers").join(format!("dra-{}.sock", uid(1))).exists());
    assert!(!dirs.cdi.join(format!("gpupool.io-claim_{}.json", uid(1))).exists());
    let r = unprepare(&rt, &sock, vec![claim_ref("a", &uid(1))]);
    assert_eq!(r.claims[&uid(1)].error, "", "unprepare is idempotent");
    let r = prepare(&rt, &sock, vec![claim_ref("c", &uid(3))]);
    assert_eq!(r.claims[&uid(3)].error, "", "{r:?}");

    // A restarted plugin still knows its claims (the checkpoint): a retry is answered, not refused.
    drop(plugin);
    let plugin = plugin_with(&api, &d.endpoint(), &dirs, &dir);
    wait_for(&reg, &plugin);
    let t0 = Instant::now();
    let r = loop {
        if let Ok(r) = try_prepare(&rt, &sock, vec![claim_ref("b", &uid(2))]) {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", plugin.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(r.claims[&uid(2)].error, "", "{r:?}\n{}", plugin.log());
    unprepare(&rt, &sock, vec![claim_ref("b", &uid(2)), claim_ref("c", &uid(3))]);
    let left: Vec<_> = std::fs::read_dir(d.dir.join("containers")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "{left:?}");
    drop(plugin);
}

#[test]
fn a_lost_device_is_tainted_in_the_slice_until_the_daemon_has_it_again() {
    let api = ApiServer::start();
    let dir = std::env::temp_dir().join(format!("gpupool-dra-loss-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let shared = dir.join("gpupool.sock");
    let listen = format!("unix://{}", shared.display());
    let start = |devices: &str| Daemon::start_env(None, &["--listen", &listen], &[("GPUPOOL_SIM_DEVICES", devices)]);
    let d = start("2");
    let dirs = Dirs::under(&dir);
    let plugin = plugin_with(&api, &listen, &dirs, &dir);
    let s = api.wait_slice("of two healthy devices", |s| tainted(s) == [false, false], &plugin);
    let names = device_names(&s);

    // The daemon gone: every device lost.
    drop(d);
    let s = api.wait_slice("all tainted", |s| tainted(s) == [true, true], &plugin);
    let taint = &s["spec"]["devices"][0]["taints"][0];
    assert_eq!((&taint["key"], &taint["effect"]), (&json!("gpupool.io/device-lost"), &json!("NoSchedule")));
    // Back with one device: the other stays tainted, under its name.
    let d = start("1");
    let s = api.wait_slice("with device 1 tainted", |s| tainted(s) == [false, true], &plugin);
    assert_eq!(device_names(&s), names);
    drop(d);
    // Both again: no taint.
    let lost = dir.join("lost");
    std::fs::write(&lost, "").unwrap();
    let lost_env = lost.display().to_string();
    let _d = Daemon::start_env(
        None,
        &["--listen", &listen],
        &[("GPUPOOL_SIM_DEVICES", "2"), ("GPUPOOL_SIM_LOST", &lost_env)],
    );
    api.wait_slice("untainted", |s| tainted(s) == [false, false], &plugin);
    // Device 1 falls off the bus under the running daemon (NVML: NVML_ERROR_GPU_IS_LOST): tainted,
    // and a claim allocated on it is refused; found again: untainted, and the claim is prepared.
    std::fs::write(&lost, "1").unwrap();
    api.wait_slice("with the lost device 1 tainted", |s| tainted(s) == [false, true], &plugin);
    let uid = "10570000-0000-4000-8000-000000000001";
    api.add_claim(claim("on-lost", uid, &names[1], "64Mi", "10", json!({})));
    let rt = rt();
    let sock = dirs.plugin.join("dra.sock");
    let r = prepare(&rt, &sock, vec![claim_ref("on-lost", uid)]);
    assert!(r.claims[uid].error.contains(&format!("device {} is lost", names[1])), "{r:?}");
    std::fs::write(&lost, "").unwrap();
    api.wait_slice("untainted again", |s| tainted(s) == [false, false], &plugin);
    let r = prepare(&rt, &sock, vec![claim_ref("on-lost", uid)]);
    assert_eq!(r.claims[uid].error, "", "{r:?}\n{}", plugin.log());
    assert_eq!(unprepare(&rt, &sock, vec![claim_ref("on-lost", uid)]).claims[uid].error, "");
    let generations: Vec<i64> =
        api.applies().iter().map(|a| a.body["spec"]["pool"]["generation"].as_i64().unwrap()).collect();
    assert!(generations.windows(2).all(|w| w[1] == w[0] + 1), "each change a new generation: {generations:?}");
    drop(plugin);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's `gpupool dra` line, as written (the kubelet's and CDI's default directories, the
/// daemon on its default socket), prepares a claim of 512 MiB and 20%; podman runs a container
/// with its CDI device; the client in it is held to 512 MiB and to 20% of the device; unprepare
/// leaves nothing in the daemon.
#[test]
fn a_prepared_claim_runs_a_podman_container_held_to_512_mib_and_20_percent() {
    common::ensure_interposer();
    ct::require_tool("podman");
    ct::require_tool("runc");
    let d = Daemon::start_with(Some(&quota_config()), &["--listen", "unix:///run/gpupool/gpupool.sock"]);
    let api = ApiServer::start();
    let dir = d.dir.join("dra");
    std::fs::create_dir_all(&dir).unwrap();
    let line = gpupool_e2e::readme::command("gpupool dra");
    let path = format!("{}:{}", gpupool().parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("exec {line}")]).env("PATH", &path).env("NODE_NAME", NODE);
    let plugin = start_plugin(&mut cmd, &api, &dir);
    let slice = api.wait_slice(
        "of the daemon's devices",
        |s| s["spec"]["devices"].as_array().is_some_and(|d| d.len() == 2),
        &plugin,
    );
    let dev0 = slice["spec"]["devices"][0]["name"].as_str().unwrap().to_string();
    let sock = Path::new("/var/lib/kubelet/plugins/gpupool.io/dra.sock");
    wait_for(sock, &plugin);
    let rt = rt();
    let info = kubelet_registers(Path::new("/var/lib/kubelet/plugins_registry/gpupool.io-reg.sock"), &rt);
    assert_eq!(info.endpoint, sock.display().to_string());

    let uid = format!("e2e00000-0000-4000-8000-{:012}", std::process::id());
    api.add_claim(claim("slice", &uid, &dev0, "512Mi", "20", json!({"tenant": "alpha"})));
    let r = prepare(&rt, sock, vec![claim_ref("slice", &uid)]);
    let c = &r.claims[&uid];
    assert_eq!(c.error, "", "{}", plugin.log());
    let cdi_device = c.devices[0].cdi_device_ids[0].clone();
    let spec_file = PathBuf::from(format!("/var/run/cdi/gpupool.io-claim_{uid}.json"));
    assert!(spec_file.exists());

    let podman = |name: &str, program: &Path, args: &[&str]| {
        let cwd = dir.join(name);
        std::fs::create_dir_all(&cwd).unwrap();
        let _rootfs = ct::HostUsrRootfs::new(&cwd, program, name);
        let out = Command::new(ct::require_tool("podman"))
            .args(["run", "--rm", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "--network", "none"])
            .args(["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--device", &cdi_device, "--rootfs"])
            .arg(cwd.join("rootfs"))
            .arg(format!("/app/{name}"))
            .args(args)
            .current_dir(&cwd)
            .env_remove("GPUPOOL_ENDPOINT")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman {name}: {}\n{}\n{}",
            gpupool_e2e::output_text(&out),
            d.log(),
            plugin.log()
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let bin = dir.join("bin");
    // Memory: the device shows 512 MiB and no more can be allocated.
    let quota = podman("cuda-job", &gpupool_e2e::compile_c("container_client", &bin), &["quota"]);
    let f: HashMap<&str, &str> = quota.split_whitespace().filter_map(|kv| kv.split_once('=')).collect();
    let want = (512 * MIB).to_string();
    assert_eq!((f.get("total"), f.get("allocated")), (Some(&want.as_str()), Some(&want.as_str())), "{quota}");
    assert_eq!(f.get("oom"), Some(&"CUDA_ERROR_OUT_OF_MEMORY"), "{quota}");
    assert_eq!(f.get("libcuda"), Some(&"/opt/gpupool/lib/libgpupool.so"), "{quota}");
    // Compute: kernels as fast as they go, held to 20% of the device.
    let load =
        podman("compute-load", &gpupool_e2e::compile_c("compute_load", &bin), &["--duration", "5", "--batch", "4"]);
    let r = gpupool_e2e::compute_load::LoadReport::parse(&load).unwrap();
    let from = r.start + gpupool_e2e::compute_load::SEC;
    let share = r.share(from, from + 3 * gpupool_e2e::compute_load::SEC).unwrap();
    eprintln!("claim of 20%: the container's kernels had {share:.2}% of the device");
    assert!(share <= 21.0, "over the claim's 20%: {share:.2}%");
    assert!(share >= 15.0, "far under the claim's 20% (a busy host?): {share:.2}%");
    assert!(d.log().contains(&format!("tenant=alpha container=Some(\"dra-{uid}\")")), "{}", d.log());

    // Unprepare: the endpoint, its sessions and their memory go; the spec goes.
    let r = unprepare(&rt, sock, vec![claim_ref("slice", &uid)]);
    assert_eq!(r.claims[&uid].error, "");
    assert!(!spec_file.exists());
    let doc = d.status();
    assert!(doc["sessions"].as_array().unwrap().is_empty(), "{doc:#}");
    for dev in 0..2 {
        assert_eq!(d.used("alpha", dev), 0, "{doc:#}");
    }
    assert!(!Path::new(&format!("/run/gpupool/containers/dra-{uid}.sock")).exists());
    drop(plugin);
}
