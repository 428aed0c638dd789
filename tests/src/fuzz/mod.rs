//! A stateful driver-API fuzzer across tenants, for `tests/tests/fuzz.rs` and
//! `gpupool-bench fuzz`.
//!
//! Owns: the sequences ([`ops`]: random, valid-looking call sequences drawn from a seed by a
//! generator that models what is live), the executor that runs one in a tenant process and
//! prints every call's result ([`exec`]), the tenant program's command line ([`tenant_main`]),
//! and the harness that runs rounds of concurrent tenants through a `gpupool daemon` on the
//! simulator and checks each against the same sequence run on the simulator directly
//! ([`harness`]).
//!
//! The seeded generator is [`crate::churn::Rng`] (xorshift64): the same one the churn tests
//! use, enough for drawing ops, and a seed reproduces a sequence exactly on any machine.

pub mod exec;
pub mod harness;
pub mod ops;

use std::path::Path;
use std::process::ExitCode;

use crate::Driver;

/// The kernels every sequence loads: `fill32(p, v)`: `p[i] = v ^ i`, and
/// `addv(dst, src, v)`: `dst[i] = 3 * src[i] + v`, with `i` the global thread index.
pub const KERNELS_PTX: &str = "\
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill32(.param .u64 p, .param .u32 v)
{
\t.reg .b64 %rd<4>;
\t.reg .b32 %r<6>;
\tld.param.u64 %rd1, [p];
\tld.param.u32 %r1, [v];
\tcvta.to.global.u64 %rd2, %rd1;
\tmov.u32 %r2, %tid.x;
\tmov.u32 %r3, %ctaid.x;
\tmov.u32 %r4, %ntid.x;
\tmad.lo.s32 %r5, %r3, %r4, %r2;
\txor.b32 %r1, %r1, %r5;
\tmul.wide.u32 %rd3, %r5, 4;
\tadd.s64 %rd2, %rd2, %rd3;
\tst.global.u32 [%rd2], %r1;
\tret;
}
.visible .entry addv(.param .u64 dst, .param .u64 src, .param .u32 v)
{
\t.reg .b64 %rd<6>;
\t.reg .b32 %r<8>;
\tld.param.u64 %rd1, [dst];
\tld.param.u64 %rd2, [src];
\tld.param.u32 %r1, [v];
\tcvta.to.global.u64 %rd1, %rd1;
\tcvta.to.global.u64 %rd2, %rd2;
\tmov.u32 %r2, %tid.x;
\tmov.u32 %r3, %ctaid.x;
\tmov.u32 %r4, %ntid.x;
\tmad.lo.s32 %r5, %r3, %r4, %r2;
\tmul.wide.u32 %rd3, %r5, 4;
\tadd.s64 %rd4, %rd2, %rd3;
\tld.global.u32 %r6, [%rd4];
\tmul.lo.s32 %r7, %r6, 3;
\tadd.s32 %r7, %r7, %r1;
\tadd.s64 %rd5, %rd1, %rd3;
\tst.global.u32 [%rd5], %r7;
\tret;
}
\0";

/// The tenant program's usage.
pub const TENANT_USAGE: &str =
    "usage: TENANT --lib LIBCUDA --seed S --len N [--no-exit] | TENANT --lib LIBCUDA --watch --seed S";

/// The tenant program: `--lib LIBCUDA --seed S --len N [--no-exit] [--foreign ADDR]` runs
/// sequence S (the generator's `allow_exit` unless `--no-exit`; faulting kernels that target
/// another tenant write to ADDR) through the driver at LIBCUDA (`libcuda.so.1` under
/// `gpupool run` is the pool; a path to the simulator's is the simulator) and prints its
/// results; `--watch` instead keeps a canary in a context, prints `canary-at ADDR`, and for
/// each line on stdin reads it back and prints the result line, until stdin closes.
pub fn tenant_main(args: &[String]) -> ExitCode {
    let mut lib = None;
    let (mut seed, mut len, mut allow_exit, mut watch, mut foreign) = (None, 64usize, true, false, 0);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        let r: Result<(), String> = (|| {
            match a.as_str() {
                "--lib" => lib = Some(value()?.clone()),
                "--seed" => seed = Some(parse_u64(value()?)?),
                "--len" => len = parse_u64(value()?)? as usize,
                "--no-exit" => allow_exit = false,
                "--watch" => watch = true,
                "--foreign" => foreign = parse_u64(value()?)?,
                other => return Err(format!("unexpected argument {other:?}")),
            }
            Ok(())
        })();
        if let Err(e) = r {
            eprintln!("{e}\n{TENANT_USAGE}");
            return ExitCode::from(2);
        }
    }
    let (Some(lib), Some(seed)) = (lib, seed) else {
        eprintln!("{TENANT_USAGE}");
        return ExitCode::from(2);
    };
    let d = match Driver::load(Path::new(&lib)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("fuzz tenant: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut x = exec::Executor::new(&d, std::io::stdout()).with_foreign(foreign);
    if watch {
        x.start(seed);
        println!("canary-at {:#x}", x.canary_ptr());
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
            x.canary_intact(seed);
        }
        x.finish(seed);
    } else {
        x.run(&ops::generate(seed, len, allow_exit));
    }
    ExitCode::SUCCESS
}

/// A decimal or `0x` hexadecimal number.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?}: {e}"))
}
