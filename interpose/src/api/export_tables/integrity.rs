//! INTEGRITY_CHECK: the runtime asks the driver to prove it is the driver the runtime
//! talks to. Slot 1 answers `integrity_check(version, unix_seconds, &result)`; NVIDIA's
//! static runtime 13.0 calls it for versions 13000, 13001 and 13002 and, unless the
//! answers match what it computes itself, fails initialisation (cudaErrorNotSupported
//! would follow from a refused table).
//!
//! What the answer is (published by ZLUDA, which serves this table over its own driver,
//! and confirmed here: the runtime accepts it): a version ending in 0 or 1 has a fixed
//! answer; any other is HMAC-MD2 under a fixed 16-byte key of a 48-byte record (driver
//! version, the version asked, process id, thread id as `pthread_self` truncated to 32
//! bits, the addresses of the CUDART_INTERFACE table, of this table and of slot 1's
//! function, the seconds given) followed, per device, by its UUID and PCI domain, bus and
//! device numbers, every field as this process's driver API reports it.

use crate::util::{R, out};
use gpupool_shim::cuda::{CUdevice_attribute as A, CUresult};
use hmac::{Hmac, Mac};
use std::os::raw::c_void;

/// The answers for versions ending in 0 and 1.
const FIXED: [[u64; 2]; 2] =
    [[0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8], [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8]];

/// The HMAC key.
const KEY: [u8; 16] = [0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F];

/// Slot 1.
pub fn integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> R<()> {
    crate::api::export::require(result)?;
    if let Some(fixed) = FIXED.get((version % 10) as usize) {
        return out(result, *fixed);
    }
    let mut mac = Hmac::<md2::Md2>::new_from_slice(&KEY).map_err(|_| CUresult::CUDA_ERROR_UNKNOWN)?;
    let driver_version = crate::api::init::driver_version() as u32;
    // SAFETY: pthread_self has no preconditions.
    let thread = unsafe { libc::pthread_self() } as u32;
    let addr = |p: *const c_void| (p as usize as u64).to_le_bytes();
    let tables = &super::tables::TABLES;
    let table_of =
        |name: &str| tables.iter().find(|t| t.name == name).map_or(std::ptr::null(), |t| t.slots.as_ptr().cast());
    mac.update(&driver_version.to_le_bytes());
    mac.update(&version.to_le_bytes());
    mac.update(&std::process::id().to_le_bytes());
    mac.update(&thread.to_le_bytes());
    mac.update(&addr(table_of("CUDART_INTERFACE")));
    mac.update(&addr(table_of("INTEGRITY_CHECK")));
    mac.update(&addr(super::tables::INTEGRITY_CHECK::integrity_check as *const () as *const c_void));
    mac.update(&unix_seconds.to_le_bytes());
    let count = crate::api::device::count()?;
    for dev in 0..count {
        let uuid = crate::api::device::uuid(dev)?;
        mac.update(&uuid.bytes.map(|b| b as u8));
        for a in [
            A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        ] {
            mac.update(&crate::api::device::get_attribute(a, dev)?.to_le_bytes());
        }
    }
    let digest = mac.finalize().into_bytes();
    let word = |i: usize| u64::from_le_bytes(digest[i..i + 8].try_into().expect("an MD2 digest is 16 bytes"));
    out(result, [word(0), word(8)])
}
