//! Devices: ordinals, out-of-range devices, null output pointers.

use std::ptr::null_mut;

use gpupool_e2e::{call, check, cuda, device_count, expect, status};

#[test]
fn device_ordinals_and_out_of_range() {
    let d = cuda();
    let n = device_count();
    assert!(n >= 1);
    for i in 0..n {
        let mut dev = -1;
        check(call!(d.cuDeviceGet(&mut dev, i)));
        let mut name = [0 as std::ffi::c_char; 256];
        check(call!(d.cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev,)));
        assert_ne!(name[0], 0, "device {i} has an empty name");
        let mut bytes = 0usize;
        check(call!(d.cuDeviceTotalMem_v2(&mut bytes, dev)));
        assert!(bytes > 0);
    }
    let mut dev = -1;
    expect(call!(d.cuDeviceGet(&mut dev, n)), status::INVALID_DEVICE, "cuDeviceGet(count)");
    expect(call!(d.cuDeviceGet(&mut dev, -1)), status::INVALID_DEVICE, "cuDeviceGet(-1)");
    expect(call!(d.cuDeviceGet(null_mut(), 0)), status::INVALID_VALUE, "cuDeviceGet(NULL, 0)");
    expect(call!(d.cuDeviceGetCount(null_mut())), status::INVALID_VALUE, "cuDeviceGetCount(NULL)");

    let mut bytes = 0usize;
    expect(call!(d.cuDeviceTotalMem_v2(&mut bytes, n)), status::INVALID_DEVICE, "cuDeviceTotalMem_v2(count)");
    expect(call!(d.cuDeviceTotalMem_v2(&mut bytes, 1 << 20)), status::INVALID_DEVICE, "cuDeviceTotalMem_v2(2^20)");
    let mut name = [0 as std::ffi::c_char; 64];
    expect(call!(d.cuDeviceGetName(name.as_mut_ptr(), 64, n)), status::INVALID_DEVICE, "cuDeviceGetName(count)");
    let mut ctx = null_mut();
    expect(call!(d.cuCtxCreate_v2(&mut ctx, 0, n)), status::INVALID_DEVICE, "cuCtxCreate_v2(count)");
    assert!(ctx.is_null(), "no context may be returned for an invalid device");
    expect(call!(d.cuDevicePrimaryCtxRetain(&mut ctx, -5)), status::INVALID_DEVICE, "cuDevicePrimaryCtxRetain(-5)");
}

#[test]
fn primary_context_is_shared_and_refcounted() {
    let d = cuda();
    let (mut a, mut b) = (null_mut(), null_mut());
    check(call!(d.cuDevicePrimaryCtxRetain(&mut a, 0)));
    check(call!(d.cuDevicePrimaryCtxRetain(&mut b, 0)));
    assert!(!a.is_null());
    assert_eq!(a, b, "the primary context of a device is one context");
    if device_count() > 1 {
        let mut c = null_mut();
        check(call!(d.cuDevicePrimaryCtxRetain(&mut c, 1)));
        assert_ne!(a, c, "devices have distinct primary contexts");
        check(call!(d.cuDevicePrimaryCtxRelease_v2(1)));
    }
    check(call!(d.cuDevicePrimaryCtxRelease_v2(0)));
    check(call!(d.cuDevicePrimaryCtxRelease_v2(0)));
}
