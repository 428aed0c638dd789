//! A simulated device: its identity, attributes, memory capacity and busy time.

use crate::config::DeviceConfig;
use crate::error::{CuResult, fail};
use crate::utilization::Utilization;
use gpupool_shim::cuda::{CUdevice_attribute as A, CUresult};
use std::sync::Mutex;

pub struct Device {
    pub ordinal: i32,
    pub cfg: DeviceConfig,
    pub uuid: [u8; 16],
    used: Mutex<u64>,
    pub busy: Utilization,
    pub primary: Mutex<crate::context::PrimaryState>,
}

impl Device {
    pub fn new(ordinal: i32, cfg: DeviceConfig) -> Self {
        Device {
            ordinal,
            uuid: uuid_for(ordinal, &cfg.name),
            cfg,
            used: Mutex::new(0),
            busy: Utilization::default(),
            primary: Mutex::new(Default::default()),
        }
    }

    pub fn total_memory(&self) -> u64 {
        self.cfg.memory_bytes
    }

    pub fn used_memory(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `bytes` of device memory, or fails with `CUDA_ERROR_OUT_OF_MEMORY` if that
    /// would exceed the device's capacity. Accounting is exact to the byte.
    pub fn reserve(&self, bytes: u64) -> CuResult<()> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        match used.checked_add(bytes) {
            Some(total) if total <= self.cfg.memory_bytes => {
                *used = total;
                Ok(())
            }
            _ => fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || {
                format!(
                    "device {}: {bytes} bytes requested, {} of {} in use",
                    self.ordinal, *used, self.cfg.memory_bytes
                )
            }),
        }
    }

    pub fn release(&self, bytes: u64) {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = used.saturating_sub(bytes);
    }

    pub fn pci_bus(&self) -> i32 {
        0x18 + self.ordinal * 0x10
    }

    pub fn pci_bus_id(&self) -> String {
        format!("0000:{:02x}:00.0", self.pci_bus())
    }

    /// The address `pci_bus_id` prints (domain 0, device 0), as NVML reports it.
    pub fn pci_address(&self) -> gpupool_abi::nvml::PciAddress {
        gpupool_abi::nvml::PciAddress { domain: 0, bus: self.pci_bus() as u32, device: 0 }
    }

    /// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi print it.
    pub fn uuid_string(&self) -> String {
        gpupool_abi::identity::uuid_string(&self.uuid)
    }

    /// The value of a device attribute, as an H100-class part of this configuration
    /// reports it. `None` for values outside the attribute enumeration.
    pub fn attribute(&self, attr: A) -> Option<i32> {
        let c = &self.cfg;
        let hopper = c.cc_major >= 9;
        let v = match attr {
            A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X | A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y => 1024,
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z => 64,
            A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X => i32::MAX,
            A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y | A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z => 65535,
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => MAX_STATIC_SHARED as i32,
            A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY => 65536,
            A::CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
            A::CU_DEVICE_ATTRIBUTE_MAX_PITCH => i32::MAX,
            A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK => 65536,
            A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE => (c.clock_mhz * 1000) as i32,
            A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT => 512,
            A::CU_DEVICE_ATTRIBUTE_GPU_OVERLAP => 1,
            A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => c.sms as i32,
            A::CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT => 0,
            A::CU_DEVICE_ATTRIBUTE_INTEGRATED => 0,
            A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY => 1,
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE => 0,
            A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH => 131072,
            A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH => 131072,
            A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT => 65536,
            A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH
            | A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT
            | A::CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH => 16384,
            A::CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT => 512,
            A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS => 1,
            A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED => 1,
            A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => self.pci_bus(),
            A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID => 0,
            A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID => 0,
            A::CU_DEVICE_ATTRIBUTE_TCC_DRIVER => 0,
            A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE => 2_619_000,
            A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH => 5120,
            A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE => 50 << 20,
            A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
            A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT => 2,
            A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
            A::CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT => 32,
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => c.cc_major as i32,
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => c.cc_minor as i32,
            A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED | A::CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => 233_472,
            A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR => 65536,
            A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY => 0,
            A::CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD => 0,
            A::CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID => self.ordinal,
            A::CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO => 2,
            A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS => 0,
            A::CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM => 1,
            A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH => 1,
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => MAX_OPTIN_SHARED as i32,
            A::CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => MAX_BLOCKS_PER_SM as i32,
            A::CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE => 31 << 20,
            A::CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE => 134_213_632,
            A::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK => 1024,
            A::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => 1,
            A::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH => hopper as i32,
            A::CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT => 4,
            A::CU_DEVICE_ATTRIBUTE_NUMA_ID | A::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID => -1,
            A::CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED => 1,
            other if other.0 >= 1 && other.0 < A::CU_DEVICE_ATTRIBUTE_MAX.0 => 0,
            _ => return None,
        };
        Some(v)
    }
}

/// Static shared memory a block may use without opting in (48 KiB).
pub const MAX_STATIC_SHARED: u32 = 48 * 1024;
/// Dynamic shared memory a kernel may opt into (227 KiB on Hopper).
pub const MAX_OPTIN_SHARED: u32 = 227 * 1024;
pub const MAX_BLOCKS_PER_SM: u32 = 32;

/// A stable, per-device UUID (RFC 4122 variant, version 4 layout), so that NVML and
/// CUDA agree and repeated runs see the same devices.
fn uuid_for(ordinal: i32, name: &str) -> [u8; 16] {
    // FNV-1a, twice with different seeds: stable across runs and Rust versions.
    let hash = |seed: u64| {
        let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
        for b in name.bytes().chain(ordinal.to_le_bytes()).chain(*b"gpupool-sim") {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&hash(1).to_be_bytes());
    u[8..].copy_from_slice(&hash(2).to_be_bytes());
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}
