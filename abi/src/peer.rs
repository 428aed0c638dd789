//! `cuDeviceGetP2PAttribute` as both of our CUDA libraries answer it. Neither offers peer
//! access (`cuDeviceCanAccessPeer` is 0 for every pair: the simulator does not simulate it, and
//! through the pool each device's memory lives in the daemon's contexts), so every attribute of
//! a link between two distinct devices is 0, whatever NVML reports of their wiring. The callers
//! check that both devices exist.

use gpupool_shim::cuda::{CUdevice, CUdevice_P2PAttribute, CUresult};
use std::os::raw::c_int;

/// The value, or the documented error and why: the same device twice is
/// CUDA_ERROR_INVALID_DEVICE, an attribute cuda.h does not define CUDA_ERROR_INVALID_VALUE.
pub fn p2p_attribute(attrib: CUdevice_P2PAttribute, src: CUdevice, dst: CUdevice) -> Result<c_int, (CUresult, String)> {
    if src == dst {
        return Err((CUresult::CUDA_ERROR_INVALID_DEVICE, format!("P2P attribute of device {src} with itself")));
    }
    match attrib.0 {
        1..=4 => Ok(0),
        other => Err((CUresult::CUDA_ERROR_INVALID_VALUE, format!("{other} is not a CUdevice_P2PAttribute"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attribute_is_zero_between_two_devices_and_bad_input_is_refused() {
        for a in 1..=4 {
            assert_eq!(p2p_attribute(CUdevice_P2PAttribute(a), 0, 1), Ok(0));
        }
        assert_eq!(p2p_attribute(CUdevice_P2PAttribute(2), 1, 1).unwrap_err().0, CUresult::CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(p2p_attribute(CUdevice_P2PAttribute(5), 0, 1).unwrap_err().0, CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(p2p_attribute(CUdevice_P2PAttribute(0), 0, 1).unwrap_err().0, CUresult::CUDA_ERROR_INVALID_VALUE);
    }
}
