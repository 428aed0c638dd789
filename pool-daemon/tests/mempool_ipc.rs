//! Stream-ordered memory pools shared between processes through the pool
//! (`cuMemPoolExportToShareableHandle`, `cuMemPoolImportFromShareableHandle`,
//! `cuMemPoolExportPointer`, `cuMemPoolImportPointer` and the runtime's): tests/python/mempool_ipc.py
//! run as three unmodified cuda-bindings processes under `gpupool run`, two of tenant `team` (an
//! exporter and an importer, passing the pool's descriptor over a unix socket with SCM_RIGHTS)
//! and one of tenant `other`, which is refused with a log line naming both tenants. The memory
//! is counted once, in the exporter's ledger, while both hold it; the exporter's free ends the
//! importer's view; nothing is left when they are gone. The daemon's side is also checked on the
//! wire: pointers only through an imported pool of the same tenant, only from the exporting
//! session's pool, and a revoked pointer no longer imports.

mod common;

use common::{Client, Daemon, MIB, code, ensure_interposer, gpupool_run_script, uid};
use gpupool_protocol::ops::answer;
use gpupool_protocol::{DevicePtr, Request};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn config() -> String {
    format!(
        "[[tenant]]\nname = \"team\"\nuids = [{}]\nmemory = \"256MiB\"\n\n\
         [[tenant]]\nname = \"other\"\ntoken_sha256 = \"{}\"\nmemory = \"256MiB\"\n",
        uid(),
        gpupool_quota::hash_token("tk-other")
    )
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "{what} did not come within {secs} s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn exported_pools_share_memory_within_a_tenant_and_are_refused_across_tenants() {
    ensure_interposer();
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv/bin/python");
    assert!(python.exists(), "{} missing: run scripts/setup-venv", python.display());
    let d = Daemon::start(Some(&config()));
    let work = d.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let n = 4 * MIB;
    let roles = [("exporter", None), ("importer", None), ("intruder", Some("tk-other"))];
    let runs: Vec<_> = roles
        .iter()
        .map(|&(role, token)| {
            let mut cmd = gpupool_run_script(&d, &python, "mempool_ipc.py");
            cmd.arg(role).arg(&work).arg(n.to_string()).env("GPUPOOL_LOG", "1");
            let env: Vec<(&str, &str)> = token.map(|t| ("GPUPOOL_TOKEN", t)).into_iter().collect();
            let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            std::thread::spawn(move || {
                let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                (role, gpupool_e2e::output_with_sim_env(cmd, &env, Duration::from_secs(240)))
            })
        })
        .collect();

    // While the importer holds the exporter's allocation: counted once, in the tenant's ledger.
    let written = work.join("written");
    // The intruder may finish first; the exporter or importer finishing first has failed.
    wait_for("the importer's write", 200, || written.exists() || runs[..2].iter().any(|r| r.is_finished()));
    if !written.exists() {
        let outs: Vec<String> = runs.into_iter().map(|r| format!("{:?}", r.join().unwrap())).collect();
        panic!("a process ended before the importer wrote:\n{}\n--- daemon ---\n{}", outs.join("\n"), d.log());
    }
    let text = std::fs::read_to_string(&written).unwrap();
    let (free, total) =
        text.split_once(' ').map(|(f, t)| (f.parse().unwrap_or(0), t.parse().unwrap_or(0))).unwrap_or((0, 0));
    assert_eq!(d.used("team", 0), n, "the pool's block once, in the exporter's ledger: {}", d.status());
    assert_eq!((free, total), (256 * MIB - n, 256 * MIB), "the importer's cuMemGetInfo");
    assert_eq!(d.used("other", 0), 0);
    std::fs::write(work.join("checked"), "").unwrap();

    for r in runs {
        let (role, out) = r.join().unwrap();
        let out = out.unwrap_or_else(|| panic!("{role} did not finish\n{}", d.log()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("{role} ok")),
            "{role}: {}\n{stdout}\n{}\n--- daemon ---\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            d.log()
        );
    }
    let log = d.log();
    let refusal = log.lines().find(|l| l.contains("cuMemPoolImportFromShareableHandle refused"));
    assert!(
        refusal.is_some_and(|l| l.contains("tenant=other") && l.contains("owner=team")),
        "no refusal naming both tenants:\n{log}"
    );
    wait_for("the tenant's memory to come back", 5, || d.used("team", 0) == 0);
}

fn secret(r: gpupool_protocol::Reply) -> [u8; 16] {
    answer::MemExported::try_from(r).expect("a secret").secret
}

#[test]
fn the_daemon_imports_pool_pointers_only_within_the_tenant_and_the_pool() {
    let d = Daemon::start(Some(&config()));
    let mut a = Client::connect(&d.socket);
    let mut b = Client::connect(&d.socket);
    let mut other = Client::connect_as(&d.socket, None, Some("tk-other")).expect("the other tenant's session");
    let ctx = a.ctx(0);
    b.ctx(0);
    other.ctx(0);
    let ptr = a.alloc(ctx, MIB).unwrap();
    let plain = a.alloc(ctx, MIB).unwrap();
    let pool = secret(a.call(Request::MemPoolExport {}));
    let second_pool = secret(a.call(Request::MemPoolExport {}));
    let exported = secret(a.call(Request::MemPoolExportPointer { pool, ptr }));
    // The same allocation, the same secret; not this session's pool or memory: refused.
    assert_eq!(secret(a.call(Request::MemPoolExportPointer { pool, ptr })), exported);
    assert_eq!(code(&a.call(Request::MemPoolExportPointer { pool: second_pool, ptr })), 1);
    assert_eq!(code(&b.call(Request::MemPoolExportPointer { pool, ptr: plain })), 1);
    assert_eq!(code(&a.call(Request::MemPoolExportPointer { pool, ptr: DevicePtr(ptr.0 + 64) })), 1);
    // A pool pointer is no IPC handle.
    assert_eq!(code(&b.call(Request::IpcOpenMemHandle { secret: exported })), 400);

    // Only through a pool this session imported.
    assert_eq!(code(&b.call(Request::MemPoolImportPointer { pool, secret: exported })), 1);
    assert_eq!(code(&other.call(Request::MemPoolImport { pool })), 1);
    assert_eq!(code(&other.call(Request::MemPoolImportPointer { pool, secret: exported })), 1);
    assert_eq!(code(&a.call(Request::MemPoolImport { pool })), 1, "its own pool");
    assert_eq!(code(&b.call(Request::MemPoolImport { pool: [7; 16] })), 1);
    assert_eq!(code(&b.call(Request::MemPoolImport { pool })), 0);
    assert_eq!(code(&b.call(Request::MemPoolImport { pool: second_pool })), 0);
    assert_eq!(code(&b.call(Request::MemPoolImportPointer { pool: second_pool, secret: exported })), 1);
    let r = answer::AddressRange::try_from(b.call(Request::MemPoolImportPointer { pool, secret: exported })).unwrap();
    assert_eq!((r.base, r.size), (ptr, MIB));
    let bytes = |c: &mut Client| c.call(Request::MemcpyDtoHInline { src: ptr, len: 16 });
    assert_eq!(code(&bytes(&mut b)), 0, "the importer reads the memory");
    assert_eq!(code(&bytes(&mut other)), 1, "another tenant does not");
    assert_eq!(d.used("team", 0), 2 * MIB, "counted once, where allocated");

    // The exporter's free of the pointer (its block kept for reuse) ends the view.
    assert_eq!(code(&b.call(Request::MemPoolRevokePointer { ptr })), 1, "only the exporter revokes");
    assert_eq!(code(&a.call(Request::MemPoolRevokePointer { ptr })), 0);
    assert_eq!(code(&bytes(&mut b)), 1);
    assert_eq!(code(&bytes(&mut a)), 0, "the exporter's allocation lives on");
    assert_eq!(code(&b.call(Request::MemPoolImportPointer { pool, secret: exported })), 1);
    assert_eq!(code(&b.call(Request::IpcCloseMemHandle { ptr })), 0);
    // Exported again (a reused block): a new secret, imported while the exporter ends.
    let again = secret(a.call(Request::MemPoolExportPointer { pool, ptr }));
    assert_ne!(again, exported);
    assert_eq!(code(&b.call(Request::MemPoolImportPointer { pool, secret: again })), 0);
    assert_eq!(code(&bytes(&mut b)), 0);
    // A destroyed pool imports no more; the exporter's end ends its exports.
    assert_eq!(code(&other.call(Request::MemPoolUnexport { pool })), 1);
    assert_eq!(code(&a.call(Request::MemPoolUnexport { pool })), 0);
    let mut c = Client::connect(&d.socket);
    c.ctx(0);
    assert_eq!(code(&c.call(Request::MemPoolImport { pool })), 1);
    drop(a);
    wait_for("the exporter's end", 5, || d.used("team", 0) == 0);
    assert_eq!(code(&bytes(&mut b)), 1, "the importer's view ends with the exporter's session");
    assert_eq!(code(&b.call(Request::IpcCloseMemHandle { ptr })), 0);
    assert_eq!(code(&c.call(Request::MemPoolImport { pool: second_pool })), 1);
    assert!(d.log().contains("cuMemPoolImportFromShareableHandle refused"), "{}", d.log());

    // Pool exports are bounded per session (OUT_OF_MEMORY past it), and end with it.
    for _ in 0..1024 {
        secret(c.call(Request::MemPoolExport {}));
    }
    assert_eq!(code(&c.call(Request::MemPoolExport {})), 2);
    drop(c);
    let mut e = Client::connect(&d.socket);
    assert_eq!(code(&e.call(Request::MemPoolExport {})), 0);
}
