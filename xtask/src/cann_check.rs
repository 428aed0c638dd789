//! `cargo xtask cann-check`: our CANN declarations against the `cann-sys` crate's.
//!
//! CANN's own headers cannot be compiled against here (Huawei ships them for its hardware
//! only), so the second opinion is `cann-sys` 0.1.3 (MIT/Apache-2.0), a hand-written subset
//! of the same documented ABI. Both sides are read as Rust syntax: ours from the bindings
//! bindgen made of shim-headers/include/gpupool_{acl,aclnn,dcmi}.h, theirs from the crate's
//! source, which `cargo metadata` fetches (xtask depends on it for no platform, so it is
//! pinned in Cargo.lock and never built or linked). Where both declare a function, its
//! arity, argument types and return type must agree; where both declare a constant (error
//! codes, enum values), its value must. Types are compared as the ABI sees them: typedefs
//! resolved, opaque handles as `void`, `int`/`int32_t` alike, and a C enum alike to a 32-bit
//! integer of the same name or none.
//!
//! A disagreement fails the check unless it is in [`KNOWN`], which says who is right and on
//! which documentation page; a known one that no longer occurs fails too (stale). Every run
//! also proves the comparison can fail, by planting mismatches in a copy of our side.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A disagreement we have checked against Huawei's documentation.
pub struct Known {
    /// `fn NAME` or `const NAME`.
    pub item: &'static str,
    /// Who is right, and where it is documented.
    pub verdict: &'static str,
}

pub const KNOWN: &[Known] = &[Known {
    item: "fn aclFinalize",
    verdict: "ours: CANN's runtime declares `aclError aclFinalize();` with no parameter \
                  (include/external/acl/acl_rt.h of the CANN runtime source, github.com/hicann/runtime), \
                  and Huawei's guide calls it as `ret = aclFinalize();` (\"运行管理资源释放与ACL去初始化\", \
                  https://support.huaweicloud.com/adevg-A200dk_3000/atlasdevelopment_01_0051.html); \
                  cann-sys 0.1.3 adds an `i32 deviceId` parameter that CANN never reads",
}];

/// One side's declarations, by name.
#[derive(Default, Clone)]
pub struct Decls {
    pub consts: BTreeMap<String, i128>,
    pub fns: BTreeMap<String, Sig>,
    /// `type X = Y;`
    aliases: BTreeMap<String, syn::Type>,
    /// Types that are C enums (bindgen newtypes with associated constants), by name.
    enums: BTreeMap<String, String>,
    /// Opaque C structs (`struct X { _unused: [u8; 0] }`).
    opaque: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Sig {
    pub args: Vec<syn::Type>,
    pub ret: Option<syn::Type>,
}

/// Parses Rust source (a bindings file or a crate module) into `decls`, skipping test modules.
pub fn parse_into(decls: &mut Decls, source: &str, what: &str) -> Result<()> {
    let file = syn::parse_file(source).with_context(|| format!("parsing {what}"))?;
    collect(decls, &file.items);
    Ok(())
}

fn is_test_cfg(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let text = a.meta.require_list().map(|l| l.tokens.to_string()).unwrap_or_default();
            text.split(|c: char| !c.is_alphanumeric() && c != '_').any(|w| w == "test")
        }
    })
}

fn collect(decls: &mut Decls, items: &[syn::Item]) {
    for item in items {
        match item {
            syn::Item::Mod(m) if !is_test_cfg(&m.attrs) => {
                if let Some((_, inner)) = &m.content {
                    collect(decls, inner);
                }
            }
            syn::Item::Const(c) if !is_test_cfg(&c.attrs) => {
                if let Some(v) = eval(&c.expr) {
                    decls.consts.insert(c.ident.to_string(), v);
                }
            }
            syn::Item::Type(t) => {
                decls.aliases.insert(t.ident.to_string(), (*t.ty).clone());
            }
            syn::Item::Struct(s) => {
                let name = s.ident.to_string();
                match &s.fields {
                    // bindgen's newtype for a C enum.
                    syn::Fields::Unnamed(f) if f.unnamed.len() == 1 => {
                        decls.enums.insert(name, canon_path_name(&f.unnamed[0].ty));
                    }
                    syn::Fields::Named(f)
                        if f.named.len() == 1 && f.named[0].ident.as_ref().is_some_and(|i| i == "_unused") =>
                    {
                        decls.opaque.push(name);
                    }
                    _ => {}
                }
            }
            syn::Item::Impl(imp) => {
                for it in &imp.items {
                    if let syn::ImplItem::Const(c) = it {
                        // `pub const ACL_FLOAT: aclDataType = aclDataType(0);`
                        let value = match &c.expr {
                            syn::Expr::Call(call) if call.args.len() == 1 => eval(&call.args[0]),
                            e => eval(e),
                        };
                        if let Some(v) = value {
                            decls.consts.insert(c.ident.to_string(), v);
                        }
                    }
                }
            }
            syn::Item::Enum(e) => {
                // A `#[repr(C)]` Rust enum: C's implicit numbering.
                let mut next = 0i128;
                for v in &e.variants {
                    if let Some((_, expr)) = &v.discriminant {
                        next = eval(expr).unwrap_or(next);
                    }
                    decls.consts.insert(v.ident.to_string(), next);
                    next += 1;
                }
            }
            syn::Item::ForeignMod(fm) => {
                for it in &fm.items {
                    if let syn::ForeignItem::Fn(f) = it {
                        let args = f
                            .sig
                            .inputs
                            .iter()
                            .filter_map(|a| match a {
                                syn::FnArg::Typed(p) => Some((*p.ty).clone()),
                                syn::FnArg::Receiver(_) => None,
                            })
                            .collect();
                        let ret = match &f.sig.output {
                            syn::ReturnType::Default => None,
                            syn::ReturnType::Type(_, t) => Some((**t).clone()),
                        };
                        decls.fns.insert(f.sig.ident.to_string(), Sig { args, ret });
                    }
                }
            }
            _ => {}
        }
    }
}

/// Integer literals, negated ones, casts and parentheses: what both sides write.
fn eval(expr: &syn::Expr) -> Option<i128> {
    match expr {
        syn::Expr::Lit(l) => match &l.lit {
            syn::Lit::Int(i) => i.base10_parse::<i128>().ok(),
            _ => None,
        },
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => eval(&u.expr).map(|v| -v),
        syn::Expr::Paren(p) => eval(&p.expr),
        syn::Expr::Cast(c) => eval(&c.expr),
        syn::Expr::Group(g) => eval(&g.expr),
        _ => None,
    }
}

fn canon_path_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        _ => String::new(),
    }
}

/// A primitive's ABI name on LP64 Linux (x86-64, aarch64).
fn primitive(name: &str) -> Option<&'static str> {
    Some(match name {
        "c_int" | "i32" => "i32",
        "c_uint" | "u32" => "u32",
        "c_char" | "c_schar" | "i8" => "i8",
        "c_uchar" | "u8" => "u8",
        "c_short" | "i16" => "i16",
        "c_ushort" | "u16" => "u16",
        "c_long" | "c_longlong" | "i64" => "i64",
        "c_ulong" | "c_ulonglong" | "u64" => "u64",
        "usize" | "size_t" => "usize",
        "isize" => "isize",
        "c_float" | "f32" => "f32",
        "c_double" | "f64" => "f64",
        "bool" => "bool",
        "c_void" => "void",
        _ => return None,
    })
}

/// The type as the ABI sees it, in `decls`' own terms: a C enum stays `enum NAME`, so that
/// two enums of the same name agree whatever integer each side backs it with.
fn canon(decls: &Decls, ty: &syn::Type, depth: u32) -> String {
    if depth > 16 {
        return "<alias loop>".into();
    }
    match ty {
        syn::Type::Ptr(p) => {
            let m = if p.mutability.is_some() { "*mut " } else { "*const " };
            format!("{m}{}", canon(decls, &p.elem, depth + 1))
        }
        syn::Type::Paren(p) => canon(decls, &p.elem, depth + 1),
        syn::Type::Group(g) => canon(decls, &g.elem, depth + 1),
        syn::Type::Tuple(t) if t.elems.is_empty() => "void".into(),
        syn::Type::Path(_) => {
            let name = canon_path_name(ty);
            if decls.enums.contains_key(&name) {
                return format!("enum {name}");
            }
            if decls.opaque.contains(&name) {
                return "void".into();
            }
            if let Some(p) = primitive(&name) {
                return p.into();
            }
            match decls.aliases.get(&name) {
                Some(target) => canon(decls, target, depth + 1),
                None => name,
            }
        }
        other => quote_type(other),
    }
}

fn quote_type(ty: &syn::Type) -> String {
    use quote::ToTokens;
    ty.to_token_stream().to_string()
}

/// Whether our canonical type and theirs are the same at the ABI. Their side may spell one of
/// our enums by name (an alias of that name) or as a plain 32-bit integer.
fn same(ours: &Decls, o: &syn::Type, theirs: &Decls, t: &syn::Type) -> bool {
    let (a, b) = (canon(ours, o, 0), canon(theirs, t, 0));
    if a == b {
        return true;
    }
    // Peel matching pointer layers, then compare the pointees with the enum allowance.
    let (mut a, mut b) = (a.as_str(), b.as_str());
    loop {
        match (a.strip_prefix("*mut "), b.strip_prefix("*mut ")) {
            (Some(x), Some(y)) => (a, b) = (x, y),
            _ => match (a.strip_prefix("*const "), b.strip_prefix("*const ")) {
                (Some(x), Some(y)) => (a, b) = (x, y),
                _ => break,
            },
        }
    }
    // A C enum is a 32-bit integer at the ABI; cann-sys spells ours as an alias of `c_int`.
    match a.strip_prefix("enum ") {
        Some(_) => b == a || b == "i32" || b == "u32",
        None => false,
    }
}

/// One disagreement: the item (`fn X` / `const X`) and what differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub item: String,
    pub detail: String,
}

pub struct Report {
    pub fns_compared: usize,
    pub consts_compared: usize,
    pub mismatches: Vec<Mismatch>,
    /// Agreements at the ABI that are spelled differently (a C enum where cann-sys has an
    /// integer): not failures, but said.
    pub notes: Vec<String>,
}

pub fn compare(ours: &Decls, theirs: &Decls) -> Report {
    let mut mismatches = Vec::new();
    let mut notes = Vec::new();
    let mut fns_compared = 0;
    for (name, o) in &ours.fns {
        let Some(t) = theirs.fns.get(name) else { continue };
        fns_compared += 1;
        let item = format!("fn {name}");
        if o.args.len() != t.args.len() {
            mismatches.push(Mismatch {
                item,
                detail: format!("{} parameters in ours, {} in cann-sys", o.args.len(), t.args.len()),
            });
            continue;
        }
        for (i, (a, b)) in o.args.iter().zip(&t.args).enumerate() {
            let (ca, cb) = (canon(ours, a, 0), canon(theirs, b, 0));
            if !same(ours, a, theirs, b) {
                mismatches.push(Mismatch {
                    item: item.clone(),
                    detail: format!("parameter {i}: ours `{ca}`, cann-sys `{cb}`"),
                });
            } else if ca != cb {
                notes
                    .push(format!("{item} parameter {i}: ours `{ca}`, cann-sys `{cb}` (a C enum is a 32-bit integer)"));
            }
        }
        let unit: syn::Type = syn::parse_quote!(());
        let (ra, rb) = (o.ret.as_ref().unwrap_or(&unit), t.ret.as_ref().unwrap_or(&unit));
        if !same(ours, ra, theirs, rb) {
            mismatches.push(Mismatch {
                item,
                detail: format!("returns: ours `{}`, cann-sys `{}`", canon(ours, ra, 0), canon(theirs, rb, 0)),
            });
        }
    }
    let mut consts_compared = 0;
    for (name, v) in &ours.consts {
        let Some(w) = theirs.consts.get(name) else { continue };
        consts_compared += 1;
        if v != w {
            mismatches.push(Mismatch { item: format!("const {name}"), detail: format!("ours {v}, cann-sys {w}") });
        }
    }
    Report { fns_compared, consts_compared, mismatches, notes }
}

/// Our side: the committed bindings of the three CANN headers.
pub fn ours(root: &Path) -> Result<Decls> {
    let mut decls = Decls::default();
    for f in ["acl_bindings.rs", "aclnn_bindings.rs", "dcmi_bindings.rs"] {
        let path = root.join("shim-headers/src").join(f);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        parse_into(&mut decls, &text, &path.display().to_string())?;
    }
    Ok(decls)
}

/// Their side: every module of the crate's src/.
pub fn theirs(src: &Path) -> Result<Decls> {
    let mut decls = Decls::default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(src)
        .with_context(|| format!("reading {}", src.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        parse_into(&mut decls, &text, &path.display().to_string())?;
    }
    Ok(decls)
}

/// cann-sys's src/ as `cargo metadata` resolves it (fetching it if it is not yet local).
fn cann_sys_src(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(root.join("Cargo.toml"))
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    let manifest = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "cann-sys")
        .and_then(|p| p["manifest_path"].as_str())
        .context("cargo metadata lists no cann-sys package (xtask/Cargo.toml pins it)")?;
    Ok(Path::new(manifest).parent().context("manifest path has no parent")?.join("src"))
}

/// The verdict on a report: mismatches not in `known`, and known ones that no longer occur.
pub fn judge(report: &Report, known: &[Known]) -> (Vec<Mismatch>, Vec<&'static str>) {
    let unexpected = report.mismatches.iter().filter(|m| !known.iter().any(|k| k.item == m.item)).cloned().collect();
    let stale = known.iter().filter(|k| !report.mismatches.iter().any(|m| m.item == k.item)).map(|k| k.item).collect();
    (unexpected, stale)
}

/// Mismatches planted in a copy of our side, which the comparison must find every run.
fn prove_it_can_fail(ours: &Decls, theirs: &Decls) -> Result<()> {
    let mut bad = ours.clone();
    let mut planted = Vec::new();
    if let Some(v) = bad.consts.get_mut("ACL_ERROR_RT_MEMORY_ALLOCATION") {
        *v += 1;
        planted.push("const ACL_ERROR_RT_MEMORY_ALLOCATION");
    }
    if let Some(sig) = bad.fns.get_mut("aclrtMemcpy") {
        sig.args[1] = syn::parse_quote!(u32);
        planted.push("fn aclrtMemcpy");
    }
    if let Some(sig) = bad.fns.get_mut("aclrtMalloc") {
        sig.args.pop();
        planted.push("fn aclrtMalloc");
    }
    if planted.len() != 3 {
        bail!("self-test: our side lacks the items it plants mismatches in ({planted:?})");
    }
    let report = compare(&bad, theirs);
    let (unexpected, _) = judge(&report, KNOWN);
    for item in &planted {
        if !unexpected.iter().any(|m| m.item == *item) {
            bail!("self-test: a planted mismatch in `{item}` went unnoticed; the check cannot fail");
        }
    }
    println!("self-test: {} planted mismatches found ({})", planted.len(), planted.join(", "));
    Ok(())
}

/// Minimum overlap: fewer means one side was not parsed as it should be.
const MIN_FNS: usize = 30;
const MIN_CONSTS: usize = 150;

pub fn run(cann_sys_src_override: Option<PathBuf>) -> Result<()> {
    let root = crate::workspace_root();
    let src = match cann_sys_src_override {
        Some(p) => p,
        None => cann_sys_src(&root)?,
    };
    let ours = ours(&root)?;
    let theirs = theirs(&src)?;
    let report = compare(&ours, &theirs);
    println!(
        "cann-check: {} functions and {} constants declared by both us and cann-sys ({})",
        report.fns_compared,
        report.consts_compared,
        src.display()
    );
    if report.fns_compared < MIN_FNS || report.consts_compared < MIN_CONSTS {
        bail!(
            "only {} functions and {} constants overlap (expected at least {MIN_FNS} and {MIN_CONSTS}): \
             one side was not read as it should be",
            report.fns_compared,
            report.consts_compared
        );
    }
    let (unexpected, stale) = judge(&report, KNOWN);
    for n in &report.notes {
        println!("note: {n}");
    }
    for m in &report.mismatches {
        if let Some(k) = KNOWN.iter().find(|k| k.item == m.item) {
            println!("known: {}: {}\n       right: {}", m.item, m.detail, k.verdict);
        }
    }
    prove_it_can_fail(&ours, &theirs)?;
    if !unexpected.is_empty() || !stale.is_empty() {
        let mut msg = String::new();
        for m in &unexpected {
            msg += &format!("MISMATCH {}: {}\n", m.item, m.detail);
        }
        for s in &stale {
            msg += &format!("STALE {s}: listed as a known disagreement but the two now agree\n");
        }
        bail!(
            "{msg}our CANN declarations and cann-sys disagree; fix ours (shim-headers/include) if they \
             are wrong, or record the disagreement with the documentation page in xtask/src/cann_check.rs"
        );
    }
    println!("cann-check: ours and cann-sys agree wherever they overlap (apart from the known disagreements above)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decls(src: &str) -> Decls {
        let mut d = Decls::default();
        parse_into(&mut d, src, "test").unwrap();
        d
    }

    /// Bindgen's shape of our side.
    const OURS: &str = r#"
        pub const ACL_ERROR_RT_MEMORY_ALLOCATION: u32 = 207001;
        pub const ACL_SUCCESS: ::std::os::raw::c_int = 0;
        pub type aclrtStream = *mut ::std::os::raw::c_void;
        pub type aclError = ::std::os::raw::c_int;
        impl aclrtMemcpyKind { pub const ACL_MEMCPY_DEVICE_TO_HOST: aclrtMemcpyKind = aclrtMemcpyKind(2); }
        #[repr(transparent)] pub struct aclrtMemcpyKind(pub ::std::os::raw::c_uint);
        #[repr(C)] pub struct aclTensor { _unused: [u8; 0] }
        unsafe extern "C" {
            pub fn aclrtMemcpyAsync(dst: *mut ::std::os::raw::c_void, destMax: usize,
                src: *const ::std::os::raw::c_void, count: usize, kind: aclrtMemcpyKind,
                stream: aclrtStream) -> aclError;
            pub fn aclDestroyTensor(tensor: *const aclTensor) -> i32;
        }
    "#;

    /// cann-sys's shape of the same items.
    const THEIRS: &str = r#"
        use std::ffi::{c_int, c_void};
        pub type aclError = c_int;
        pub const ACL_SUCCESS: aclError = 0;
        pub const ACL_ERROR_RT_MEMORY_ALLOCATION: aclError = 207_001;
        pub type aclrtMemcpyKind = c_int;
        pub const ACL_MEMCPY_DEVICE_TO_HOST: aclrtMemcpyKind = 2;
        pub type aclTensor = c_void;
        #[cfg(cann_sys_ffi)]
        unsafe extern "C" {
            pub fn aclrtMemcpyAsync(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize,
                kind: aclrtMemcpyKind, stream: *mut c_void) -> aclError;
            pub fn aclDestroyTensor(tensor: *const aclTensor) -> c_int;
        }
        #[cfg(test)]
        mod tests { pub const ACL_SUCCESS: i32 = 5; }
    "#;

    #[test]
    fn agreeing_declarations_pass() {
        let report = compare(&decls(OURS), &decls(THEIRS));
        assert_eq!(report.fns_compared, 2);
        assert_eq!(report.consts_compared, 3);
        assert_eq!(report.mismatches, vec![], "typedefs, opaque handles and enum spellings agree");
        assert_eq!(report.notes.len(), 1, "the enum spelled as c_int is said: {:?}", report.notes);
    }

    #[test]
    fn a_wrong_value_fails() {
        let theirs = decls(&THEIRS.replace("207_001", "207_002"));
        let report = compare(&decls(OURS), &theirs);
        let (unexpected, _) = judge(&report, KNOWN);
        assert_eq!(unexpected.len(), 1);
        assert_eq!(unexpected[0].item, "const ACL_ERROR_RT_MEMORY_ALLOCATION");
    }

    #[test]
    fn a_wrong_argument_type_or_count_fails() {
        let theirs = decls(&THEIRS.replace("destMax: usize, src", "destMax: u32, src"));
        let report = compare(&decls(OURS), &theirs);
        assert_eq!(report.mismatches.len(), 1);
        assert!(report.mismatches[0].detail.contains("parameter 1"), "{:?}", report.mismatches);

        let theirs = decls(&THEIRS.replace(", stream: *mut c_void) -> aclError", ") -> aclError"));
        let report = compare(&decls(OURS), &theirs);
        assert_eq!(report.mismatches[0].item, "fn aclrtMemcpyAsync");
        assert!(report.mismatches[0].detail.contains("6 parameters in ours, 5"));

        let theirs = decls(&THEIRS.replace("(tensor: *const aclTensor) -> c_int", "(tensor: *const aclTensor) -> u64"));
        assert_eq!(compare(&decls(OURS), &theirs).mismatches.len(), 1, "the return type counts too");
    }

    #[test]
    fn a_known_disagreement_is_accepted_and_a_stale_one_is_not() {
        let theirs =
            decls(&format!("{THEIRS} unsafe extern \"C\" {{ pub fn aclFinalize(deviceId: i32) -> aclError; }}"));
        let ours = decls(&format!("{OURS} unsafe extern \"C\" {{ pub fn aclFinalize() -> aclError; }}"));
        let (unexpected, stale) = judge(&compare(&ours, &theirs), KNOWN);
        assert!(unexpected.is_empty() && stale.is_empty(), "{unexpected:?} {stale:?}");
        let (_, stale) = judge(&compare(&decls(OURS), &decls(THEIRS)), KNOWN);
        assert_eq!(stale, vec!["fn aclFinalize"]);
    }
}
