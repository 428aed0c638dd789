//! `dlopen` keeps its caller under `gpupool run` (interpose/src/hooks.rs): a library that
//! loads a neighbour by bare name finds it through its own `$ORIGIN` RUNPATH or RPATH, with
//! `dlopen`, `dlmopen(LM_ID_BASE)` and `dlmopen(LM_ID_NEWLM)`; `dlsym(RTLD_NEXT, …)` means
//! "after the caller" for a library and for the program; and the vendor names still get
//! libgpupool.so's handle, from the program, from a library, and from a library's
//! constructor while the program's `dlopen` of it runs.
//!
//! Fixture (tests/c/dlopen_caller/, built here with the system C compiler into one
//! directory that is on no search path): `program` dlopens `libgpupool_test_loader_runpath.so`
//! or `_rpath.so` by path; the loader dlopens `libgpupool_test_neighbour.so` by bare name and
//! wraps `libgpupool_test_layer.so`'s function through RTLD_NEXT. Each check is one process
//! (program.c says why), run exactly as a user runs it, `target/<profile>/gpupool run -- PROG`,
//! with no LD_LIBRARY_PATH of its own, and also without the interposer, where it must
//! pass as well (the fixture tests glibc's behaviour, not its own). Nothing calls into
//! CUDA, so no daemon is needed: `--endpoint` names a socket nobody listens on.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

struct Fixture {
    dir: PathBuf,
    program: PathBuf,
    loaders: [PathBuf; 2],
}

/// Builds the fixture once per test process.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("dlopen_caller-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let lib = |name: &str| dir.join(format!("libgpupool_test_{name}.so"));
        let shared = ["-shared", "-fPIC"];
        gpupool_e2e::compile_c_into("dlopen_caller/neighbour.c", &lib("neighbour"), &shared);
        gpupool_e2e::compile_c_into("dlopen_caller/layer.c", &lib("layer"), &shared);
        let link_dir = format!("-L{}", dir.display());
        // --no-as-needed: the loader uses nothing of the layer by name (it reaches it through
        // RTLD_NEXT), and the dependency must stay.
        let loader = |name: &str, dtags: &str| {
            let extra =
                [&shared[..], &[dtags, "-Wl,-rpath,$ORIGIN", &link_dir, "-Wl,--no-as-needed", "-lgpupool_test_layer"]]
                    .concat();
            gpupool_e2e::compile_c_into("dlopen_caller/loader.c", &lib(name), &extra);
            lib(name)
        };
        let loaders =
            [loader("loader_runpath", "-Wl,--enable-new-dtags"), loader("loader_rpath", "-Wl,--disable-new-dtags")];
        let program = dir.join("program");
        gpupool_e2e::compile_c_into("dlopen_caller/program.c", &program, &[]);
        Fixture { dir, program, loaders }
    })
}

/// What a test checks a loader's dynamic section for: the kind of search path it carries.
fn dynamic_section(lib: &Path) -> String {
    let out = Command::new("readelf").arg("-d").arg(lib).output().expect("running readelf");
    assert!(out.status.success(), "readelf -d {}: {}", lib.display(), gpupool_e2e::output_text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `program LOADER MODE`, under `gpupool run` when `pooled`, else on its own; with no
/// LD_LIBRARY_PATH or LD_PRELOAD from the test's environment. Panics unless it passed.
fn check(loader: &Path, mode: &str, pooled: bool) {
    let f = fixture();
    let mut cmd = if pooled {
        let mut c = Command::new(gpupool_e2e::built("gpupool", "gpupool-daemon"));
        let endpoint = format!("unix://{}", f.dir.join("nobody.sock").display());
        c.args(["run", "--endpoint", &endpoint, "--"]).arg(&f.program);
        c
    } else {
        Command::new(&f.program)
    };
    cmd.arg(loader).arg(mode);
    for var in ["LD_LIBRARY_PATH", "LD_PRELOAD", "GPUPOOL_ENDPOINT"] {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("running the dlopen_caller program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let how = if pooled { "under gpupool run" } else { "without the interposer" };
    assert!(
        out.status.success() && stdout.trim() == format!("PASS {mode}"),
        "{} {mode} {how}:\n{}",
        loader.file_name().unwrap().to_string_lossy(),
        gpupool_e2e::output_text(&out)
    );
}

#[test]
fn the_fixture_loaders_carry_runpath_and_rpath_and_the_program_cannot_find_the_neighbour() {
    let [runpath, rpath] = &fixture().loaders;
    let (runpath, rpath) = (dynamic_section(runpath), dynamic_section(rpath));
    assert!(
        runpath.contains("(RUNPATH)") && runpath.contains("[$ORIGIN]") && !runpath.contains("(RPATH)"),
        "{runpath}"
    );
    assert!(rpath.contains("(RPATH)") && rpath.contains("[$ORIGIN]") && !rpath.contains("(RUNPATH)"), "{rpath}");
    for pooled in [false, true] {
        check(&fixture().loaders[0], "control", pooled);
    }
}

#[test]
fn a_library_dlopens_its_neighbour_by_bare_name_through_its_own_origin() {
    for loader in &fixture().loaders {
        for pooled in [false, true] {
            check(loader, "dlopen", pooled);
        }
    }
}

#[test]
fn a_library_dlmopens_its_neighbour_through_its_own_origin_in_the_base_and_a_new_namespace() {
    for loader in &fixture().loaders {
        for mode in ["dlmopen-base", "dlmopen-new"] {
            for pooled in [false, true] {
                check(loader, mode, pooled);
            }
        }
    }
}

#[test]
fn rtld_next_from_a_library_finds_the_definition_after_that_library() {
    for pooled in [false, true] {
        check(&fixture().loaders[0], "next", pooled);
    }
}

#[test]
fn rtld_next_from_the_program_finds_the_interposers_cuinit() {
    check(&fixture().loaders[0], "next-cuinit", true);
}

#[test]
fn vendor_libraries_by_any_path_are_the_interposer_from_the_program_and_from_a_library() {
    check(&fixture().loaders[0], "vendor", true);
}
