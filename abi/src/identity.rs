//! How a device presents itself, derived the same way by every library that reports it:
//! NVML's UUID text, the kernel-driver branch that ships a CUDA version, and the legacy
//! `CUdevprop` built from device attributes.

use gpupool_shim::cuda::{CUdevice_attribute as A, CUdevprop};

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as NVML and nvidia-smi print a UUID.
pub fn uuid_string(bytes: &[u8; 16]) -> String {
    let h = |r: std::ops::Range<usize>| bytes[r].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("GPU-{}-{}-{}-{}-{}", h(0..4), h(4..6), h(6..8), h(8..10), h(10..16))
}

/// The kernel-driver branch (`nvmlSystemGetDriverVersion`) that ships a CUDA driver API
/// version (1000 * major + 10 * minor).
pub fn driver_branch(cuda: i32) -> &'static str {
    match cuda {
        v if v >= 13000 => "580.95.05",
        v if v >= 12090 => "575.57.08",
        v if v >= 12080 => "570.133.20",
        v if v >= 12060 => "560.35.03",
        v if v >= 12040 => "550.54.15",
        _ => "535.183.01",
    }
}

/// `cuDeviceGetProperties`'s struct, from the device's attribute values.
pub fn devprop(a: impl Fn(A) -> i32) -> CUdevprop {
    CUdevprop {
        maxThreadsPerBlock: a(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        maxThreadsDim: [
            a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
            a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
            a(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
        ],
        maxGridSize: [
            a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
            a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
            a(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
        ],
        sharedMemPerBlock: a(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
        totalConstantMemory: a(A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
        SIMDWidth: a(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE),
        memPitch: a(A::CU_DEVICE_ATTRIBUTE_MAX_PITCH),
        regsPerBlock: a(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
        clockRate: a(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
        textureAlign: a(A::CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_text_is_nvmls() {
        let b: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(super::uuid_string(&b), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    }
}
