//! ABI conformance of our headers against NVIDIA's (`cargo xtask abi-check`).
//!
//! Every item our headers declare becomes one `_Static_assert` compiled against NVIDIA's own
//! headers: constants (enum constants, object-like macros) by value, structs and unions by size,
//! alignment and the offset and type of every field, typedefs and functions by type
//! compatibility. The items and their types come from clang's JSON AST of our header, the
//! numbers from a probe program compiled against our header. The C compiler reports every
//! failing assertion, so one run lists all mismatches, each naming its item. Every run then
//! repeats the check with a few deliberately wrong items and fails unless exactly those are
//! reported, so the check cannot pass vacuously.
//!
//! The pairs: `gpupool_cuda.h` against CUDA 12's `cuda.h` and `cudaTypedefs.h`
//! (`--cuda-include`), `gpupool_nvml.h` against `nvml.h` (`--nvml-include`), `gpupool_cudart.h`
//! against CUDA 13's `cuda_runtime_api.h` (`--cudart13-include`), and `gpupool_cudart12.h`
//! against CUDA 12's `cuda_runtime_api.h` (`--cuda-include`, which must then also reach the
//! `crt/host_defines.h` it includes: PyPI ships that with nvcc, not the runtime, hence a search
//! path of several dirs), and `gpupool_cublas.h` against CUDA 12's `cublas_api.h` and
//! `cublasLt.h` (`--cublas-include`: the cuBLAS wheel's dir plus the runtime's and CCCL's, which
//! `cuda_fp16.h` needs for `nv/target`). Each of our headers is checked with everything it includes from
//! `shim-headers/include`, so the two runtime headers stand alone.
//!
//! A function is checked against NVIDIA's declaration of the same name only: NVIDIA's headers
//! rename API names with macros (`cuMemAlloc` to `cuMemAlloc_v2`, `cudaMemcpy` to
//! `cudaMemcpy_ptds` under per-thread default streams), so each function name must also reach
//! the compiler unexpanded, or the check fails naming it. Which renaming applies is chosen per
//! pair by the macros defined before NVIDIA's headers.
//!
//! Known blind spot: C treats an enum as compatible with its underlying integer type, so a
//! function taking `unsigned int` where NVIDIA takes `CUresult` passes (the ABI is identical).

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One of our headers and the NVIDIA headers it must agree with.
struct Pair<'a> {
    ours: &'static str,
    /// Whose headers, for the messages: `CUDA 13`.
    release: &'static str,
    /// Where NVIDIA's headers are found, searched in order.
    nvidia_dirs: &'a [PathBuf],
    nvidia_headers: &'static [&'static str],
    /// Macros defined before NVIDIA's headers are included.
    defines: &'static [&'static str],
}

/// Each argument is a search path of include dirs.
pub fn run(cuda: &[PathBuf], nvml: &[PathBuf], cudart13: &[PathBuf], cublas: &[PathBuf]) -> Result<()> {
    let pairs = [
        Pair {
            ours: "gpupool_cuda.h",
            release: "CUDA 12",
            nvidia_dirs: cuda,
            nvidia_headers: &["cuda.h", "cudaTypedefs.h"],
            // Makes cuda.h declare the exported names (cuMemAlloc_v2, cuLaunchKernel_ptsz) as our
            // header does, instead of #defining the API names to them.
            defines: &["__CUDA_API_VERSION_INTERNAL"],
        },
        Pair {
            ours: "gpupool_nvml.h",
            release: "CUDA 12",
            nvidia_dirs: nvml,
            nvidia_headers: &["nvml.h"],
            // Without it nvml.h #defines e.g. nvmlInit to nvmlInit_v2, and an unversioned name in
            // our header would be checked against the wrong function.
            defines: &["NVML_NO_UNVERSIONED_FUNC_DEFS"],
        },
        Pair {
            ours: "gpupool_cudart.h",
            release: "CUDA 13",
            nvidia_dirs: cudart13,
            nvidia_headers: &["cuda_runtime_api.h"],
            // None: with neither CUDA_API_PER_THREAD_DEFAULT_STREAM nor __CUDA_API_VERSION_INTERNAL
            // defined, CUDA 13's header declares the plain names (cudaMemcpy, the legacy default
            // stream), as our header does, not the _ptds/_ptsz exports.
            defines: &[],
        },
        Pair {
            ours: "gpupool_cudart12.h",
            release: "CUDA 12",
            nvidia_dirs: cuda,
            nvidia_headers: &["cuda_runtime_api.h"],
            // None: CUDA 12's header always #defines cudaGetDeviceProperties to
            // cudaGetDeviceProperties_v2, so its declaration is of the _v2 name our header has;
            // no per-thread default stream renaming (CUDA_API_PER_THREAD_DEFAULT_STREAM,
            // __CUDA_API_VERSION_INTERNAL) is active.
            defines: &[],
        },
        Pair {
            ours: "gpupool_cublas.h",
            release: "CUDA 12",
            nvidia_dirs: cublas,
            // cublasLt.h defines CUBLASAPI, which cublas_api.h insists on, then includes it.
            nvidia_headers: &["cublasLt.h", "cublas_api.h"],
            // None: cublas_api.h declares the exported _v2 names our header has (only cublas_v2.h,
            // not included, #defines cublasCreate to cublasCreate_v2).
            defines: &[],
        },
    ];
    let root = crate::workspace_root();
    let work = root.join("target/abi-check");
    let mut errors = Vec::new();
    for pair in &pairs {
        if let Err(e) = check_pair(&root.join("shim-headers/include"), pair, &work) {
            errors.push(format!("{e:#}"));
        }
    }
    if !errors.is_empty() {
        bail!("ABI check failed:\n{}", errors.join("\n"));
    }
    println!("abi-check: our headers agree with NVIDIA's");
    Ok(())
}

/// What our header declares, by kind.
#[derive(Default)]
struct Items {
    constants: Vec<String>,
    records: Vec<Record>,
    /// (name, our type as C text)
    typedefs: Vec<(String, String)>,
    functions: Vec<(String, String)>,
}

/// A struct or union, named as C can name it: `struct tag`, or its typedef when anonymous.
struct Record {
    ty: String,
    fields: Vec<Field>,
}

struct Field {
    /// `a`, or `a.b` for a member of a nested anonymous struct.
    path: String,
    /// Our type as C text; None for an anonymous struct type, whose own fields are listed instead.
    ty: Option<String>,
}

/// One `_Static_assert`: `what` names the item in the failure message.
#[derive(Clone)]
struct Assert {
    what: String,
    cond: String,
}

/// A number measured on our header, to be compared against NVIDIA's.
struct Measure {
    what: String,
    expr: String,
}

fn check_pair(include_dir: &Path, pair: &Pair, work: &Path) -> Result<()> {
    let include_dir = include_dir.canonicalize().with_context(|| format!("{}", include_dir.display()))?;
    let against = format!("{}'s {}", pair.release, pair.nvidia_headers.join(", "));
    let work = work.join(pair.ours.trim_end_matches(".h"));
    std::fs::create_dir_all(&work)?;
    let items = collect(&include_dir, pair.ours, &work)?;
    let fields: usize = items.records.iter().map(|r| r.fields.len()).sum();
    let counts = [
        ("constants", items.constants.len()),
        ("structs/unions", items.records.len()),
        ("fields", fields),
        ("typedefs", items.typedefs.len()),
        ("functions", items.functions.len()),
    ];
    // Zero of a kind means the AST walk missed it, not that there is nothing to check.
    for (kind, n) in counts {
        ensure!(n > 0, "{}: found no {kind} to check; the header walk is broken", pair.ours);
    }

    let measures = measures(&items);
    let values = probe(&include_dir, pair.ours, &measures, &work)?;
    let mut asserts: Vec<Assert> = measures
        .iter()
        .zip(&values)
        .map(|(m, v)| Assert { what: format!("{}: ours {}", m.what, shown(*v)), cond: format!("{} == {v}ULL", m.expr) })
        .collect();
    asserts.extend(type_asserts(&items));

    let failures = compile_asserts(pair, &asserts, &work.join("check.c"))?;
    if !failures.is_empty() {
        bail!("{} disagrees with {against}:\n  {}", pair.ours, failures.join("\n  "));
    }
    let wrong = self_test(pair, &asserts, &values, &work)?;
    let summary: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
    println!("{} agrees with {against}: {}", pair.ours, summary.join(", "));
    println!("  (self-test: {wrong} deliberately wrong items were each reported)");
    Ok(())
}

/// Shows a measured value as C would write it: enum constants like -1 come back as 2^64-1.
fn shown(v: u64) -> String {
    if v > i64::MAX as u64 { (v as i64).to_string() } else { v.to_string() }
}

/// The numbers to measure: constant values, then sizes, alignments and field offsets.
fn measures(items: &Items) -> Vec<Measure> {
    // Pointer-valued macros (CU_STREAM_LEGACY is `((CUstream)0x1)`) compare as integers too.
    let num = |e: &str| format!("(unsigned long long)(uintptr_t)({e})");
    let mut out: Vec<Measure> =
        items.constants.iter().map(|c| Measure { what: format!("constant {c}"), expr: num(c) }).collect();
    for r in &items.records {
        let t = &r.ty;
        out.push(Measure { what: format!("{t}: size"), expr: num(&format!("sizeof({t})")) });
        out.push(Measure { what: format!("{t}: alignment"), expr: num(&format!("_Alignof({t})")) });
        for f in &r.fields {
            let p = &f.path;
            out.push(Measure { what: format!("field {t}.{p}: offset"), expr: num(&format!("offsetof({t}, {p})")) });
        }
    }
    out
}

/// Type compatibility of fields, typedefs and functions. clang's type text (`CUresult (CUdeviceptr *,
/// size_t)`) is a valid C type-name, and NVIDIA's typedef names resolve once their header is included.
fn type_asserts(items: &Items) -> Vec<Assert> {
    let compat =
        |what: String, a: String, b: &str| Assert { what, cond: format!("__builtin_types_compatible_p({a}, {b})") };
    let mut out = Vec::new();
    for r in &items.records {
        for f in &r.fields {
            if let Some(ty) = &f.ty {
                let (t, p) = (&r.ty, &f.path);
                out.push(compat(format!("field {t}.{p}: ours {ty}"), format!("__typeof__((({t} *)0)->{p})"), ty));
            }
        }
    }
    for (name, ty) in &items.typedefs {
        out.push(compat(format!("typedef {name}: ours {ty}"), name.clone(), ty));
    }
    for (name, ty) in &items.functions {
        out.push(compat(format!("function {name}: ours {ty}"), format!("__typeof__({name})"), ty));
    }
    // After NVIDIA's headers the name must still be itself: a macro renaming it (`cudaMemcpy` to
    // `cudaMemcpy_ptds`) would have the check above compare the renamed function instead. These
    // come after every type assertion (the self-test perturbs the first `function ` one).
    for (name, _) in &items.functions {
        out.push(Assert { what: format!("function {name}: name not a macro"), cond: name_unexpanded(name) });
    }
    out
}

/// True (in a `_Static_assert`) when `name` reaches the compiler unexpanded. gcc and clang both
/// fold `__builtin_strcmp` of two literals to a constant.
fn name_unexpanded(name: &str) -> String {
    format!("__builtin_strcmp(GPUPOOL_NAME({name}), \"{name}\") == 0")
}

fn clang() -> String {
    std::env::var("CLANG").unwrap_or_else(|_| "clang".into())
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// Runs a tool, returning stdout; fails with its stderr.
fn output(cmd: &mut Command) -> Result<Vec<u8>> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}

/// The items of our header: declarations from clang's AST plus object-like macros.
fn collect(include_dir: &Path, header: &str, work: &Path) -> Result<Items> {
    let path = include_dir.join(header);
    let json = output(
        Command::new(clang()).args(["-Xclang", "-ast-dump=json", "-fsyntax-only", "-I"]).arg(include_dir).arg(&path),
    )?;
    let ast: Value = serde_json::from_slice(&json).context("parsing clang's JSON AST")?;
    let ours = include_dir.to_string_lossy().into_owned() + "/";
    let mut items = Items::default();
    let top = ast["inner"].as_array().context("AST without top-level declarations")?;
    let mut file = String::new();
    for (i, node) in top.iter().enumerate() {
        update_file(&node["loc"], &mut file);
        let here = file.clone();
        // Keep the file tracking in step with the locations clang wrote inside this node.
        update_file(&node["range"]["begin"], &mut file);
        update_file(&node["range"]["end"], &mut file);
        for child in node["inner"].as_array().into_iter().flatten() {
            walk_locations(child, &mut file);
        }
        if !here.starts_with(&ours) || node["isImplicit"] == true {
            continue;
        }
        let name = node["name"].as_str().unwrap_or("").to_string();
        let qual = node["type"]["qualType"].as_str().unwrap_or("").to_string();
        match node["kind"].as_str().unwrap_or("") {
            "EnumDecl" => {
                let constants = node["inner"].as_array().into_iter().flatten();
                items.constants.extend(constants.filter_map(|c| c["name"].as_str().map(String::from)));
            }
            // A forward declaration (`typedef struct CUctx_st *CUcontext`) has no layout; the
            // typedef check still proves NVIDIA uses the same tag.
            "RecordDecl" if node["completeDefinition"] != true => {}
            "RecordDecl" => {
                let ty = if name.is_empty() {
                    // `typedef struct { ... } T;`: C can only name it through the typedef.
                    let owner = top[i + 1..].iter().find(|n| n["inner"][0]["ownedTagDecl"]["id"] == node["id"]);
                    match owner.and_then(|n| n["name"].as_str()) {
                        Some(t) => t.to_string(),
                        None => bail!("{header}: an anonymous struct/union at top level has no typedef"),
                    }
                } else {
                    format!("{} {name}", node["tagUsed"].as_str().unwrap_or("struct"))
                };
                let mut fields = Vec::new();
                collect_fields(node, "", &mut fields, &mut items.records)?;
                items.records.push(Record { ty, fields });
            }
            "TypedefDecl" => {
                // `typedef struct { } T` prints as `struct T`, which is not C: its layout is
                // checked as the record named T instead.
                let anonymous = node["inner"][0]["ownedTagDecl"]["name"] == "";
                if !anonymous {
                    items.typedefs.push((name, qual));
                }
            }
            "FunctionDecl" => items.functions.push((name, qual)),
            // Refuse what we cannot check rather than skip it silently.
            other => bail!("{header}: abi-check does not know how to check the {other} `{name}`"),
        }
    }
    items.constants.extend(macros(include_dir, &path, work)?);
    Ok(items)
}

/// clang's JSON names a location's file only when it differs from the location written before
/// it, so the file of a declaration is known only by following every location in output order.
fn walk_locations(node: &Value, file: &mut String) {
    update_file(&node["loc"], file);
    update_file(&node["range"]["begin"], file);
    update_file(&node["range"]["end"], file);
    for child in node["inner"].as_array().into_iter().flatten() {
        walk_locations(child, file);
    }
}

/// A location inside a macro expansion carries a spelling and an expansion location, written
/// in that order; the expansion is where the declaration is.
fn update_file(loc: &Value, file: &mut String) {
    for l in [&loc["spellingLoc"], &loc["expansionLoc"], loc] {
        if let Some(f) = l["file"].as_str() {
            *file = f.to_string();
        }
    }
}

/// Fields of a record, descending into anonymous struct/union members (clang lists the nested
/// anonymous RecordDecl just before the FieldDecl that uses it).
fn collect_fields(record: &Value, prefix: &str, fields: &mut Vec<Field>, records: &mut Vec<Record>) -> Result<()> {
    let mut nested: Option<&Value> = None;
    for child in record["inner"].as_array().into_iter().flatten() {
        let name = child["name"].as_str().unwrap_or("");
        match child["kind"].as_str().unwrap_or("") {
            "RecordDecl" if name.is_empty() => nested = Some(child),
            // A named struct defined inside another one is still a file-scope tag in C.
            "RecordDecl" if child["completeDefinition"] == true => {
                let mut inner = Vec::new();
                collect_fields(child, "", &mut inner, records)?;
                let ty = format!("{} {name}", child["tagUsed"].as_str().unwrap_or("struct"));
                records.push(Record { ty, fields: inner });
            }
            // offsetof cannot name a bitfield; its neighbours' offsets and the size still pin it.
            "FieldDecl" if child["isBitfield"] == true => {}
            "FieldDecl" => {
                let qual = child["type"]["qualType"].as_str().unwrap_or("");
                let path = format!("{prefix}{name}");
                if qual.contains("(unnamed") || qual.contains("(anonymous") {
                    let inner = nested.take().with_context(|| format!("no definition for the type of field {path}"))?;
                    if !name.is_empty() {
                        fields.push(Field { path: path.clone(), ty: None });
                    }
                    // An unnamed member's fields are reached directly: `s.x`, not `s..x`.
                    let inner_prefix = if name.is_empty() { prefix.to_string() } else { format!("{path}.") };
                    collect_fields(inner, &inner_prefix, fields, records)?;
                } else {
                    fields.push(Field { path, ty: Some(qual.to_string()) });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Object-like macros our header defines: its `-dM` dump minus that of the system headers it
/// includes. Empty ones (include guards) are not values.
fn macros(include_dir: &Path, header: &Path, work: &Path) -> Result<Vec<String>> {
    let defines = |file: &Path| -> Result<BTreeMap<String, String>> {
        let out = output(Command::new(clang()).args(["-dM", "-E", "-x", "c", "-I"]).arg(include_dir).arg(file))?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.strip_prefix("#define "))
            .filter_map(|l| l.split_once(' ').map(|(n, v)| (n.to_string(), v.trim().to_string())))
            .collect())
    };
    let baseline = work.join("baseline.h");
    std::fs::write(&baseline, "#include <stddef.h>\n#include <stdint.h>\n")?;
    let system = defines(&baseline)?;
    let ours = defines(header)?;
    let mut names = BTreeSet::new();
    for (name, value) in ours {
        let function_like = name.contains('(');
        if !function_like && !value.is_empty() && system.get(&name) != Some(&value) {
            names.insert(name);
        }
    }
    Ok(names.into_iter().collect())
}

/// Compiles and runs a program printing each measure as evaluated on our header.
fn probe(include_dir: &Path, header: &str, measures: &[Measure], work: &Path) -> Result<Vec<u64>> {
    let mut src = format!(
        "#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n#include \"{header}\"\nint main(void) {{\n"
    );
    for m in measures {
        src += &format!("    printf(\"%llu\\n\", {});\n", m.expr);
    }
    src += "    return 0;\n}\n";
    let (c, exe) = (work.join("probe.c"), work.join("probe"));
    std::fs::write(&c, src)?;
    output(Command::new(cc()).args(["-std=gnu11", "-w", "-I"]).arg(include_dir).arg(&c).arg("-o").arg(&exe))?;
    let out = String::from_utf8(output(&mut Command::new(&exe))?)?;
    let values: Vec<u64> = out.lines().map(str::parse).collect::<Result<_, _>>().context("probe output")?;
    ensure!(values.len() == measures.len(), "probe printed {} values for {} measures", values.len(), measures.len());
    Ok(values)
}

/// Writes the assertions after NVIDIA's headers and compiles them. Returns one line per
/// failure, naming the item of the failing line (or NVIDIA's headers, when an error is there).
fn compile_asserts(pair: &Pair, asserts: &[Assert], file: &Path) -> Result<Vec<String>> {
    let mut src =
        String::from("/* Generated by `cargo xtask abi-check`: our declarations, asserted against NVIDIA's. */\n");
    for d in pair.defines {
        src += &format!("#define {d} 1\n");
    }
    src += "#include <stddef.h>\n#include <stdint.h>\n";
    for h in pair.nvidia_headers {
        src += &format!("#include <{h}>\n");
    }
    // GPUPOOL_NAME(x): x after macro expansion, as a string literal.
    src += "#define GPUPOOL_STR(x) #x\n#define GPUPOOL_NAME(x) GPUPOOL_STR(x)\n";
    let first_line = src.lines().count() + 1;
    for a in asserts {
        let msg = a.what.replace('\\', "\\\\").replace('"', "\\\"");
        src += &format!("_Static_assert({}, \"{msg}\");\n", a.cond);
    }
    std::fs::write(file, &src)?;
    let out = Command::new(cc())
        .args(["-std=gnu11", "-fsyntax-only", "-fdiagnostics-plain-output"])
        .args(pair.nvidia_dirs.iter().flat_map(|d| [Path::new("-I"), d]))
        .arg(file)
        .env("LC_ALL", "C") // plain quotes in the messages
        .output()
        .with_context(|| format!("running {}", cc()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let failures = attribute_errors(&stderr, &file.to_string_lossy(), |line| {
        line.checked_sub(first_line).and_then(|i| asserts.get(i)).map(|a| a.what.as_str())
    });
    if !out.status.success() && failures.is_empty() {
        bail!("{} failed without an error message:\n{stderr}", cc());
    }
    Ok(failures)
}

/// Groups the compiler's diagnostics into errors and names each by the line of the generated
/// file it belongs to: the error's own location, or the location of a note after it (an error
/// inside one of NVIDIA's macros is located in their header, the expansion in ours).
fn attribute_errors<'a>(stderr: &str, file: &str, item_at: impl Fn(usize) -> Option<&'a str>) -> Vec<String> {
    let line_in_file = |loc: &str| -> Option<usize> {
        let mut parts = loc.rsplitn(3, ':');
        let (_col, line, path) = (parts.next()?, parts.next()?, parts.next()?);
        if path == file { line.parse().ok() } else { None }
    };
    let mut errors: Vec<(Option<usize>, String)> = Vec::new();
    for l in stderr.lines() {
        if let Some((loc, msg)) = l.split_once(": error: ") {
            errors.push((line_in_file(loc), msg.to_string()));
        } else if let (Some((loc, _)), Some(last)) = (l.split_once(": note: "), errors.last_mut()) {
            last.0 = last.0.or(line_in_file(loc));
        }
    }
    let mut out = Vec::new();
    let mut seen_lines = BTreeSet::new();
    for (line, msg) in errors {
        // The first error of a line says it; the rest follow from it ("expression in static
        // assertion is not an integer" after an undeclared name).
        if line.is_some_and(|l| !seen_lines.insert(l)) {
            continue;
        }
        let Some(what) = line.and_then(&item_at) else {
            out.push(format!("NVIDIA's headers: {msg}"));
            continue;
        };
        // A failed assertion's message is `what` again.
        let why = if msg.starts_with("static assertion failed") { "NVIDIA's differs" } else { &msg };
        out.push(format!("{what}: {why}"));
    }
    out
}

/// Proves the check can fail: one wrong value of each kind, one wrong type of each kind, one
/// name NVIDIA lacks and one name a header #defines to another must each be reported, naming
/// that item, and nothing else.
fn self_test(pair: &Pair, asserts: &[Assert], values: &[u64], work: &Path) -> Result<usize> {
    let mut wrong = asserts.to_vec();
    let mut expected = Vec::new();
    let mut perturb = |i: usize, cond: String| {
        wrong[i].what = format!("self-test #{i}");
        wrong[i].cond = cond;
        expected.push(i);
    };
    for kind in ["constant ", ": size", "field "] {
        // A measure: the value plus one.
        if let Some(i) = asserts.iter().take(values.len()).position(|a| a.what.contains(kind)) {
            let expr = asserts[i].cond.rsplit_once(" == ").map_or("", |(e, _)| e);
            perturb(i, format!("{expr} == {}ULL", values[i].wrapping_add(1)));
        }
    }
    for prefix in ["field ", "typedef ", "function "] {
        // A type assertion: the same left-hand side against a type no item has.
        if let Some(i) = asserts.iter().skip(values.len()).position(|a| a.what.starts_with(prefix)) {
            let i = i + values.len();
            // The left-hand side never holds a comma; our type text may (function parameters).
            let lhs = asserts[i]
                .cond
                .trim_start_matches("__builtin_types_compatible_p(")
                .split_once(", ")
                .map_or("", |(l, _)| l);
            perturb(i, format!("__builtin_types_compatible_p({lhs}, char ****)"));
        }
    }
    wrong.push(Assert {
        what: "self-test missing".into(),
        cond: "(unsigned long long)(GPUPOOL_NO_SUCH_ITEM) == 0ULL".into(),
    });
    // <stddef.h>, included before NVIDIA's headers, #defines NULL: as a function's name it would
    // be a renamed one.
    wrong.push(Assert { what: "self-test renamed".into(), cond: name_unexpanded("NULL") });
    let failures = compile_asserts(pair, &wrong, &work.join("self-test.c"))?;
    let reported: BTreeSet<&str> = failures.iter().filter_map(|f| f.split_once(": ").map(|(w, _)| w)).collect();
    let mut want: BTreeSet<String> = expected.iter().map(|i| format!("self-test #{i}")).collect();
    want.insert("self-test missing".into());
    want.insert("self-test renamed".into());
    let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
    ensure!(
        expected.len() == 6 && reported == want,
        "{}: self-test failed: deliberately wrong items {want:?} were reported as {failures:#?} (see {})",
        pair.ours,
        work.join("self-test.c").display()
    );
    Ok(want.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Our headers checked against themselves: needs only clang and cc, not NVIDIA's headers,
    /// and still runs the self-test that wrong items are reported.
    #[test]
    fn headers_agree_with_themselves_and_wrong_items_are_reported() {
        let include = crate::workspace_root().join("shim-headers/include");
        let work = crate::workspace_root().join("target/abi-check-test");
        let dirs = [include.clone()];
        for (ours, nvidia) in [
            ("gpupool_cuda.h", &["gpupool_cuda.h"]),
            ("gpupool_nvml.h", &["gpupool_nvml.h"]),
            ("gpupool_cudart.h", &["gpupool_cudart.h"]),
            ("gpupool_cudart12.h", &["gpupool_cudart12.h"]),
            ("gpupool_cublas.h", &["gpupool_cublas.h"]),
        ] {
            let pair = Pair { ours, release: "the test", nvidia_dirs: &dirs, nvidia_headers: nvidia, defines: &[] };
            check_pair(&include, &pair, &work).unwrap();
        }
    }

    #[test]
    fn errors_are_named_by_their_line_or_the_expansion_note() {
        let stderr = "In file included from x.c:3:\n\
                      /n/nvml.h:10:5: error: bad thing\n\
                      x.c:7:16: note: in expansion of macro 'M'\n\
                      x.c:8:1: error: static assertion failed: \"constant A: ours 1\"\n\
                      x.c:8:1: error: expression in static assertion is not an integer\n\
                      /n/nvml.h:11:1: error: elsewhere\n";
        let names = ["", "", "", "", "", "", "", "item7", "item8"];
        let got = attribute_errors(stderr, "x.c", |l| names.get(l).copied());
        assert_eq!(got, ["item7: bad thing", "item8: NVIDIA's differs", "NVIDIA's headers: elsewhere"]);
    }
}
