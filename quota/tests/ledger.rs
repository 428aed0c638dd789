//! The memory ledger: reserve/commit/release, sessions, hot reload, snapshot.

use std::collections::BTreeMap;

use gpupool_quota::{ClientRequest, Config, Ledger, LimitsError, MIB, MemInfo, NotHeld, Scope, TenantId};

const GIB: u64 = 1 << 30;

fn cfg(a_memory: &str) -> Config {
    Config::from_toml_str(&format!(
        "[[tenant]]\nname = \"a\"\nuids = [1]\nmemory = {a_memory}\n[[tenant]]\nname = \"b\"\nuids = [2]\nmemory = \"1GiB\"\n[default]\nmemory = \"64MiB\"\n"
    ))
    .unwrap()
}

fn a() -> TenantId {
    TenantId::new("a")
}

#[test]
fn up_to_exactly_the_quota_then_one_mib_more_fails() {
    let ledger = Ledger::new(cfg("\"1536MiB\""));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s, 0, 1024 * MIB).unwrap().commit();
    ledger.reserve(&s, 0, 512 * MIB).unwrap().commit();
    assert_eq!(ledger.used(&a(), 0), 1536 * MIB);
    let e = ledger.reserve(&s, 0, MIB).unwrap_err();
    assert_eq!((e.requested, e.in_use, e.limit, e.scope), (MIB, 1536 * MIB, 1536 * MIB, Scope::Tenant));
    assert!(ledger.reserve(&s, 0, 1).is_err(), "exact to the byte");
    // Another device has its own quota.
    ledger.reserve(&s, 1, 1536 * MIB).unwrap().commit();
    assert_eq!(ledger.used(&a(), 0), 1536 * MIB, "a refusal changes nothing");
    ledger.release(&s, 0, 512 * MIB).unwrap();
    ledger.reserve(&s, 0, 512 * MIB).unwrap().commit();
}

#[test]
fn in_flight_reservations_count_and_cancel_gives_back() {
    let ledger = Ledger::new(cfg("\"1GiB\""));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    let r1 = ledger.reserve(&s, 0, 768 * MIB).unwrap();
    assert!(ledger.reserve(&s, 0, 512 * MIB).is_err(), "the in-flight 768 MiB counts");
    let snap = ledger.snapshot(1);
    let t = snap.tenants.iter().find(|t| t.tenant == a()).unwrap();
    assert_eq!((t.devices[0].used, t.devices[0].pending), (768 * MIB, 768 * MIB));
    r1.cancel();
    assert_eq!(ledger.used(&a(), 0), 0);
    {
        let _dropped = ledger.reserve(&s, 0, GIB).unwrap();
    }
    assert_eq!(ledger.used(&a(), 0), 0, "dropping a reservation cancels it");
    let r = ledger.reserve(&s, 0, GIB).unwrap();
    assert_eq!((r.device(), r.bytes()), (0, GIB));
    r.commit();
    assert_eq!(s.held(), BTreeMap::from([(0, GIB)]));
}

#[test]
fn sessions_share_the_tenant_quota_and_release_exactly_their_own() {
    let ledger = Ledger::new(cfg("\"1GiB\""));
    let s1 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    let s2 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    assert_ne!(s1.id(), s2.id());
    ledger.reserve(&s1, 0, 300 * MIB).unwrap().commit();
    ledger.reserve(&s1, 1, 5 * MIB).unwrap().commit();
    ledger.reserve(&s2, 0, 700 * MIB).unwrap().commit();
    let e = ledger.reserve(&s2, 0, 24 * MIB + 1).unwrap_err();
    assert_eq!(e.in_use, GIB - 24 * MIB);
    ledger.reserve(&s2, 0, 24 * MIB).unwrap().commit();
    ledger.release(&s1, 0, 100 * MIB).unwrap();
    assert_eq!(ledger.release_session(s1), BTreeMap::from([(0, 200 * MIB), (1, 5 * MIB)]));
    assert_eq!(ledger.used(&a(), 0), 724 * MIB, "what the other session holds");
    assert_eq!(ledger.used(&a(), 1), 0);
    drop(s2); // dropping releases too
    assert_eq!(ledger.used(&a(), 0), 0);
    // Other tenants are unaffected by all of that.
    let b = ledger.open_session(&TenantId::new("b"), &ClientRequest::default()).unwrap();
    ledger.reserve(&b, 0, GIB).unwrap().commit();
}

#[test]
fn release_of_more_than_held_changes_nothing() {
    let ledger = Ledger::new(cfg("\"1GiB\""));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s, 0, 10 * MIB).unwrap().commit();
    let e = ledger.release(&s, 0, 11 * MIB).unwrap_err();
    assert_eq!(e, NotHeld { session: s.id(), device: 0, bytes: 11 * MIB, held: 10 * MIB });
    assert!(ledger.release(&s, 3, 1).is_err());
    assert_eq!(ledger.used(&a(), 0), 10 * MIB);
    // Another session cannot release this session's bytes.
    let other = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    assert!(ledger.release(&other, 0, MIB).is_err());
}

#[test]
fn session_request_narrows_on_top_of_the_tenant_quota() {
    let ledger = Ledger::new(cfg("\"4GiB\""));
    let req = ClientRequest::default().with_memory("1536MiB").unwrap();
    let s = ledger.open_session(&a(), &req).unwrap();
    ledger.reserve(&s, 0, 1536 * MIB).unwrap().commit();
    let e = ledger.reserve(&s, 0, MIB).unwrap_err();
    assert_eq!((e.scope, e.limit), (Scope::Session, 1536 * MIB));
    // The tenant still has room for its other sessions.
    let s2 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s2, 0, 2560 * MIB).unwrap().commit();
    assert_eq!(ledger.reserve(&s2, 0, MIB).unwrap_err().scope, Scope::Tenant);
    // What the narrowed session sees as its device.
    ledger.release(&s, 0, 536 * MIB).unwrap();
    let info = ledger.mem_info(&s, 0, 80 * GIB, 70 * GIB);
    assert_eq!(info, MemInfo { total: 1536 * MIB, free: 536 * MIB }, "own request is the tighter bound");
    ledger.release(&s2, 0, 2560 * MIB).unwrap();
    assert_eq!(ledger.mem_info(&s, 0, 80 * GIB, 70 * GIB).free, 536 * MIB);
    assert_eq!(ledger.mem_info(&s2, 0, 80 * GIB, 70 * GIB), MemInfo { total: 4 * GIB, free: 3096 * MIB });
    assert_eq!(ledger.mem_info(&s2, 0, 2 * GIB, 100 * MIB), MemInfo { total: 2 * GIB, free: 100 * MIB });
}

#[test]
fn sessions_need_a_live_tenant_and_a_valid_request() {
    let ledger = Ledger::new(cfg("\"1GiB\""));
    assert!(matches!(
        ledger.open_session(&TenantId::new("zz"), &ClientRequest::default()),
        Err(LimitsError::UnknownTenant(_))
    ));
    let bad = ClientRequest { compute: Some(0), ..Default::default() };
    assert!(ledger.open_session(&a(), &bad).is_err());
    let d = ledger.open_session(&TenantId::new("default"), &ClientRequest::default()).unwrap();
    ledger.reserve(&d, 0, 64 * MIB).unwrap().commit();
    assert!(ledger.reserve(&d, 0, MIB).is_err());
}

#[test]
fn hot_reload_changes_quotas_at_once_and_frees_nothing() {
    let ledger = Ledger::new(cfg("\"2GiB\""));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s, 0, 1536 * MIB).unwrap().commit();
    // Lowered below use.
    ledger.apply(cfg("\"1GiB\""));
    assert_eq!(ledger.quota(&a(), 0), Some(GIB));
    assert_eq!(ledger.used(&a(), 0), 1536 * MIB, "nothing freed");
    assert_eq!(s.held(), BTreeMap::from([(0, 1536 * MIB)]));
    assert!(ledger.reserve(&s, 0, MIB).is_err());
    ledger.release(&s, 0, 512 * MIB).unwrap();
    assert!(ledger.reserve(&s, 0, MIB).is_err(), "exactly at the new quota");
    ledger.release(&s, 0, MIB).unwrap();
    ledger.reserve(&s, 0, MIB).unwrap().commit();
    // Raised: the live session gets the room at once.
    ledger.apply(cfg("\"8GiB\""));
    ledger.reserve(&s, 0, 7 * GIB).unwrap().commit();
    // Per-device form.
    ledger.apply(cfg("{ 1 = \"1MiB\" }"));
    assert_eq!((ledger.quota(&a(), 0), ledger.quota(&a(), 1)), (Some(0), Some(MIB)));
    assert!(ledger.reserve(&s, 0, 1).is_err());
    ledger.reserve(&s, 1, MIB).unwrap().commit();
    assert_eq!(ledger.used(&a(), 0), 8 * GIB);
}

#[test]
fn removed_tenant_keeps_its_memory_gets_nothing_more_then_disappears() {
    let ledger = Ledger::new(cfg("\"1GiB\""));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s, 0, 100 * MIB).unwrap().commit();
    ledger.apply(Config::from_toml_str("[[tenant]]\nname = \"b\"\n").unwrap());
    assert!(ledger.reserve(&s, 0, MIB).is_err());
    assert!(ledger.open_session(&a(), &ClientRequest::default()).is_err());
    let snap = ledger.snapshot(1);
    let t = snap.tenants.iter().find(|t| t.tenant == a()).unwrap();
    assert!(t.retired);
    assert_eq!((t.devices[0].used, t.devices[0].quota), (100 * MIB, Some(0)));
    assert_eq!(ledger.release_session(s), BTreeMap::from([(0, 100 * MIB)]));
    assert!(ledger.snapshot(1).tenants.iter().all(|t| t.tenant != a()));
    // It comes back with its new quota.
    ledger.apply(cfg("\"3MiB\""));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s, 0, 3 * MIB).unwrap().commit();
}

#[test]
fn snapshot_serializes_for_status_json() {
    let ledger = Ledger::new(cfg("{ 0 = \"4GiB\", 3 = \"1536MiB\" }"));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s, 0, 5 * MIB).unwrap().commit();
    let _inflight = ledger.reserve(&s, 3, MIB).unwrap();
    ledger.pin(&s, 3 * MIB).unwrap();
    let json = serde_json::to_value(ledger.snapshot(2)).unwrap();
    let expected = serde_json::json!({"tenants": [
        {"tenant": "a", "retired": false, "sessions": 1, "devices": [
            {"device": 0, "used": 5 * MIB, "pending": 0, "quota": 4 * GIB},
            {"device": 1, "used": 0, "pending": 0, "quota": 0},
            {"device": 3, "used": MIB, "pending": MIB, "quota": 1536 * MIB},
        ], "pinned": 3 * MIB, "pinned_quota": 4 * GIB},
        {"tenant": "b", "retired": false, "sessions": 0, "devices": [
            {"device": 0, "used": 0, "pending": 0, "quota": GIB},
            {"device": 1, "used": 0, "pending": 0, "quota": GIB},
        ], "pinned": 0, "pinned_quota": 4 * GIB},
        {"tenant": "default", "retired": false, "sessions": 0, "devices": [
            {"device": 0, "used": 0, "pending": 0, "quota": 64 * MIB},
            {"device": 1, "used": 0, "pending": 0, "quota": 64 * MIB},
        ], "pinned": 0, "pinned_quota": 4 * GIB},
    ]});
    assert_eq!(json, expected);
    let unlimited = Ledger::new(Config::unrestricted());
    let json = serde_json::to_value(unlimited.snapshot(1)).unwrap();
    assert_eq!(json["tenants"][0]["devices"][0]["quota"], serde_json::Value::Null);
}

fn pinned_cfg(a_pinned: &str) -> Config {
    Config::from_toml_str(&format!(
        "[[tenant]]\nname = \"a\"\nuids = [1]\npinned = \"{a_pinned}\"\n[[tenant]]\nname = \"b\"\nuids = [2]\npinned = \"1GiB\"\n"
    ))
    .unwrap()
}

fn pinned_of(ledger: &Ledger, tenant: &str) -> (u64, u64) {
    let snap = ledger.snapshot(1);
    let t = snap.tenants.iter().find(|t| t.tenant.as_str() == tenant).unwrap();
    (t.pinned, t.pinned_quota)
}

#[test]
fn pinned_bytes_up_to_exactly_the_quota_across_sessions_then_refused() {
    let ledger = Ledger::new(pinned_cfg("2GiB"));
    let s1 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    let s2 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.pin(&s1, GIB).unwrap();
    ledger.pin(&s2, GIB - 4096).unwrap();
    ledger.pin(&s2, 4096).unwrap();
    assert_eq!(pinned_of(&ledger, "a"), (2 * GIB, 2 * GIB));
    let e = ledger.pin(&s1, 1).unwrap_err();
    assert_eq!((e.tenant.as_str(), e.requested, e.in_use, e.limit), ("a", 1, 2 * GIB, 2 * GIB));
    assert!(e.to_string().contains("page-locked"), "{e}");
    assert_eq!(pinned_of(&ledger, "a"), (2 * GIB, 2 * GIB), "a refusal changes nothing");
    // Another tenant has its own quota.
    let b = ledger.open_session(&TenantId::new("b"), &ClientRequest::default()).unwrap();
    ledger.pin(&b, GIB).unwrap();
    assert!(ledger.pin(&b, 4096).is_err());
    // Pinned bytes are not device memory.
    assert_eq!(ledger.used(&a(), 0), 0);
    ledger.reserve(&s1, 0, GIB).unwrap().commit();

    // Unpinning gives it back; more than a session holds is refused and changes nothing.
    ledger.unpin(&s1, GIB).unwrap();
    assert_eq!(s1.pinned(), 0);
    let e = ledger.unpin(&s1, 1).unwrap_err();
    assert_eq!((e.bytes, e.held), (1, 0));
    ledger.pin(&s1, GIB).unwrap();
    // A session's end returns all of it, and only its own.
    assert_eq!(s2.pinned(), GIB);
    ledger.release_session(s2);
    assert_eq!(pinned_of(&ledger, "a"), (GIB, 2 * GIB));
    drop(s1);
    assert_eq!(pinned_of(&ledger, "a"), (0, 2 * GIB));
}

#[test]
fn pinned_quota_reloads_and_a_retired_tenant_pins_nothing_more() {
    let ledger = Ledger::new(pinned_cfg("2GiB"));
    let s = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.pin(&s, 1536 * MIB).unwrap();
    // Lowered below use: nothing is taken back, nothing more fits until use drops.
    ledger.apply(pinned_cfg("1GiB"));
    assert_eq!(pinned_of(&ledger, "a"), (1536 * MIB, GIB));
    assert!(ledger.pin(&s, MIB).is_err());
    ledger.unpin(&s, 1024 * MIB).unwrap();
    ledger.pin(&s, 512 * MIB).unwrap();
    assert!(ledger.pin(&s, 1).is_err());
    // Raised: fits at once.
    ledger.apply(pinned_cfg("3GiB"));
    ledger.pin(&s, 2 * GIB).unwrap();
    // Removed from the config: keeps what it holds, pins nothing more.
    ledger.apply(Config::from_toml_str("[[tenant]]\nname = \"b\"\nuids = [2]\n").unwrap());
    assert_eq!(pinned_of(&ledger, "a"), (3 * GIB, 0));
    assert!(ledger.pin(&s, 1).is_err());
    ledger.unpin(&s, GIB).unwrap();
    drop(s);
    assert!(ledger.snapshot(1).tenants.iter().all(|t| t.tenant != a()), "gone with its last session");
}

#[test]
fn a_transfer_moves_committed_bytes_between_sessions_of_one_tenant() {
    let ledger = Ledger::new(cfg("\"1GiB\""));
    let s1 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    let s2 = ledger.open_session(&a(), &ClientRequest::default()).unwrap();
    ledger.reserve(&s1, 0, 256 * MIB).unwrap().commit();
    ledger.transfer(&s1, s2.id(), 0, 192 * MIB).unwrap();
    assert_eq!((s1.held(), s2.held()), (BTreeMap::from([(0, 64 * MIB)]), BTreeMap::from([(0, 192 * MIB)])));
    assert_eq!(ledger.used(&a(), 0), 256 * MIB, "the tenant's use does not change");
    // More than it holds, or to a session of another tenant: refused, nothing changes.
    assert!(matches!(ledger.transfer(&s1, s2.id(), 0, 65 * MIB), Err(gpupool_quota::TransferError::NotHeld(_))));
    let other = ledger.open_session(&TenantId::new("b"), &ClientRequest::default()).unwrap();
    assert!(matches!(ledger.transfer(&s1, other.id(), 0, MIB), Err(gpupool_quota::TransferError::NotOpen(_))));
    assert_eq!(ledger.release_session(s1), BTreeMap::from([(0, 64 * MIB)]));
    assert_eq!(ledger.release_session(s2), BTreeMap::from([(0, 192 * MIB)]));
    assert_eq!(ledger.used(&a(), 0), 0);
}
