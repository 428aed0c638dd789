/*
 * tests/c/compute_load.c - timed GPU load through the CUDA driver API, for testing a
 * compute-quota scheduler from outside. Needs no CUDA headers: the few types and
 * prototypes it uses are declared below; libcuda.so.1 is dlopen()ed and the exact
 * exported (versioned) names are resolved with dlsym, as tests/c/driver_api.c does.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -o compute_load tests/c/compute_load.c -ldl -lpthread
 *   LD_LIBRARY_PATH=$(scripts/sim-libdir --release) ./compute_load --duration 2
 *
 * The kernel (PTX below, one block of one thread) spins on %globaltimer for --kernel-us
 * and adds the time its body took to a device counter (busy_ns).
 *
 * Options: --kernel-us N [1000]  --duration S [5]  --path launch|ptsz|ex|coop|graph [launch]
 *          --sync  --batch N [8]  --device N [0]  --report-ms N [100]
 *
 * --path graph captures a batch of N kernel launches (cuLaunchKernel on the stream) into a CUDA
 * graph once, and then launches the graph (cuGraphLaunch) wherever the other paths launch a batch
 * (or, with --sync, one kernel).
 *
 * Pipelined mode (default): launch a batch of N kernels, record an event, then wait for
 * the previous batch's event; at most two batches are outstanding, so the stream never
 * drains. --sync: launch one kernel, cuStreamSynchronize, repeat (per-kernel latency).
 * The launch/ex/coop paths use a CU_STREAM_NON_BLOCKING stream, so the synchronous
 * counter read (cuMemcpyDtoH_v2, legacy stream) does not wait for the kernels in
 * flight. The ptsz path launches on the per-thread default stream (NULL handle with
 * cuLaunchKernel_ptsz, CU_STREAM_PER_THREAD for record/synchronize); that stream is
 * blocking, so each counter read waits for the kernels already queued on it.
 *
 * Output (stdout, line buffered):
 *   sample <t_ns since start> <kernels completed> <busy_ns>     every --report-ms and at the end
 *   latency_us p50 <x> p99 <y> max <z> n <count>                --sync only
 *   done kernels <n> busy_ns <b> wall_ns <w> share <busy/wall %>
 * Any CUDA error: "error <call> <code> <name>" on stderr, exit status 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* The slice of the driver API used here.                                    */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    struct CUlaunchAttribute_st *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
#define CUDA_SUCCESS 0
#define CU_STREAM_NON_BLOCKING 1u
#define CU_EVENT_DISABLE_TIMING 2u
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

CUresult cuInit(unsigned int flags);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, CUstream hStream,
                        void **kernelParams, void **extra);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                             unsigned int by, unsigned int bz, unsigned int shared, CUstream hStream,
                             void **kernelParams, void **extra);
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                                   CUstream hStream, void **kernelParams);
CUresult cuStreamBeginCapture_v2(CUstream hStream, int mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);

/* Always needed; the launch entry point of the chosen --path is resolved separately. */
#define CU_FUNCTIONS(X)                                                                             \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)      \
    X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc_v2)               \
    X(cuMemcpyDtoH_v2) X(cuMemsetD8_v2) X(cuStreamCreate) X(cuStreamSynchronize) X(cuEventCreate) \
    X(cuEventRecord) X(cuEventSynchronize)
#define LAUNCH_FUNCTIONS(X) X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchCooperativeKernel)
#define GRAPH_FUNCTIONS(X) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)

#define DECLARE_PTR(name) static __typeof__(name) *p_##name;
CU_FUNCTIONS(DECLARE_PTR)
LAUNCH_FUNCTIONS(DECLARE_PTR)
GRAPH_FUNCTIONS(DECLARE_PTR)

/* Calls an entry point through its pointer; any error ends the program. */
#define CU(name, ...) check(#name, p_##name(__VA_ARGS__))

static void check(const char *call, CUresult rc) {
    if (rc == CUDA_SUCCESS) return;
    const char *name = NULL;
    if (!p_cuGetErrorName || p_cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) name = "?";
    fflush(stdout);
    fprintf(stderr, "error %s %d %s\n", call, (int)rc, name);
    exit(1);
}

static void *resolve(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "error dlsym(%s) -1 SYMBOL_MISSING\n", name);
        exit(1);
    }
    return p;
}

/* ------------------------------------------------------------------------- */
/* The kernel: spin(ns, total) busy-waits ns nanoseconds on %globaltimer, then adds
 * the body's measured length to *total. */
static const char k_ptx[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry spin(\n"
    "    .param .u64 ns,\n"
    "    .param .u64 total\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b64 %rd<9>;\n"
    "    ld.param.u64 %rd1, [ns];\n"
    "    ld.param.u64 %rd2, [total];\n"
    "    cvta.to.global.u64 %rd2, %rd2;\n"
    "    mov.u64 %rd3, %globaltimer;\n"
    "    add.u64 %rd4, %rd3, %rd1;\n"
    "$L_spin:\n"
    "    mov.u64 %rd5, %globaltimer;\n"
    "    setp.lt.u64 %p1, %rd5, %rd4;\n"
    "    @%p1 bra $L_spin;\n"
    "    mov.u64 %rd6, %globaltimer;\n"
    "    sub.u64 %rd7, %rd6, %rd3;\n"
    "    atom.global.add.u64 %rd8, [%rd2], %rd7;\n"
    "    ret;\n"
    "}\n";

/* ------------------------------------------------------------------------- */

enum path { PATH_LAUNCH, PATH_PTSZ, PATH_EX, PATH_COOP, PATH_GRAPH };

static enum path g_path = PATH_LAUNCH;
static CUfunction g_fn;
static CUstream g_stream;      /* where kernels run: a user stream, or the per-thread stream */
static CUstream g_launch_arg;  /* the handle passed to the launch call (NULL for ptsz) */
static CUdeviceptr g_total;
static uint64_t g_ns;
static CUgraphExec g_exec; /* --path graph: the captured batch */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void launch_one(void) {
    void *args[] = {&g_ns, &g_total};
    switch (g_path) {
    case PATH_GRAPH:
    case PATH_LAUNCH: CU(cuLaunchKernel, g_fn, 1, 1, 1, 1, 1, 1, 0, g_launch_arg, args, NULL); break;
    case PATH_PTSZ: CU(cuLaunchKernel_ptsz, g_fn, 1, 1, 1, 1, 1, 1, 0, g_launch_arg, args, NULL); break;
    case PATH_COOP: CU(cuLaunchCooperativeKernel, g_fn, 1, 1, 1, 1, 1, 1, 0, g_launch_arg, args); break;
    case PATH_EX: {
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
        cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
        cfg.hStream = g_launch_arg;
        cfg.attrs = NULL;
        cfg.numAttrs = 0;
        CU(cuLaunchKernelEx, &cfg, g_fn, args, NULL);
        break;
    }
    }
}

static uint64_t read_busy(void) {
    uint64_t v = 0;
    CU(cuMemcpyDtoH_v2, &v, g_total, sizeof v);
    return v;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--kernel-us N] [--duration S] [--path launch|ptsz|ex|coop|graph] [--sync] [--batch N]\n"
            "          [--device N] [--report-ms N]\n",
            argv0);
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    long kernel_us = 1000, batch = 8, report_ms = 100;
    int device = 0, sync_mode = 0;
    double duration = 5.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--sync") == 0) { sync_mode = 1; continue; }
        if (!v) usage(argv[0]);
        i++;
        if (strcmp(a, "--kernel-us") == 0) kernel_us = atol(v);
        else if (strcmp(a, "--duration") == 0) duration = atof(v);
        else if (strcmp(a, "--batch") == 0) batch = atol(v);
        else if (strcmp(a, "--device") == 0) device = atoi(v);
        else if (strcmp(a, "--report-ms") == 0) report_ms = atol(v);
        else if (strcmp(a, "--path") == 0) {
            if (strcmp(v, "launch") == 0) g_path = PATH_LAUNCH;
            else if (strcmp(v, "ptsz") == 0) g_path = PATH_PTSZ;
            else if (strcmp(v, "ex") == 0) g_path = PATH_EX;
            else if (strcmp(v, "coop") == 0) g_path = PATH_COOP;
            else if (strcmp(v, "graph") == 0) g_path = PATH_GRAPH;
            else usage(argv[0]);
        } else usage(argv[0]);
    }
    if (kernel_us < 0 || batch < 1 || report_ms < 1 || duration < 0) usage(argv[0]);
    g_ns = (uint64_t)kernel_us * 1000u;

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "error dlopen(libcuda.so.1) -1 %s\n", dlerror());
        return 1;
    }
#define RESOLVE(name) p_##name = (__typeof__(name) *)resolve(lib, #name);
    CU_FUNCTIONS(RESOLVE)
    switch (g_path) { /* only the chosen path's entry point has to be exported */
    case PATH_LAUNCH: RESOLVE(cuLaunchKernel) break;
    case PATH_PTSZ: RESOLVE(cuLaunchKernel_ptsz) break;
    case PATH_EX: RESOLVE(cuLaunchKernelEx) break;
    case PATH_COOP: RESOLVE(cuLaunchCooperativeKernel) break;
    case PATH_GRAPH: RESOLVE(cuLaunchKernel) GRAPH_FUNCTIONS(RESOLVE) break;
    }
#undef RESOLVE

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, device);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuModuleLoadData, &mod, k_ptx);
    CU(cuModuleGetFunction, &g_fn, mod, "spin");
    CU(cuMemAlloc_v2, &g_total, sizeof(uint64_t));
    if (g_path == PATH_PTSZ) {
        g_stream = CU_STREAM_PER_THREAD;
        g_launch_arg = NULL; /* NULL means the per-thread stream to the _ptsz entry point */
    } else {
        CU(cuStreamCreate, &g_stream, CU_STREAM_NON_BLOCKING);
        g_launch_arg = g_stream;
    }
    CUevent ev[2];
    CU(cuEventCreate, &ev[0], CU_EVENT_DISABLE_TIMING);
    CU(cuEventCreate, &ev[1], CU_EVENT_DISABLE_TIMING);

    /* Warm-up: the first launch may compile the kernel; not counted. */
    uint64_t saved_ns = g_ns;
    g_ns = 0;
    launch_one();
    CU(cuStreamSynchronize, g_stream);
    g_ns = saved_ns;
    CU(cuMemsetD8_v2, g_total, 0, sizeof(uint64_t));
    CU(cuCtxSynchronize);
    if (g_path == PATH_GRAPH) { /* one batch (one kernel with --sync), captured once */
        CUgraph graph;
        CU(cuStreamBeginCapture_v2, g_stream, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */);
        for (long i = 0; i < (sync_mode ? 1 : batch); i++) launch_one();
        CU(cuStreamEndCapture, g_stream, &graph);
        CU(cuGraphInstantiateWithFlags, &g_exec, graph, 0);
    }

    size_t lat_n = 0, lat_cap = 1024;
    uint64_t *lat = sync_mode ? malloc(lat_cap * sizeof *lat) : NULL;
    if (sync_mode && !lat) return 1;
    const uint64_t t0 = now_ns();
    const uint64_t end = t0 + (uint64_t)(duration * 1e9);
    const uint64_t report_every = (uint64_t)report_ms * 1000000u;
    uint64_t next_report = t0 + report_every, completed = 0;
    /* The CLOCK_MONOTONIC time of t = 0, so that several clients' samples share one clock. */
    printf("start %llu\n", (unsigned long long)t0);

    if (sync_mode) {
        while (now_ns() < end) {
            uint64_t a = now_ns();
            if (g_path == PATH_GRAPH) CU(cuGraphLaunch, g_exec, g_stream);
            else launch_one();
            CU(cuStreamSynchronize, g_stream);
            uint64_t b = now_ns();
            completed++;
            if (lat_n == lat_cap) {
                lat_cap *= 2;
                uint64_t *grown = realloc(lat, lat_cap * sizeof *lat);
                if (!grown) return 1;
                lat = grown;
            }
            lat[lat_n++] = b - a;
            if (b >= next_report) {
                printf("sample %llu %llu %llu\n", (unsigned long long)(b - t0), (unsigned long long)completed,
                       (unsigned long long)read_busy());
                while (next_report <= b) next_report += report_every;
            }
        }
    } else {
        uint64_t k = 0; /* batches launched */
        while (now_ns() < end) {
            if (g_path == PATH_GRAPH) CU(cuGraphLaunch, g_exec, g_stream);
            else for (long i = 0; i < batch; i++) launch_one();
            CU(cuEventRecord, ev[k & 1], g_stream);
            if (k > 0) { /* wait for the previous batch; this one stays queued behind it */
                CU(cuEventSynchronize, ev[(k - 1) & 1]);
                completed = k * (uint64_t)batch;
            }
            k++;
            uint64_t t = now_ns();
            if (t >= next_report) {
                printf("sample %llu %llu %llu\n", (unsigned long long)(t - t0), (unsigned long long)completed,
                       (unsigned long long)read_busy());
                while (next_report <= t) next_report += report_every;
            }
        }
        completed = k * (uint64_t)batch; /* all of them, once the synchronize below returns */
    }
    CU(cuCtxSynchronize);
    const uint64_t wall = now_ns() - t0;
    const uint64_t busy = read_busy();
    printf("sample %llu %llu %llu\n", (unsigned long long)wall, (unsigned long long)completed,
           (unsigned long long)busy);
    if (sync_mode) {
        qsort(lat, lat_n, sizeof *lat, cmp_u64);
        double p50 = 0, p99 = 0, mx = 0;
        if (lat_n) {
            p50 = lat[(lat_n - 1) / 2] / 1e3;
            p99 = lat[(size_t)((lat_n - 1) * 0.99)] / 1e3;
            mx = lat[lat_n - 1] / 1e3;
        }
        printf("latency_us p50 %.1f p99 %.1f max %.1f n %zu\n", p50, p99, mx, lat_n);
        free(lat);
    }
    printf("done kernels %llu busy_ns %llu wall_ns %llu share %.3f\n", (unsigned long long)completed,
           (unsigned long long)busy, (unsigned long long)wall, wall ? 100.0 * (double)busy / (double)wall : 0.0);
    return 0;
}
