//! CUDA arrays, mipmapped arrays, texture and surface objects: creation and the errors
//! `cuArray3DCreate` / `cuTexObjectCreate` document, device memory accounting, copies to
//! and from arrays, and kernels that sample textures (`tex`, `tld4`, `txq`) and read and
//! write surfaces (`suld.b`, `sust.b`) against CPU references. Linear filtering is checked
//! with the Programming Guide's weights ("Texture Fetching": 9-bit fixed point with 8
//! fractional bits), which differ from exact weights at the tested coordinates.

use gpupool_e2e::cu::{
    CU_TRSF_NORMALIZED_COORDINATES, CU_TRSF_READ_AS_INTEGER, CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_DESCRIPTOR,
    CUDA_ARRAY3D_SURFACE_LDST, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_RESOURCE_DESC, CUDA_TEXTURE_DESC, CUaddress_mode,
    CUarray, CUarray_format, CUfilter_mode, CUmemorytype, CUresourcetype, CUresult, CUstream_flags,
};
use gpupool_e2e::{Context, DeviceBuffer, Stream, call, check, cuda, expect, isolated_test, status};
use std::ffi::c_void;
use std::ptr::null_mut;

const KERNELS: &str = "\
.version 8.0
.target sm_90
.address_size 64
.visible .entry sample2d(.param .u64 t, .param .u64 out, .param .u64 xy)
{
\t.reg .b64 %rd<8>;
\t.reg .b32 %r<2>;
\t.reg .f32 %f<8>;
\tld.param.u64 %rd1, [t];
\tld.param.u64 %rd2, [out];
\tld.param.u64 %rd3, [xy];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd4, %r1, 8;
\tadd.s64 %rd5, %rd3, %rd4;
\tld.global.v2.f32 {%f1, %f2}, [%rd5];
\ttex.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}];
\tmul.wide.u32 %rd6, %r1, 16;
\tadd.s64 %rd7, %rd2, %rd6;
\tst.global.v4.f32 [%rd7], {%f3, %f4, %f5, %f6};
\tret;
}
.visible .entry gather(.param .u64 t, .param .u64 out, .param .u64 xy)
{
\t.reg .b64 %rd<8>;
\t.reg .b32 %r<2>;
\t.reg .f32 %f<8>;
\tld.param.u64 %rd1, [t];
\tld.param.u64 %rd2, [out];
\tld.param.u64 %rd3, [xy];
\tmov.u32 %r1, %tid.x;
\tmul.wide.u32 %rd4, %r1, 8;
\tadd.s64 %rd5, %rd3, %rd4;
\tld.global.v2.f32 {%f1, %f2}, [%rd5];
\ttld4.r.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}];
\tmul.wide.u32 %rd6, %r1, 16;
\tadd.s64 %rd7, %rd2, %rd6;
\tst.global.v4.f32 [%rd7], {%f3, %f4, %f5, %f6};
\tret;
}
.visible .entry fetch1d(.param .u64 t, .param .u64 out)
{
\t.reg .b64 %rd<4>;
\t.reg .b32 %r<8>;
\tld.param.u64 %rd1, [t];
\tld.param.u64 %rd2, [out];
\tmov.u32 %r1, %tid.x;
\ttex.1d.v4.u32.s32 {%r2, %r3, %r4, %r5}, [%rd1, {%r1}];
\ttxq.width.b32 %r6, [%rd1];
\tadd.u32 %r2, %r2, %r6;
\tmul.wide.u32 %rd3, %r1, 4;
\tadd.s64 %rd2, %rd2, %rd3;
\tst.global.u32 [%rd2], %r2;
\tret;
}
.visible .entry surf_add(.param .u64 s, .param .u32 bias)
{
\t.reg .b64 %rd<2>;
\t.reg .b32 %r<8>;
\tld.param.u64 %rd1, [s];
\tld.param.u32 %r5, [bias];
\tmov.u32 %r1, %tid.x;
\tmov.u32 %r2, %tid.y;
\tshl.b32 %r3, %r1, 2;
\tadd.s32 %r3, %r3, %r5;
\tsuld.b.2d.b32.zero {%r4}, [%rd1, {%r3, %r2}];
\tadd.u32 %r4, %r4, 1000;
\tsust.b.2d.b32.trap [%rd1, {%r3, %r2}], {%r4};
\tret;
}
\0";

fn function(m: gpupool_e2e::cu::CUmodule, name: &std::ffi::CStr) -> gpupool_e2e::cu::CUfunction {
    let mut f = null_mut();
    check(call!(cuda().cuModuleGetFunction(&mut f, m, name.as_ptr())));
    f
}

fn module() -> gpupool_e2e::cu::CUmodule {
    let mut m = null_mut();
    check(call!(cuda().cuModuleLoadData(&mut m, KERNELS.as_ptr().cast())));
    m
}

fn launch(f: gpupool_e2e::cu::CUfunction, block: [u32; 2], args: &mut [*mut c_void]) -> CUresult {
    call!(cuda().cuLaunchKernel(f, 1, 1, 1, block[0], block[1], 1, 0, null_mut(), args.as_mut_ptr(), null_mut()))
}

fn desc3d(w: usize, h: usize, d: usize, f: CUarray_format, ch: u32, flags: u32) -> CUDA_ARRAY3D_DESCRIPTOR {
    CUDA_ARRAY3D_DESCRIPTOR { Width: w, Height: h, Depth: d, Format: f, NumChannels: ch, Flags: flags }
}

fn array3d(d: &CUDA_ARRAY3D_DESCRIPTOR) -> CUarray {
    let mut a = null_mut();
    check(call!(cuda().cuArray3DCreate_v2(&mut a, d)));
    a
}

fn free_bytes() -> usize {
    let (mut free, mut total) = (0, 0);
    check(call!(cuda().cuMemGetInfo_v2(&mut free, &mut total)));
    free
}

fn array_resource(a: CUarray) -> CUDA_RESOURCE_DESC {
    let mut r = CUDA_RESOURCE_DESC { resType: CUresourcetype::CU_RESOURCE_TYPE_ARRAY, ..Default::default() };
    r.res.array.hArray = a;
    r
}

fn tex_desc(mode: CUaddress_mode, filter: CUfilter_mode, flags: u32) -> CUDA_TEXTURE_DESC {
    CUDA_TEXTURE_DESC { addressMode: [mode; 3], filterMode: filter, flags, ..Default::default() }
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// In a process of its own: it reads the device's free memory, which other tests change.
isolated_test!(
    fn arrays_are_charged_to_the_device_and_checked_like_cuda() {
        let _ctx = Context::new(0);
        let before = free_bytes();
        // 1024 x 512 float4: 8 MiB, a visible dent in the free memory.
        let a = array3d(&desc3d(1024, 512, 0, CUarray_format::CU_AD_FORMAT_FLOAT, 4, 0));
        assert!(before - free_bytes() >= 8 << 20, "an 8 MiB array is counted in the device's used memory");
        let mut got = CUDA_ARRAY3D_DESCRIPTOR::default();
        check(call!(cuda().cuArray3DGetDescriptor_v2(&mut got, a)));
        assert_eq!(got, desc3d(1024, 512, 0, CUarray_format::CU_AD_FORMAT_FLOAT, 4, 0));
        check(call!(cuda().cuArrayDestroy(a)));
        assert_eq!(free_bytes(), before, "cuArrayDestroy gives the memory back");
        expect(call!(cuda().cuArrayDestroy(a)), status::INVALID_HANDLE, "destroying a destroyed array");

        let mut h = null_mut();
        let bad = [
            desc3d(16, 16, 0, CUarray_format(0x55), 1, 0),
            desc3d(16, 16, 0, CUarray_format::CU_AD_FORMAT_FLOAT, 3, 0),
            desc3d(0, 16, 0, CUarray_format::CU_AD_FORMAT_FLOAT, 1, 0),
            desc3d(1 << 20, 0, 0, CUarray_format::CU_AD_FORMAT_FLOAT, 1, 0),
        ];
        for b in &bad {
            expect(call!(cuda().cuArray3DCreate_v2(&mut h, b)), status::INVALID_VALUE, &format!("{b:?}"));
        }
        expect(call!(cuda().cuArray3DCreate_v2(null_mut(), &bad[0])), status::INVALID_VALUE, "null handle pointer");
        let two_d = CUDA_ARRAY_DESCRIPTOR {
            Width: 8,
            Height: 4,
            Format: CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
            NumChannels: 1,
        };
        check(call!(cuda().cuArrayCreate_v2(&mut h, &two_d)));
        check(call!(cuda().cuArrayDestroy(h)));

        // A mipmapped array: each level half the one before, destroyed with the whole.
        let mut m = null_mut();
        let base = desc3d(64, 16, 0, CUarray_format::CU_AD_FORMAT_UNSIGNED_INT16, 2, 0);
        expect(
            call!(cuda().cuMipmappedArrayCreate(&mut m, &base, 8)),
            status::INVALID_VALUE,
            "8 levels of a 64-wide array",
        );
        check(call!(cuda().cuMipmappedArrayCreate(&mut m, &base, 7)));
        let mut extents = Vec::new();
        for l in 0..7 {
            let mut lv = null_mut();
            check(call!(cuda().cuMipmappedArrayGetLevel(&mut lv, m, l)));
            check(call!(cuda().cuArray3DGetDescriptor_v2(&mut got, lv)));
            extents.push((got.Width, got.Height));
            if l == 0 {
                expect(call!(cuda().cuArrayDestroy(lv)), status::INVALID_VALUE, "cuArrayDestroy of a mipmap level");
            }
        }
        assert_eq!(extents, [(64, 16), (32, 8), (16, 4), (8, 2), (4, 1), (2, 1), (1, 1)]);
        let mut lv = null_mut();
        expect(call!(cuda().cuMipmappedArrayGetLevel(&mut lv, m, 7)), status::INVALID_VALUE, "level past the last");
        check(call!(cuda().cuMipmappedArrayDestroy(m)));
        assert_eq!(free_bytes(), before, "cuMipmappedArrayDestroy frees every level");
    }
);

#[test]
fn copies_reach_boxes_of_arrays_in_every_direction() {
    let d = cuda();
    let _ctx = Context::new(0);
    let (w, h, z) = (12usize, 5usize, 3usize); // in 4-byte elements
    let a = array3d(&desc3d(w, h, z, CUarray_format::CU_AD_FORMAT_SIGNED_INT32, 1, 0));
    let src: Vec<u8> = (0..w * h * z * 4).map(|i| (i * 13 + 1) as u8).collect();
    let dev = DeviceBuffer::new(src.len());
    dev.write(&src);
    // Device to array, the whole volume, asynchronously on a stream.
    let s = Stream::new(CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    let to_array = CUDA_MEMCPY3D {
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcDevice: dev.ptr,
        srcPitch: w * 4,
        srcHeight: h,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_ARRAY,
        dstArray: a,
        WidthInBytes: w * 4,
        Height: h,
        Depth: z,
        ..Default::default()
    };
    check(call!(d.cuMemcpy3DAsync_v2(&to_array, s.raw)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    // A 2D box (x 2..7 elements, rows 1..4) of slice 0 back to the host, pitched.
    let (bx, by, bw, bh, pitch) = (2usize, 1usize, 5usize, 3usize, 64usize);
    let mut host = vec![0u8; pitch * bh];
    let out = CUDA_MEMCPY2D {
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_ARRAY,
        srcArray: a,
        srcXInBytes: bx * 4,
        srcY: by,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_HOST,
        dstHost: host.as_mut_ptr().cast(),
        dstPitch: pitch,
        WidthInBytes: bw * 4,
        Height: bh,
        ..Default::default()
    };
    check(call!(d.cuMemcpy2D_v2(&out)));
    for r in 0..bh {
        let want = &src[((by + r) * w + bx) * 4..((by + r) * w + bx + bw) * 4];
        assert_eq!(&host[r * pitch..r * pitch + bw * 4], want, "row {r} of the box");
    }
    // Slice 2 from the array into device memory and back.
    let back = DeviceBuffer::new(w * h * 4);
    let slice = CUDA_MEMCPY3D {
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_ARRAY,
        srcArray: a,
        srcZ: 2,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstDevice: back.ptr,
        dstPitch: w * 4,
        dstHeight: h,
        WidthInBytes: w * 4,
        Height: h,
        Depth: 1,
        ..Default::default()
    };
    check(call!(d.cuMemcpy3D_v2(&slice)));
    assert_eq!(back.read(), &src[2 * w * h * 4..], "slice 2 through cuMemcpy3D");
    // A box past the array's end is refused, whichever side the array is on.
    let past = CUDA_MEMCPY3D { srcZ: 3, ..slice };
    expect(call!(d.cuMemcpy3D_v2(&past)), status::INVALID_VALUE, "a slice past the last");
    let wide = CUDA_MEMCPY2D { srcXInBytes: 8 * 4, ..out };
    expect(call!(d.cuMemcpy2D_v2(&wide)), status::INVALID_VALUE, "a box past the row's end");
    let bogus = CUDA_MEMCPY2D { srcArray: 0x1234 as CUarray, ..out };
    expect(call!(d.cuMemcpy2D_v2(&bogus)), status::INVALID_HANDLE, "a forged array handle");
    check(call!(cuda().cuArrayDestroy(a)));

    // cuMemcpyHtoA / AtoH on a 1D array, at a byte offset.
    let one = array3d(&desc3d(64, 0, 0, CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8, 1, 0));
    let data: Vec<u8> = (0..40).collect();
    check(call!(cuda().cuMemcpyHtoA_v2(one, 10, data.as_ptr().cast(), 40)));
    let mut got = vec![0u8; 64];
    check(call!(cuda().cuMemcpyAtoH_v2(got.as_mut_ptr().cast(), one, 0, 64)));
    assert_eq!(&got[10..50], &data[..]);
    assert!(got[..10].iter().chain(&got[50..]).all(|&b| b == 0), "bytes outside the copy stay 0");
    expect(call!(cuda().cuMemcpyHtoA_v2(one, 30, data.as_ptr().cast(), 40)), status::INVALID_VALUE, "past the end");
    check(call!(cuda().cuArrayDestroy(one)));
}

/// What `tex.2d` with linear filtering returns at (x, y) in texel space (unnormalized,
/// clamped), for one channel of a `w` x `h` float image: the guide's formula with the
/// weights rounded to 1/256.
fn bilinear(img: &[f32], w: usize, h: usize, x: f32, y: f32) -> f32 {
    let (xb, yb) = (x - 0.5, y - 0.5);
    let (i, j) = (xb.floor(), yb.floor());
    let q = |f: f32| (f * 256.0).round() / 256.0;
    let (a, b) = (q(xb - i), q(yb - j));
    let at = |ii: f32, jj: f32| {
        let xi = (ii as i64).clamp(0, w as i64 - 1) as usize;
        let yj = (jj as i64).clamp(0, h as i64 - 1) as usize;
        img[yj * w + xi]
    };
    (1.0 - a) * (1.0 - b) * at(i, j)
        + a * (1.0 - b) * at(i + 1.0, j)
        + (1.0 - a) * b * at(i, j + 1.0)
        + a * b * at(i + 1.0, j + 1.0)
}

#[test]
fn kernels_sample_textures_with_the_documented_filtering_and_addressing() {
    let d = cuda();
    let _ctx = Context::new(0);
    let m = module();
    let (w, h) = (8usize, 6usize);
    let img: Vec<f32> = (0..w * h).map(|i| ((i * 37) % 101) as f32 * 3.5).collect();
    let a = array3d(&desc3d(w, h, 0, CUarray_format::CU_AD_FORMAT_FLOAT, 1, 0));
    let up = CUDA_MEMCPY2D {
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_HOST,
        srcHost: img.as_ptr().cast(),
        srcPitch: w * 4,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_ARRAY,
        dstArray: a,
        WidthInBytes: w * 4,
        Height: h,
        ..Default::default()
    };
    check(call!(d.cuMemcpy2D_v2(&up)));
    let xy: Vec<f32> = vec![0.8, 0.5, 3.3, 2.7, 7.9, 5.6, -2.0, 1.1, 4.5, 9.0, 1.13, 4.71, 6.02, 0.26, 2.5, 3.5];
    let n = xy.len() / 2;
    let coords = DeviceBuffer::new(xy.len() * 4);
    coords.write(&bytes(&xy));
    let out = DeviceBuffer::new(n * 16);
    let run = |f, tex: u64| {
        let (mut t, mut o, mut c) = (tex, out.ptr, coords.ptr);
        let mut args: [*mut c_void; 3] = [(&raw mut t).cast(), (&raw mut o).cast(), (&raw mut c).cast()];
        check(launch(f, [n as u32, 1], &mut args));
        check(call!(d.cuCtxSynchronize()));
        floats(&out.read())
    };

    let res = array_resource(a);
    let mut tex = 0u64;
    let linear = tex_desc(CUaddress_mode::CU_TR_ADDRESS_MODE_CLAMP, CUfilter_mode::CU_TR_FILTER_MODE_LINEAR, 0);
    check(call!(cuda().cuTexObjectCreate(&mut tex, &res, &linear, std::ptr::null())));
    let got = run(function(m, c"sample2d"), tex);
    for k in 0..n {
        let want = bilinear(&img, w, h, xy[2 * k], xy[2 * k + 1]);
        assert_eq!(got[4 * k], want, "linear sample at ({}, {})", xy[2 * k], xy[2 * k + 1]);
        assert_eq!(&got[4 * k + 1..4 * k + 4], &[0.0, 0.0, 1.0], "missing channels read (0, 0, 1)");
    }
    // At x = 0.8 the exact weight 0.3 differs from the hardware's 77/256.
    let exact = 0.7 * img[0] + 0.3 * img[1];
    assert_ne!(got[0], exact, "the weights are quantized, not exact");
    let mut back = CUDA_RESOURCE_DESC::default();
    check(call!(cuda().cuTexObjectGetResourceDesc(&mut back, tex)));
    // SAFETY: resType is ARRAY, so `res.array` is the member filled in.
    assert_eq!(unsafe { back.res.array.hArray }, a);
    check(call!(cuda().cuTexObjectDestroy(tex)));

    // Point sampling with normalized coordinates: wrap and mirror repeat the image.
    for (mode, fold) in [
        (CUaddress_mode::CU_TR_ADDRESS_MODE_WRAP, (|i: i64, n: i64| i.rem_euclid(n)) as fn(i64, i64) -> i64),
        (CUaddress_mode::CU_TR_ADDRESS_MODE_MIRROR, |i: i64, n: i64| {
            let m = i.rem_euclid(2 * n);
            if m >= n { 2 * n - 1 - m } else { m }
        }),
    ] {
        let desc = tex_desc(mode, CUfilter_mode::CU_TR_FILTER_MODE_POINT, CU_TRSF_NORMALIZED_COORDINATES);
        check(call!(cuda().cuTexObjectCreate(&mut tex, &res, &desc, std::ptr::null())));
        let norm: Vec<f32> = xy.chunks(2).flat_map(|c| [c[0] / w as f32, c[1] / h as f32]).collect();
        coords.write(&bytes(&norm));
        let got = run(function(m, c"sample2d"), tex);
        for k in 0..n {
            let xi = fold((norm[2 * k] * w as f32).floor() as i64, w as i64) as usize;
            let yj = fold((norm[2 * k + 1] * h as f32).floor() as i64, h as i64) as usize;
            assert_eq!(got[4 * k], img[yj * w + xi], "{mode:?} point sample {k}");
        }
        check(call!(cuda().cuTexObjectDestroy(tex)));
        coords.write(&bytes(&xy));
    }

    // Border: outside the image reads the border color.
    let mut desc = tex_desc(CUaddress_mode::CU_TR_ADDRESS_MODE_BORDER, CUfilter_mode::CU_TR_FILTER_MODE_POINT, 0);
    desc.borderColor = [-1.0, -2.0, -3.0, -4.0];
    check(call!(cuda().cuTexObjectCreate(&mut tex, &res, &desc, std::ptr::null())));
    let got = run(function(m, c"sample2d"), tex);
    assert_eq!(&got[12..16], &[-1.0, -2.0, -3.0, -4.0], "x = -2 is outside");
    assert_eq!(&got[16..20], &[-1.0, -2.0, -3.0, -4.0], "y = 9 is outside");
    assert_eq!(got[4], img[2 * w + 3], "(3.3, 2.7) is texel (3, 2)");
    check(call!(cuda().cuTexObjectDestroy(tex)));

    // tld4: the red channel of the four texels of the bilinear footprint.
    check(call!(cuda().cuTexObjectCreate(&mut tex, &res, &linear, std::ptr::null())));
    let got = run(function(m, c"gather"), tex);
    let (i, j) = (2usize, 2usize); // (3.3, 2.7) - 0.5 floors to (2, 2)
    assert_eq!(&got[4..8], &[img[(j + 1) * w + i], img[(j + 1) * w + i + 1], img[j * w + i + 1], img[j * w + i]]);
    check(call!(cuda().cuTexObjectDestroy(tex)));

    // Bad descriptors.
    let bogus = tex_desc(CUaddress_mode(9), CUfilter_mode::CU_TR_FILTER_MODE_POINT, 0);
    expect(call!(cuda().cuTexObjectCreate(&mut tex, &res, &bogus, std::ptr::null())), status::INVALID_VALUE, "mode 9");
    expect(
        call!(cuda().cuTexObjectCreate(&mut tex, std::ptr::null(), &linear, std::ptr::null())),
        status::INVALID_VALUE,
        "null resource",
    );
    expect(call!(cuda().cuTexObjectDestroy(0x77)), status::INVALID_VALUE, "destroying a forged texture object");
    check(call!(cuda().cuArrayDestroy(a)));
    check(call!(d.cuModuleUnload(m)));
}

#[test]
fn linear_memory_textures_fetch_by_index_and_read_zero_outside() {
    let d = cuda();
    let _ctx = Context::new(0);
    let m = module();
    let n = 48usize;
    let buf = DeviceBuffer::new(64 * 2);
    let data: Vec<u8> = (0..64u16).flat_map(|v| (v * 300).to_le_bytes()).collect();
    buf.write(&data);
    let mut r = CUDA_RESOURCE_DESC { resType: CUresourcetype::CU_RESOURCE_TYPE_LINEAR, ..Default::default() };
    r.res.linear.devPtr = buf.ptr;
    r.res.linear.format = CUarray_format::CU_AD_FORMAT_UNSIGNED_INT16;
    r.res.linear.numChannels = 1;
    r.res.linear.sizeInBytes = 40 * 2; // 40 texels of the 64
    let desc = tex_desc(
        CUaddress_mode::CU_TR_ADDRESS_MODE_CLAMP,
        CUfilter_mode::CU_TR_FILTER_MODE_POINT,
        CU_TRSF_READ_AS_INTEGER,
    );
    let mut tex = 0u64;
    check(call!(cuda().cuTexObjectCreate(&mut tex, &r, &desc, std::ptr::null())));
    let out = DeviceBuffer::new(n * 4);
    let (mut t, mut o) = (tex, out.ptr);
    let mut args: [*mut c_void; 2] = [(&raw mut t).cast(), (&raw mut o).cast()];
    check(launch(function(m, c"fetch1d"), [n as u32, 1], &mut args));
    check(call!(d.cuCtxSynchronize()));
    let got: Vec<u32> = out.read().chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    for (i, g) in got.iter().enumerate() {
        let texel = if i < 40 { i as u32 * 300 } else { 0 };
        assert_eq!(*g, texel + 40, "texel {i} plus txq.width (40)");
    }
    check(call!(cuda().cuTexObjectDestroy(tex)));
    // The base must be aligned to CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT (512).
    r.res.linear.devPtr = buf.ptr + 2;
    expect(
        call!(cuda().cuTexObjectCreate(&mut tex, &r, &desc, std::ptr::null())),
        status::INVALID_VALUE,
        "misaligned base",
    );
    check(call!(d.cuModuleUnload(m)));
}

#[test]
fn surfaces_load_and_store_bytes_and_trap_out_of_range() {
    let d = cuda();
    let _ctx = Context::new(0);
    let m = module();
    let (w, h) = (16usize, 4usize);
    let plain = array3d(&desc3d(w, h, 0, CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32, 1, 0));
    let mut s = 0u64;
    expect(
        call!(cuda().cuSurfObjectCreate(&mut s, &array_resource(plain))),
        status::INVALID_VALUE,
        "no SURFACE_LDST flag",
    );
    let a = array3d(&desc3d(w, h, 0, CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32, 1, CUDA_ARRAY3D_SURFACE_LDST));
    let init: Vec<u32> = (0..(w * h) as u32).collect();
    let init_bytes: Vec<u8> = init.iter().flat_map(|v| v.to_le_bytes()).collect();
    check(call!(cuda().cuMemcpyHtoA_v2(a, 0, init_bytes.as_ptr().cast(), init_bytes.len())));
    check(call!(cuda().cuSurfObjectCreate(&mut s, &array_resource(a))));
    let f = function(m, c"surf_add");
    let run = |bias: u32, block: [u32; 2]| {
        let (mut sv, mut b) = (s, bias);
        let mut args: [*mut c_void; 2] = [(&raw mut sv).cast(), (&raw mut b).cast()];
        check(launch(f, block, &mut args));
        call!(d.cuCtxSynchronize())
    };
    check(run(0, [w as u32, h as u32]));
    let mut got = vec![0u8; init_bytes.len()];
    check(call!(cuda().cuMemcpyAtoH_v2(got.as_mut_ptr().cast(), a, 0, got.len())));
    let want: Vec<u8> = init.iter().flat_map(|v| (v + 1000).to_le_bytes()).collect();
    assert_eq!(got, want, "every element read, plus 1000, written back");
    // x one row-width to the right: suld.zero reads 0 and sust.trap faults.
    expect(run(w as u32 * 4, [1, 1]), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, "sust.trap past the row");
    // The fault poisoned the context; dropping `_ctx` destroys it with the module, array
    // and surface object.
    let _ = (m, plain);
}
