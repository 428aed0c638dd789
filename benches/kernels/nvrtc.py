"""Compiles a .cu file to PTX for compute_90 with NVRTC 12.9 (wheel nvidia-cuda-nvrtc-cu12) and
prints it: how vector_add.ptx was made (CPU only, no GPU needed).

    python3 benches/kernels/nvrtc.py benches/kernels/vector_add.cu > benches/kernels/vector_add.ptx

NVRTC_LIBDIR names the wheel's lib directory if `import nvidia` does not find it.
"""
import ctypes, glob, os, sys


def libdir():
    if os.environ.get("NVRTC_LIBDIR"):
        return os.environ["NVRTC_LIBDIR"]
    import nvidia  # namespace package shared by NVIDIA's wheels

    for base in nvidia.__path__:
        d = os.path.join(base, "cuda_nvrtc", "lib")
        if os.path.exists(os.path.join(d, "libnvrtc.so.12")):
            return d
    sys.exit("libnvrtc.so.12 not found; pip install nvidia-cuda-nvrtc-cu12==12.9.*")


def main(path):
    d = libdir()
    # libnvrtc dlopens its builtins by soname; load them from the same wheel first.
    for b in sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so.12.*"))):
        ctypes.CDLL(b, mode=os.RTLD_GLOBAL)
    lib = ctypes.CDLL(os.path.join(d, "libnvrtc.so.12"))

    def ok(rc, what):
        if rc != 0:
            sys.exit(f"{what} failed: {rc}")

    major, minor = ctypes.c_int(), ctypes.c_int()
    ok(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    sys.stderr.write(f"NVRTC {major.value}.{minor.value}\n")
    prog = ctypes.c_void_p()
    src = open(path, "rb").read()
    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(path).encode(), 0, None, None), "nvrtcCreateProgram")
    opts = [b"--gpu-architecture=compute_90"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    n = ctypes.c_size_t()
    ok(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)), "nvrtcGetProgramLogSize")
    log = ctypes.create_string_buffer(n.value)
    ok(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
    sys.stderr.write(log.value.decode(errors="replace"))
    ok(rc, "nvrtcCompileProgram")
    ok(lib.nvrtcGetPTXSize(prog, ctypes.byref(n)), "nvrtcGetPTXSize")
    ptx = ctypes.create_string_buffer(n.value)
    ok(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    sys.stdout.write(ptx.value.decode())


if __name__ == "__main__":
    main(sys.argv[1])
