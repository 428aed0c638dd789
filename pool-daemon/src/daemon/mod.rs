//! `gpupool daemon`: owns the devices through the vendor libraries and serves pooled
//! clients, one session (thread) per client process.
//!
//! - [`listener`]: the unix socket (path, mode 0660, stale-socket removal), SO_PEERCRED,
//!   the accept loops, the control socket `<socket>.ctl` behind `gpupool status`.
//! - [`admission`]: the bound on connections waiting for their hello (unix and network).
//! - [`session`]: the hello handshake and the request loop of one client.
//! - [`serve`]: every [`gpupool_protocol::Request`] to the backend, one method per line of
//!   the protocol's table (the [`gpupool_protocol::ops::Serve`] trait it generates);
//!   [`dispatch`]: the checks of every handle and device pointer against what the session
//!   owns, and the quota reservation before an allocation.
//! - [`vmm`]: virtual memory management (reservations, physical allocations, mappings,
//!   exports between sessions of one tenant) with the ledger's books and the ownership checks.
//! - [`npu`]: the same operations for a device of the list that is an NPU (AscendCL): the
//!   session, ledger and cleanup are shared; only the backend call and its error codes differ.
//! - [`cleanup`]: everything a session owned is freed when it ends, however it ends;
//!   [`malloc`]: the daemon's own heap given back after each session, its arenas capped.
//! - [`containers`]: per-container endpoints (a socket bound to one tenant and narrowed
//!   limits), made and removed over the root-only `<socket>.containers`.
//! - [`control`]: the status document (devices, tenants, sessions, the ledger);
//!   [`status_view`]: what a status request over the protocol may see of it (a tenant's
//!   token its own tenant, the admin token everything).
//!
//! Signals: SIGTERM/SIGINT stop accepting, close every session (freeing what it owned)
//! and remove the sockets; SIGHUP reloads the quota config into the ledger.

pub mod admission;
pub mod array;
pub mod blas;
pub mod blas_lt;
pub mod checkpoint;
pub mod cleanup;
pub mod compute;
pub mod containers;
pub mod control;
pub mod copy2d;
pub mod dispatch;
pub mod evict;
pub mod exec;
pub mod graph;
pub mod graph_capture;
pub mod graph_edit;
pub mod graph_kernel;
pub mod graph_mem;
pub mod graph_params;
pub mod host_fn;
pub mod ipc;
pub mod legacy;
pub mod listener;
pub mod malloc;
pub mod metrics;
pub mod npu;
pub mod placement;
pub mod preempt;
pub mod regions;
pub mod remote;
pub mod restore;
pub mod serve;
pub mod session;
pub mod status_view;
pub mod streams;
pub mod texture;
pub mod vmm;

use crate::backend::{Acl, Cuda, DriverSource, Nvml};
use crate::{acl_call, call};
use anyhow::{Context as _, Result};
use gpupool_protocol::ops::DeviceAttribute;
use gpupool_quota::{Config, Ledger, TenantId};
use gpupool_shim::cuda::{CUcontext, CUdevice, CUdevice_attribute, CUevent, CUuuid};
use std::collections::{BTreeMap, HashMap};
use std::os::raw::{c_char, c_int};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// What `gpupool daemon` was asked to do.
pub struct Options {
    pub config: Option<PathBuf>,
    pub listen: Vec<PathBuf>,
    /// Network endpoints (`tls://`, `tcp://`), served beside the unix sockets.
    pub remote: Vec<remote::NetEndpoint>,
    pub net: remote::NetOptions,
    pub sim: bool,
    pub driver_dir: Option<PathBuf>,
    /// Enforce compute quotas (off only to measure what the scheduler costs).
    pub compute_scheduler: bool,
    /// Stop lower priorities' kernels between blocks where the driver can ([`preempt`]).
    pub compute_preemption: bool,
    /// Serve Prometheus metrics over HTTP here.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--placement`: wins over the config's `placement`.
    pub placement: Option<gpupool_quota::Placement>,
    /// `--restore DIR`: checkpoints to bring back as sessions waiting for their clients.
    pub restore: Option<PathBuf>,
}

/// A vendor handle (context, stream, event, module, function) moved between threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raw<T>(pub T);
// SAFETY: CUDA driver handles are opaque tokens that the driver lets any thread use
// (with the right context current, which dispatch ensures); we never dereference them.
unsafe impl<T> Send for Raw<*mut T> {}
// SAFETY: as above; sharing the token itself involves no access.
unsafe impl<T> Sync for Raw<*mut T> {}

/// One device as the daemon found it at start-up: GPUs first, then NPUs, one ordinal space
/// (the protocol's device numbers, the ledger's and the compute scheduler's).
pub struct Device {
    /// The vendor's own number for it: a `CUdevice`, or an AscendCL device id.
    pub cu: CUdevice,
    /// `gpupool_protocol::ops::VENDOR_CUDA` or `VENDOR_ASCEND`.
    pub vendor: u8,
    pub name: String,
    pub uuid: [u8; 16],
    pub total_memory: u64,
    pub compute_capability: [u32; 2],
    pub attributes: Vec<DeviceAttribute>,
}

/// A tenant's own backend context on one device, shared by that tenant's sessions.
pub struct TenantCtx {
    /// The device's vendor's context: a `CUcontext`, or for an NPU an `aclrtContext` (both
    /// opaque tokens the daemon never dereferences, kept in one field so that sessions,
    /// cleanup and the compute scheduler hold contexts the same way for every vendor).
    pub ctx: Raw<CUcontext>,
    pub device: u32,
    pub tenant: TenantId,
    /// Events the compute scheduler brackets kernels with, reused.
    events: Mutex<Vec<Raw<CUevent>>>,
}

impl TenantCtx {
    /// An event of this context (created with the context current on the calling thread).
    pub fn take_event(&self, shared: &Shared) -> Result<Raw<CUevent>, dispatch::Fail> {
        if let Some(e) = self.events.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(e);
        }
        let mut e: CUevent = std::ptr::null_mut();
        call!(shared.cuda, cuEventCreate(&mut e, 0))?;
        Ok(Raw(e))
    }

    pub fn give_events(&self, events: &[Raw<CUevent>]) {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(events);
    }
}

/// What `gpupool status` lists per session.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SessionInfo {
    pub id: u64,
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    pub tenant: String,
    pub client: String,
    /// The client's address, for a session over the network (its pid, uid and gid are then
    /// what it said, not what a kernel vouched for).
    pub remote: Option<std::net::SocketAddr>,
    /// The container whose endpoint the session came through ([`containers`]).
    pub container: Option<String>,
    pub started_unix_ms: u128,
    /// The GPUs the daemon placed the session on, its devices 0..N-1 in this order
    /// ([`placement`]); None: it sees every device.
    pub placement: Option<Vec<u32>>,
    /// Its memory quota on each placed GPU (what placement counts as committed there).
    #[serde(skip)]
    pub placed_quota: Vec<u64>,
}

/// State shared by every thread of the daemon.
pub struct Shared {
    pub cuda: Cuda,
    /// AscendCL, when `libascendcl.so` was found beside the driver and has devices.
    pub acl: Option<Acl>,
    /// The operators (`libopapi.so` beside it), when AscendCL was loaded and it is there.
    pub opapi: Option<crate::backend::Opapi>,
    pub nvml: Option<Nvml>,
    pub ledger: Ledger,
    pub devices: Vec<Device>,
    pub driver_version: u32,
    pub config_path: Option<PathBuf>,
    pub endpoints: Vec<PathBuf>,
    /// The network endpoints served, as `tls://ADDR:PORT` / `tcp://ADDR:PORT`.
    pub remote_endpoints: Vec<String>,
    pub shutdown: AtomicBool,
    contexts: Mutex<HashMap<(TenantId, u32), Weak<TenantCtx>>>,
    pub sessions: Mutex<BTreeMap<u64, SessionInfo>>,
    pub session_threads: Mutex<Vec<JoinHandle<()>>>,
    pub compute: compute::Compute,
    /// Requests served, by operation (for `--metrics`).
    pub calls: metrics::Calls,
    /// cuBLAS / cuBLASLt from the driver's directory, loaded on the first BLAS request.
    pub blas: crate::backend::Blas,
    /// VMM handle ids and live exports ([`vmm`]).
    pub vmm: vmm::Registry,
    /// Memory preemption: evictable allocations, the gates, the statistics ([`evict`]).
    pub evict: evict::Evictor,
    /// Checkpoints asked and not yet written ([`checkpoint`]).
    pub checkpoints: checkpoint::Pending,
    /// Sessions `--restore` brought back that wait for their client ([`restore`]).
    pub restored: restore::Restored,
    /// Per-container endpoints ([`containers`]).
    pub containers: containers::Registry,
    /// The GPUs' wiring, from NVML at start-up ([`placement`]).
    pub topology: placement::Topology,
    /// `--placement`, if given.
    pub placement_flag: Option<gpupool_quota::Placement>,
    next_session: AtomicU64,
}

impl Shared {
    pub fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    /// A restored session keeps its id; new ones come after it.
    pub fn bump_session_id(&self, restored: u64) {
        self.next_session.fetch_max(restored + 1, Ordering::Relaxed);
    }

    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// AscendCL when `device` is one of its NPUs.
    pub fn npu(&self, device: u32) -> Option<&Acl> {
        let d = self.devices.get(device as usize)?;
        (d.vendor == gpupool_protocol::ops::VENDOR_ASCEND).then_some(self.acl.as_ref()).flatten()
    }

    /// The tenant's context on `device`, created (cuCtxCreate_v2) on first use. Tenants
    /// never share a context; sessions of one tenant do.
    pub fn tenant_ctx(&self, tenant: &TenantId, device: u32) -> Result<Arc<TenantCtx>, dispatch::Fail> {
        let dev = self.devices.get(device as usize).ok_or_else(|| dispatch::Fail::invalid_device(device))?;
        let mut map = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tenant.clone(), device);
        if let Some(tc) = map.get(&key).and_then(Weak::upgrade) {
            return Ok(tc);
        }
        let mut ctx: CUcontext = std::ptr::null_mut();
        if let Some(acl) = self.npu(device) {
            let mut a: gpupool_shim::acl::aclrtContext = std::ptr::null_mut();
            acl_call!(acl, aclrtCreateContext(&mut a, dev.cu))?;
            ctx = a.cast();
        } else {
            call!(self.cuda, cuCtxCreate_v2(&mut ctx, 0, dev.cu))?;
        }
        tracing::debug!(tenant = %tenant.as_str(), device, "created the tenant's context");
        let tc = Arc::new(TenantCtx { ctx: Raw(ctx), device, tenant: tenant.clone(), events: Mutex::new(Vec::new()) });
        map.insert(key, Arc::downgrade(&tc));
        Ok(tc)
    }

    /// Drops a hold on a tenant context (a session's, or the compute monitor's for a kernel in
    /// flight); the last holder destroys it. Every holder lets go through here, under the lock, so
    /// exactly one sees itself last.
    pub fn release_ctx(&self, tc: Arc<TenantCtx>) {
        let mut map = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&tc) > 1 {
            drop(tc);
            return;
        }
        map.remove(&(tc.tenant.clone(), tc.device));
        drop(map);
        if let Some(acl) = self.npu(tc.device) {
            if let Err(e) = acl_call!(acl, aclrtDestroyContext(tc.ctx.0.cast())) {
                tracing::warn!(tenant = %tc.tenant.as_str(), device = tc.device, "destroying the tenant's context: {e}");
            }
            return;
        }
        for e in tc.events.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = call!(self.cuda, cuEventDestroy_v2(e.0));
        }
        if let Err(e) = call!(self.cuda, cuCtxDestroy_v2(tc.ctx.0)) {
            tracing::warn!(tenant = %tc.tenant.as_str(), device = tc.device, "destroying the tenant's context: {e}");
        }
        crate::backend::device_output::forget_context(tc.ctx.0 as usize);
    }
}

/// Reads the quota config: the file given, or the built-in default (one unrestricted
/// default tenant); its `npu<n>` memory keys placed after the `first_npu` GPUs.
pub fn load_config(path: Option<&PathBuf>, first_npu: u32) -> Result<Config> {
    let mut config = match path {
        None => Config::unrestricted(),
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Config::from_toml_str(&text).with_context(|| format!("quota config {}", p.display()))?
        }
    };
    config.place_npus(first_npu);
    Ok(config)
}

impl Shared {
    /// How many GPUs precede the NPUs in the device list.
    pub fn first_npu(&self) -> u32 {
        self.devices.iter().take_while(|d| d.vendor != gpupool_protocol::ops::VENDOR_ASCEND).count() as u32
    }
}

pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("GPUPOOL_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal as _;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

fn discover(cuda: &Cuda) -> Result<(u32, Vec<Device>)> {
    call!(cuda, cuInit(0))?;
    let mut version: c_int = 0;
    call!(cuda, cuDriverGetVersion(&mut version))?;
    let mut count: c_int = 0;
    call!(cuda, cuDeviceGetCount(&mut count))?;
    let mut devices = Vec::new();
    for i in 0..count {
        let mut dev: CUdevice = 0;
        call!(cuda, cuDeviceGet(&mut dev, i))?;
        let mut name = [0 as c_char; 256];
        call!(cuda, cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev))?;
        // SAFETY: the driver NUL-terminates the name within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        let mut uuid = CUuuid::default();
        call!(cuda, cuDeviceGetUuid_v2(&mut uuid, dev))?;
        let mut total = 0usize;
        call!(cuda, cuDeviceTotalMem_v2(&mut total, dev))?;
        let mut attributes = Vec::new();
        for a in 1..200u32 {
            let mut v: c_int = 0;
            if call!(cuda, cuDeviceGetAttribute(&mut v, CUdevice_attribute(a), dev)).is_ok() {
                attributes.push(DeviceAttribute { attribute: a, value: v.into() });
            }
        }
        let get = |a: u32| attributes.iter().find(|x| x.attribute == a).map_or(0, |x| x.value as u32);
        // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76.
        let compute_capability = [get(75), get(76)];
        devices.push(Device {
            cu: dev,
            vendor: gpupool_protocol::ops::VENDOR_CUDA,
            name,
            uuid: uuid.bytes.map(|b| b as u8),
            total_memory: total as u64,
            compute_capability,
            attributes,
        });
    }
    Ok((version as u32, devices))
}

/// The NPUs of `libascendcl.so` in the driver's directory (or on the loader's path), after the
/// GPUs: each device is set once for the daemon's lifetime (so tenants' explicit contexts can be
/// made on it) and measured with `aclrtGetMemInfo`. No library, or no device: no NPUs, and the
/// daemon serves GPUs as before.
fn discover_npus(src: &DriverSource, first: u32) -> (Option<Acl>, Vec<Device>) {
    let path = src.library("libascendcl.so");
    let acl = match Acl::load(&path) {
        Ok(a) => a,
        Err(e) => {
            tracing::info!("no NPUs: {e}");
            return (None, Vec::new());
        }
    };
    let found = || -> Result<Vec<Device>, crate::backend::AclError> {
        acl_call!(acl, aclInit(std::ptr::null()))?;
        let mut count = 0u32;
        acl_call!(acl, aclrtGetDeviceCount(&mut count))?;
        let aicores = npu_aicores(&src.library("libdcmi.so"), count);
        let mut devices = Vec::new();
        for i in 0..count as i32 {
            acl_call!(acl, aclrtSetDevice(i))?;
            let (mut free, mut total) = (0usize, 0usize);
            acl_call!(acl, aclrtGetMemInfo(gpupool_shim::acl::aclrtMemAttr::ACL_HBM_MEM, &mut free, &mut total))?;
            let name = acl.soc_name().unwrap_or_else(|| "Ascend NPU".into());
            // No UUID in AscendCL: a stable one from the pool's ordinal, marked as an NPU's.
            let mut uuid = *b"NPU-\0\0\0\0\0\0\0\0\0\0\0\0";
            uuid[4..8].copy_from_slice(&(first + i as u32).to_be_bytes());
            devices.push(Device {
                cu: i,
                vendor: gpupool_protocol::ops::VENDOR_ASCEND,
                name,
                uuid,
                total_memory: total as u64,
                compute_capability: [0, 0],
                attributes: aicores
                    .get(i as usize)
                    .map(|&n| DeviceAttribute { attribute: gpupool_protocol::ops::NPU_ATTR_AICORES, value: n.into() })
                    .into_iter()
                    .collect(),
            });
        }
        Ok(devices)
    };
    match found() {
        Ok(d) if !d.is_empty() => {
            tracing::info!(npus = d.len(), path = %path.display(), "serving NPUs through AscendCL");
            (Some(acl), d)
        }
        Ok(_) => (None, Vec::new()),
        Err(e) => {
            tracing::warn!("{} loaded but unusable, serving no NPUs: {e}", path.display());
            (None, Vec::new())
        }
    }
}

/// Each NPU's AI Core count from DCMI's chip info (card `i`, chip 0, as CANN lays out one chip
/// per card), for the clients' `dcmi_get_device_chip_info`; empty when DCMI is not there.
fn npu_aicores(path: &std::path::Path, count: u32) -> Vec<u32> {
    type Init = unsafe extern "C" fn() -> std::os::raw::c_int;
    type ChipInfo = unsafe extern "C" fn(
        std::os::raw::c_int,
        std::os::raw::c_int,
        *mut gpupool_shim::dcmi::dcmi_chip_info,
    ) -> std::os::raw::c_int;
    const _: Init = gpupool_shim::dcmi::dcmi_init;
    const _: ChipInfo = gpupool_shim::dcmi::dcmi_get_device_chip_info;
    // SAFETY: loading the vendor's DCMI library runs its initialisers, as its use requires.
    let lib = match unsafe { libloading::Library::new(path) } {
        Ok(l) => l,
        Err(e) => {
            tracing::info!("no DCMI for the NPUs' chip info: {e}");
            return Vec::new();
        }
    };
    // SAFETY: both symbols typed as bindgen declares them (checked above); the chip info is a
    // local of the declared layout.
    unsafe {
        let (Ok(init), Ok(info)) =
            (lib.get::<Init>(b"dcmi_init\0"), lib.get::<ChipInfo>(b"dcmi_get_device_chip_info\0"))
        else {
            return Vec::new();
        };
        if init() != 0 {
            return Vec::new();
        }
        (0..count as i32)
            .map(|card| {
                let mut c: gpupool_shim::dcmi::dcmi_chip_info = std::mem::zeroed();
                if info(card, 0, &mut c) == 0 { c.aicore_cnt } else { 0 }
            })
            .collect()
    }
}

pub fn run(opts: Options) -> Result<()> {
    // Before any thread exists, so every session thread finds the cap (malloc.rs says why).
    let malloc_arenas = malloc::cap_arenas();
    init_logging();
    // Before any session: tenants' device printf output goes to them, not to this output.
    crate::backend::device_output::install().context("capturing standard output for device printf")?;
    let src = crate::probe::source(opts.sim, opts.driver_dir.clone())?;
    let cuda_path = src.library("libcuda.so.1");
    let cuda = Cuda::load(&cuda_path).with_context(|| {
        format!(
            "no CUDA driver found ({}); install NVIDIA's driver, pass --driver-dir DIR, or run with --sim",
            match &src {
                DriverSource::System => "libcuda.so.1 is not on the loader's search path".to_string(),
                DriverSource::Dir(d) => format!("nothing loadable in {}", d.display()),
            }
        )
    })?;
    let nvml = match Nvml::load(&src.library("libnvidia-ml.so.1")) {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::warn!("NVML unavailable ({e:#}); management queries answer from CUDA");
            None
        }
    };
    let (driver_version, mut devices) = discover(&cuda)?;
    let first_npu = devices.len() as u32;
    let (acl, npus) = discover_npus(&src, first_npu);
    devices.extend(npus);
    let opapi = acl.as_ref().and_then(|_| match crate::backend::Opapi::load(&src.library("libopapi.so")) {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::warn!("NPUs without operators: {e}");
            None
        }
    });
    let config = load_config(opts.config.as_ref(), first_npu)?;
    let endpoints = if opts.listen.is_empty() { vec![listener::default_socket_path()] } else { opts.listen.clone() };
    let devices_len = devices.len();
    let gpu_uuids: Vec<String> =
        devices[..first_npu as usize].iter().map(|d| gpupool_abi::identity::uuid_string(&d.uuid)).collect();
    let topology = match &nvml {
        Some(n) => placement::Topology::discover(n, &gpu_uuids),
        None => placement::Topology::unknown(gpu_uuids.len()),
    };
    // Bound early: a bad certificate or an insecure address fails before any device work.
    let remote_listeners = remote::bind(&opts.remote, &opts.net)?;
    let sim_preempt = cuda.sim_preempt.filter(|_| opts.compute_preemption);
    let shared = Arc::new(Shared {
        cuda,
        acl,
        opapi,
        nvml,
        ledger: Ledger::new(config),
        devices,
        driver_version,
        config_path: opts.config.clone(),
        endpoints: endpoints.clone(),
        remote_endpoints: remote_listeners.iter().map(remote::Bound::url).collect(),
        shutdown: AtomicBool::new(false),
        contexts: Mutex::new(HashMap::new()),
        sessions: Mutex::new(BTreeMap::new()),
        session_threads: Mutex::new(Vec::new()),
        compute: compute::Compute::new(devices_len, opts.compute_scheduler, sim_preempt),
        calls: metrics::Calls::default(),
        blas: crate::backend::Blas::new(src.clone()),
        vmm: vmm::Registry::default(),
        evict: evict::Evictor::default(),
        checkpoints: Default::default(),
        restored: Default::default(),
        containers: containers::Registry::default(),
        topology,
        placement_flag: opts.placement,
        next_session: AtomicU64::new(1),
    });
    compute::Compute::start_monitors(&shared)?;
    if let Some(addr) = opts.metrics {
        let l = std::net::TcpListener::bind(addr).with_context(|| format!("binding the metrics address {addr}"))?;
        tracing::info!(addr = %l.local_addr()?, "serving Prometheus metrics at /metrics");
        metrics::serve(shared.clone(), l)?;
    }
    let listeners = endpoints.iter().map(|p| listener::bind(p)).collect::<Result<Vec<_>>>()?;
    // Before any client is accepted, so a resuming client finds its session.
    if let Some(dir) = &opts.restore {
        let n = restore::restore_all(&shared, dir)?;
        tracing::info!(sessions = n, dir = %dir.display(), "restored from checkpoints");
    }
    tracing::info!(
        devices = shared.devices.len(),
        driver = format!("{}.{}", driver_version / 1000, driver_version % 1000 / 10),
        endpoints = ?endpoints,
        remote = ?shared.remote_endpoints,
        config = ?opts.config,
        malloc_arenas = ?malloc_arenas,
        "gpupool daemon ready"
    );
    listener::serve(shared, listeners, remote_listeners)
}

/// A session's map by handle on a request's path (every launch looks up its function and
/// stream): foldhash, several times faster than std's SipHash for these integer keys. Keys are
/// ids this daemon issued (a client's lookup of any other id only misses), and the hasher is
/// seeded per process all the same.
pub type HandleMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
