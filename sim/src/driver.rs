//! Process-wide driver state: configuration, devices, handle registries, `cuInit`.

use crate::array::{Array, MipmappedArray};
use crate::config::SimConfig;
use crate::context::Context;
use crate::device::Device;
use crate::error::{CuResult, fail};
use crate::event::Event;
use crate::graph::{Graph, GraphExec};
use crate::handles::{Kind, Registry};
use crate::memory::PinnedHost;
use crate::module::{Function, Module};
use crate::stream::Stream;
use crate::texture::{SurfObject, TexObject};
use gpupool_shim::cuda::CUresult;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub struct Driver {
    pub config: SimConfig,
    pub devices: Vec<Arc<Device>>,
    /// Why the configuration was rejected, if it was; `cuInit` then fails.
    pub config_error: Option<String>,
    initialized: AtomicBool,
    pub contexts: Registry<Context>,
    pub streams: Registry<Stream>,
    pub events: Registry<Event>,
    pub modules: Registry<Module>,
    pub functions: Registry<Function>,
    pub graphs: Registry<Graph>,
    pub graph_execs: Registry<GraphExec>,
    pub pinned: PinnedHost,
    pub arrays: Registry<Array>,
    pub mipmapped_arrays: Registry<MipmappedArray>,
    pub textures: Registry<TexObject>,
    pub surfaces: Registry<SurfObject>,
}

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// The driver state, built on first use. Building it is cheap (no threads, no
/// allocations of device memory), so library load stays cheap.
pub fn state() -> &'static Driver {
    DRIVER.get_or_init(|| {
        let (config, config_error) = match SimConfig::from_env() {
            Ok(c) => (c, None),
            Err(e) => (SimConfig { devices: Vec::new(), ..SimConfig::default() }, Some(e)),
        };
        let devices =
            config.devices.iter().enumerate().map(|(i, d)| Arc::new(Device::new(i as i32, d.clone()))).collect();
        Driver {
            config,
            devices,
            config_error,
            initialized: AtomicBool::new(false),
            contexts: Registry::new(Kind::Context),
            streams: Registry::new(Kind::Stream),
            events: Registry::new(Kind::Event),
            modules: Registry::new(Kind::Module),
            functions: Registry::new(Kind::Function),
            graphs: Registry::new(Kind::Graph),
            graph_execs: Registry::new(Kind::GraphExec),
            pinned: PinnedHost::default(),
            arrays: Registry::new(Kind::Array),
            mipmapped_arrays: Registry::new(Kind::MipmappedArray),
            textures: Registry::new(Kind::TexObject),
            surfaces: Registry::new(Kind::SurfObject),
        }
    })
}

impl Driver {
    pub fn init(&self, flags: u32) -> CuResult<()> {
        if flags != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("cuInit flags must be 0, got {flags}"));
        }
        if self.forked() {
            return fail(CUresult::CUDA_ERROR_NOT_INITIALIZED, || {
                "the driver was initialised by the parent process before fork".into()
            });
        }
        if let Some(e) = &self.config_error {
            eprintln!("gpupool-sim: configuration rejected: {e}");
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if self.devices.is_empty() {
            return fail(CUresult::CUDA_ERROR_NO_DEVICE, || "the configuration has no devices".into());
        }
        static WATCH_FORK: std::sync::Once = std::sync::Once::new();
        WATCH_FORK.call_once(|| {
            // SAFETY: registers a child handler that only stores to an atomic, which
            // is async-signal-safe as fork handlers must be.
            unsafe { libc::pthread_atfork(None, None, Some(mark_forked)) };
        });
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// A forked child inherits the state but not the worker threads, so it must not
    /// use a driver its parent initialised (NVIDIA's driver refuses too).
    fn forked(&self) -> bool {
        FORKED.load(Ordering::Relaxed)
    }

    pub fn is_initialized(&self) -> bool {
        self.initialized.load(Ordering::Acquire) && !self.forked()
    }

    pub fn device(&self, ordinal: i32) -> CuResult<&Arc<Device>> {
        match usize::try_from(ordinal).ok().and_then(|i| self.devices.get(i)) {
            Some(d) => Ok(d),
            None => fail(CUresult::CUDA_ERROR_INVALID_DEVICE, || {
                format!("device ordinal {ordinal} (there are {})", self.devices.len())
            }),
        }
    }
}

static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// The driver, if `cuInit` has succeeded; `CUDA_ERROR_NOT_INITIALIZED` otherwise.
pub fn initialized() -> CuResult<&'static Driver> {
    let d = state();
    if d.is_initialized() {
        Ok(d)
    } else {
        fail(CUresult::CUDA_ERROR_NOT_INITIALIZED, || "cuInit has not been called".into())
    }
}
