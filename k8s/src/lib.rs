//! gpupool on Kubernetes: the kubelet's gRPC APIs and the node agents that speak them.
//!
//! Owns: the code generated from the kubelet's vendored protos (`proto/`, compiled by `build.rs`:
//! [`deviceplugin::v1beta1`], [`pluginregistration::v1`], [`dra::v1`]); serving and dialing gRPC
//! over unix sockets ([`unix`]); registering with the kubelet ([`registration`]: the device
//! plugin's `Register` on `kubelet.sock`, and the plugin-watcher `Registration` service DRA
//! plugins serve); the node's devices as the daemon reports them ([`node`]).
//!
//! Must not: touch a device or a vendor library, or the daemon's internals. Everything it knows
//! about the pool comes through what the `gpupool` binary passes in ([`node::Inventory`], which
//! reads the daemon's status document) and the daemon's sockets. It runs its own tokio runtime:
//! the daemon itself has none.

pub mod device_plugin;
pub mod node;
pub mod registration;
pub mod unix;

/// The device plugin API, `k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1`.
pub mod deviceplugin {
    // Generated from upstream's comments, which clippy's doc lints would rewrite.
    #[allow(clippy::all)]
    pub mod v1beta1 {
        tonic::include_proto!("v1beta1");

        /// The API version a plugin registers with (`RegisterRequest.version`).
        pub const VERSION: &str = "v1beta1";
        /// `Device.health` of a usable device.
        pub const HEALTHY: &str = "Healthy";
        /// `Device.health` of a device the kubelet must stop allocating.
        pub const UNHEALTHY: &str = "Unhealthy";
        /// The kubelet's registration socket, in its device plugin directory.
        pub const KUBELET_SOCKET: &str = "kubelet.sock";
        /// The kubelet's device plugin directory.
        pub const DEVICE_PLUGIN_PATH: &str = "/var/lib/kubelet/device-plugins";
    }
}

/// Plugin registration through the kubelet's plugin watcher, `k8s.io/kubelet/pkg/apis/pluginregistration/v1`
/// (upstream's proto package is `pluginregistration`).
pub mod pluginregistration {
    #[allow(clippy::all)]
    pub mod v1 {
        tonic::include_proto!("pluginregistration");

        /// `PluginInfo.type` of a DRA plugin (the kubelet's `DRAPlugin` constant).
        pub const DRA_PLUGIN: &str = "DRAPlugin";
        /// `PluginInfo.type` of a device plugin (the kubelet's `DevicePlugin` constant).
        pub const DEVICE_PLUGIN: &str = "DevicePlugin";
        /// The directory the kubelet's plugin watcher watches for registration sockets.
        pub const PLUGINS_REGISTRY: &str = "/var/lib/kubelet/plugins_registry";
    }
}

/// Dynamic Resource Allocation's kubelet plugin API, `k8s.io/kubelet/pkg/apis/dra/v1`.
pub mod dra {
    #[allow(clippy::all)]
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");

        /// The gRPC service name a DRA plugin lists in `PluginInfo.supported_versions`.
        pub const SERVICE: &str = "v1.DRAPlugin";
    }
}

/// `gpupool dra`: the DRA kubelet plugin and ResourceSlice publisher of driver gpupool.io.
pub mod dra_driver;
