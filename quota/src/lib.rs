//! gpupool's quota policy, as pure logic the daemon calls: no sockets, no files, no vendor calls.
//!
//! What it owns:
//! - the quota config format (TOML text in, a validated [`Config`] out; see `README.md`): tenants, how
//!   clients match them (uid, gid, token hash), per-device memory quotas in 1 MiB steps, the page-locked
//!   host memory quota, compute percent, mode and priority ([`config`], [`sizes`]);
//! - which tenant a client belongs to, and the limits its session gets once its own request (from
//!   `gpupool run` or HAMi's variables) has narrowed them ([`resolve`], [`hami`]);
//! - the compute scheduler's policy per device ([`compute`]): which tenant may dispatch its next kernel,
//!   credit and virtual time from measured kernel time, priority, the achieved-share history;
//! - the device-memory [`Ledger`]: bytes per tenant per device, reserved before the backend allocates,
//!   zero overshoot under concurrency, per-session release, hot reload, and the snapshot behind
//!   `gpupool status --json` ([`ledger`]); and beside it each tenant's page-locked host bytes against
//!   its `pinned` quota.
//!
//! What it must not touch: the vendor libraries and backends, the transport, the filesystem (the daemon
//! reads the config file and passes the text), signals, environment variables (the caller passes them),
//! and the clock (the daemon passes the time, so the scheduler's policy is tested on a model device).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod compute;
pub mod config;
pub mod hami;
pub mod ledger;
pub mod resolve;
pub mod sizes;

pub use compute::{ComputeUsage, Decision, DeviceScheduler, Policy, Tuning};
pub use config::{
    Config, ConfigError, DEFAULT_PINNED, MemoryQuota, Mode, Placement, Preemption, Priority, TenantId, TenantSpec,
    hash_token,
};
pub use hami::{HamiError, request_from_hami_env};
pub use ledger::{
    DeviceUsage, Ledger, LedgerSnapshot, MemInfo, NotHeld, NotPinned, OverQuota, PinnedOverQuota, Reservation, Scope,
    Session, SessionId, TenantUsage, TransferError,
};
pub use resolve::{Clamp, Clamped, ClientRequest, Limits, LimitsError};
pub use sizes::{Bytes, MIB, SizeError, parse_size};
