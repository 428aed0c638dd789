//! `cuMemPoolSetAccess` / `cuMemPoolGetAccess` for pools of one device, shared by the simulator
//! and the interposer so both answer the same: a pool's memory is always read-write for the
//! device it is on, and this layer offers no peer access to pool memory. Setting read-write for
//! the pool's own device is accepted (it is what the pool has); any other flags for it, a
//! location that is not a device, or access for another device is CUDA_ERROR_INVALID_VALUE, the
//! error NVIDIA documents for the call (and a log line with the reason). Another valid device's
//! access reads back as `CU_MEM_ACCESS_FLAGS_PROT_NONE`.

use crate::absent::Refusal;
use gpupool_shim::cuda::{CUmemAccess_flags, CUmemAccessDesc, CUmemLocation, CUmemLocationType, CUresult};

const INVALID: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;

/// Checks `descs` for a pool on device `pool_device` of `devices` devices.
pub fn set(pool_device: i32, devices: i32, descs: &[CUmemAccessDesc]) -> Result<(), Refusal> {
    if descs.is_empty() {
        return Err((INVALID, "cuMemPoolSetAccess: no access descriptor"));
    }
    for d in descs {
        if d.location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE || !(0..devices).contains(&d.location.id)
        {
            return Err((INVALID, "cuMemPoolSetAccess: a descriptor's location is not a device"));
        }
        if d.location.id != pool_device {
            return Err((
                INVALID,
                "cuMemPoolSetAccess: peer access to pool memory is not offered (single-device pools)",
            ));
        }
        if d.flags != CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
            return Err((INVALID, "cuMemPoolSetAccess: the pool's own device keeps read-write access"));
        }
    }
    Ok(())
}

/// The access `location` has to a pool on device `pool_device`.
pub fn get(pool_device: i32, devices: i32, location: &CUmemLocation) -> Result<CUmemAccess_flags, Refusal> {
    if location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE || !(0..devices).contains(&location.id) {
        return Err((INVALID, "cuMemPoolGetAccess: the location is not a device"));
    }
    Ok(if location.id == pool_device {
        CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    } else {
        CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE
    })
}
