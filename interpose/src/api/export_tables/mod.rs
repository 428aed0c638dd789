//! `cuGetExportTable`: the driver's private tables that NVIDIA's CUDA runtime asks for by
//! UUID (a statically linked `libcudart_static.a` in every default-flag nvcc program and in
//! CuPy's wheels, NVIDIA's `libcudart.so.12` / `.13` loaded by path), served over this
//! library's own forwarded driver API, so every module, context and allocation they create
//! goes through the daemon under the tenant's quota.
//!
//! [`tables`] declares every table once: its name, UUID and length, then one line per slot
//! with its signature and implementation (see [`export_tables!`]). What each slot does, and
//! how we know, is in `interpose/EXPORT_TABLES.md`.
//!
//! Set `GPUPOOL_TRACE_EXPORT_TABLES=1` to log every table request and every slot call with
//! its arguments and result (one stderr line each): the evidence the document is built on.

mod cudart;
mod integrity;
mod storage;
pub mod tables;
mod tools;

pub(crate) use storage::context_reset;

use crate::util::R;
use gpupool_shim::cuda::{CUresult, CUuuid};
use std::os::raw::c_void;

/// One served table: its name, UUID and its slots (slot 0 holds the table's size in bytes).
pub struct Table {
    pub name: &'static str,
    pub uuid: [u8; 16],
    pub slots: &'static [Slot],
}

/// A slot's value as the caller reads it: a function pointer or, for slot 0, a size.
#[repr(transparent)]
pub struct Slot(pub *const c_void);

// SAFETY: slots are immutable after compilation (function addresses and sizes), so
// sharing them between threads is sharing constants.
unsafe impl Sync for Slot {}

/// A slot's return type: what the slot answers when its body panicked.
pub trait SlotReturn: Copy + std::fmt::Debug {
    const ON_PANIC: Self;
}
impl SlotReturn for CUresult {
    const ON_PANIC: Self = CUresult::CUDA_ERROR_UNKNOWN;
}
impl SlotReturn for () {
    const ON_PANIC: Self = ();
}
impl SlotReturn for u32 {
    const ON_PANIC: Self = 0;
}

/// What an implementation returns, turned into the slot's C return value.
pub trait IntoSlot<T> {
    fn into_slot(self) -> T;
}
impl<T: SlotReturn> IntoSlot<T> for T {
    fn into_slot(self) -> T {
        self
    }
}
impl IntoSlot<CUresult> for R<()> {
    fn into_slot(self) -> CUresult {
        self.err().unwrap_or(CUresult::CUDA_SUCCESS)
    }
}

/// Whether `GPUPOOL_TRACE_EXPORT_TABLES` asks for every request and slot call to be logged.
pub fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("GPUPOOL_TRACE_EXPORT_TABLES").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// One trace line (always on stderr: tracing was asked for).
pub fn trace(msg: std::fmt::Arguments) {
    if tracing() {
        crate::util::warn(&format!("export-table {msg}"));
    }
}

/// A slot's body under the panic guard: a panic never crosses `extern "C"`.
pub fn run_slot<T: SlotReturn>(table: &str, slot: usize, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            crate::util::log(&format!("internal panic in export table {table} slot {slot}"));
            T::ON_PANIC
        }
    }
}

/// A slot whose meaning is not established: it does nothing, logs its table, index and
/// raw argument registers, and answers CUDA_ERROR_NOT_SUPPORTED (the documented "not
/// available" of every table function that returns a CUresult). `T` indexes
/// [`tables::TABLES`], `S` is the slot.
pub extern "C" fn unknown_slot<const T: usize, const S: usize>(
    a0: usize,
    a1: usize,
    a2: usize,
    a3: usize,
    a4: usize,
    a5: usize,
) -> CUresult {
    let name = tables::TABLES.get(T).map_or("?", |t| t.name);
    crate::util::warn(&format!(
        "export table {name} slot {S} called (args {a0:#x} {a1:#x} {a2:#x} {a3:#x} {a4:#x} {a5:#x}): its meaning \
         is not established, so it is not implemented; CUDA_ERROR_NOT_SUPPORTED"
    ));
    CUresult::CUDA_ERROR_NOT_SUPPORTED
}

fn hex(uuid: &[u8; 16]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

/// `cuGetExportTable(table, id)`: a served table's address, else NULL and
/// CUDA_ERROR_NOT_SUPPORTED with a log line naming the UUID (the runtime treats some
/// tables as optional and fails cleanly without the others).
pub(crate) fn get(table: *mut *const c_void, uuid: CUuuid) -> R<()> {
    let id: [u8; 16] = uuid.bytes.map(|b| b as u8);
    let served = tables::TABLES.iter().find(|t| t.uuid == id);
    match served {
        Some(t) => {
            trace(format_args!("request {} ({}) -> {} slots", hex(&id), t.name, t.slots.len()));
            crate::util::out(table, t.slots.as_ptr().cast::<c_void>())
        }
        None => {
            if !table.is_null() {
                crate::util::out(table, std::ptr::null())?;
            }
            let msg = format!(
                "cuGetExportTable({}): a driver-private table this library does not serve (see \
                 interpose/EXPORT_TABLES.md); CUDA_ERROR_NOT_SUPPORTED",
                hex(&id)
            );
            trace(format_args!("{msg}"));
            crate::util::log(&msg);
            Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
        }
    }
}

/// Declares the served tables, one line per slot:
///
/// ```text
/// NAME = "uuid" [LEN] {
///     0 => size;                                   // the table's size in bytes (LEN * 8)
///     N => name(arg: Ty, ...) -> Ret = path::impl; // a function slot and its implementation
///     N => unknown;                                // called by no runtime we observed
/// }
/// ```
///
/// Every slot from 0 to LEN - 1 must be listed, in order (checked at compile time). A
/// function slot becomes an `extern "C"` shell that traces its arguments and result when
/// asked, runs the implementation under the panic guard and converts its result
/// ([`IntoSlot`]); an unknown slot is [`unknown_slot`].
macro_rules! export_tables {
    ($(
        $(#[doc = $doc:literal])*
        $table:ident = $uuid:literal [$len:literal] {
            $( $slot:literal => $what:ident $( ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $imp:path )? ; )*
        }
    )*) => {
        #[allow(non_camel_case_types, non_upper_case_globals, dead_code)]
        enum TableIndex { $($table,)* }

        $(
            $(#[doc = $doc])*
            #[allow(non_snake_case)]
            pub mod $table {
                #[allow(unused_imports)]
                use super::*;
                $( $crate::api::export_tables::export_tables!(@shell $table $slot $what $( ( $($arg : $ty),* ) -> $ret = $imp )?); )*

                pub static SLOTS: [$crate::api::export_tables::Slot; $len] = [
                    $( $crate::api::export_tables::export_tables!(@value $table $len $slot $what), )*
                ];
                const _: () = {
                    let order = [$($slot),*];
                    let mut i = 0;
                    while i < order.len() {
                        assert!(order[i] == i, concat!(stringify!($table), ": slots must be listed 0, 1, 2, ... in order"));
                        i += 1;
                    }
                };
            }
        )*

        /// Every served table.
        pub static TABLES: &[$crate::api::export_tables::Table] = &[$(
            $crate::api::export_tables::Table {
                name: stringify!($table),
                uuid: $crate::api::export_tables::tables::uuid_bytes($uuid),
                slots: &$table::SLOTS,
            },
        )*];
    };

    (@value $table:ident $len:literal $slot:literal size) => {
        $crate::api::export_tables::Slot(std::ptr::without_provenance($len * std::mem::size_of::<usize>()))
    };
    (@value $table:ident $len:literal $slot:literal unknown) => {
        $crate::api::export_tables::Slot(
            $crate::api::export_tables::unknown_slot::<{ super::TableIndex::$table as usize }, $slot> as *const ()
                as *const std::os::raw::c_void,
        )
    };
    (@value $table:ident $len:literal $slot:literal $name:ident) => {
        $crate::api::export_tables::Slot($name as *const () as *const std::os::raw::c_void)
    };

    (@shell $table:ident $slot:literal size) => {};
    (@shell $table:ident $slot:literal unknown) => {};
    (@shell $table:ident $slot:literal $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty = $imp:path) => {
        #[allow(clippy::missing_safety_doc)]
        pub extern "C" fn $name($($arg: $ty),*) -> $ret {
            let traced = $crate::api::export_tables::tracing();
            let args = if traced {
                let parts: Vec<String> = vec![$(format!(concat!(stringify!($arg), "={:?}"), $arg)),*];
                parts.join(", ")
            } else {
                String::new()
            };
            let result: $ret = $crate::api::export_tables::run_slot(stringify!($table), $slot, || {
                $crate::api::export_tables::IntoSlot::<$ret>::into_slot($imp($($arg),*))
            });
            if traced {
                $crate::api::export_tables::trace(format_args!(
                    "{}[{}] {}({}) -> {:?}", stringify!($table), $slot, stringify!($name), args, result
                ));
            }
            result
        }
    };
}
pub(crate) use export_tables;
