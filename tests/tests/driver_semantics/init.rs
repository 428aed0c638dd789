//! Initialisation: what works before `cuInit`, what does not, and `cuInit`'s own checks.

use std::ptr::null_mut;

use gpupool_e2e::{call, driver, expect, isolated_test, status};

isolated_test!(
    fn calls_before_cuinit_return_not_initialized() {
        let d = driver();
        let mut n = -1;
        expect(call!(d.cuDeviceGetCount(&mut n)), status::NOT_INITIALIZED, "cuDeviceGetCount before cuInit");
        let mut dev = -1;
        expect(call!(d.cuDeviceGet(&mut dev, 0)), status::NOT_INITIALIZED, "cuDeviceGet before cuInit");
        let mut ctx = null_mut();
        expect(call!(d.cuCtxGetCurrent(&mut ctx)), status::NOT_INITIALIZED, "cuCtxGetCurrent before cuInit");
        expect(call!(d.cuCtxCreate_v2(&mut ctx, 0, 0)), status::NOT_INITIALIZED, "cuCtxCreate_v2 before cuInit");
        let mut p = 0;
        expect(call!(d.cuMemAlloc_v2(&mut p, 1024)), status::NOT_INITIALIZED, "cuMemAlloc_v2 before cuInit");
        let (mut free, mut total) = (0, 0);
        expect(
            call!(d.cuMemGetInfo_v2(&mut free, &mut total)),
            status::NOT_INITIALIZED,
            "cuMemGetInfo_v2 before cuInit",
        );
        let mut s = null_mut();
        expect(call!(d.cuStreamCreate(&mut s, 0)), status::NOT_INITIALIZED, "cuStreamCreate before cuInit");

        // cuDriverGetVersion is documented to work without initialisation.
        let mut v = 0;
        expect(call!(d.cuDriverGetVersion(&mut v)), status::SUCCESS, "cuDriverGetVersion before cuInit");
        assert_eq!(v, 13000, "GPUPOOL_SIM_DRIVER_VERSION defaults to 13.0");

        // "Currently, the Flags parameter must be 0."
        expect(call!(d.cuInit(1)), status::INVALID_VALUE, "cuInit(1)");
        expect(call!(d.cuInit(0)), status::SUCCESS, "cuInit(0)");
        expect(call!(d.cuInit(0)), status::SUCCESS, "cuInit(0) a second time");
        expect(call!(d.cuDeviceGetCount(&mut n)), status::SUCCESS, "cuDeviceGetCount after cuInit");
        assert_eq!(n, 2, "GPUPOOL_SIM_DEVICES defaults to 2");
    }
);

isolated_test!(fn configured_device_count_and_driver_version()
    env("GPUPOOL_SIM_DEVICES" => "3", "GPUPOOL_SIM_DRIVER_VERSION" => "12.4")
{
    let d = driver();
    let mut v = 0;
    expect(call!(d.cuDriverGetVersion(&mut v)), status::SUCCESS, "cuDriverGetVersion");
    assert_eq!(v, 12040);
    expect(call!(d.cuDriverGetVersion(null_mut())), status::INVALID_VALUE, "cuDriverGetVersion(NULL)");
    expect(call!(d.cuInit(0)), status::SUCCESS, "cuInit");
    let mut n = 0;
    expect(call!(d.cuDeviceGetCount(&mut n)), status::SUCCESS, "cuDeviceGetCount");
    assert_eq!(n, 3);
    let mut dev = -1;
    expect(call!(d.cuDeviceGet(&mut dev, 2)), status::SUCCESS, "cuDeviceGet(2) of 3");
    assert_eq!(dev, 2);
    expect(call!(d.cuDeviceGet(&mut dev, 3)), status::INVALID_DEVICE, "cuDeviceGet(3) of 3");
});
