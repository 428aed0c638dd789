//! Tenant resolution and request narrowing.

use gpupool_quota::{
    Clamp, Clamped, ClientRequest, Config, LimitsError, MIB, TenantId, hash_token, request_from_hami_env,
};

fn config() -> Config {
    Config::from_toml_str(&format!(
        r#"
        [[tenant]]
        name = "by-token"
        token_sha256 = ["{}", "{}"]
        memory = "8GiB"
        [[tenant]]
        name = "by-uid"
        uids = [1000, 1001]
        memory = {{ 0 = "4GiB", 1 = "1536MiB" }}
        compute = 50
        [[tenant]]
        name = "by-gid"
        gids = [100]
        [default]
        memory = "1GiB"
        compute = 10
        "#,
        hash_token("secret-1"),
        hash_token("secret-2"),
    ))
    .unwrap()
}

#[test]
fn precedence_token_uid_gid_default() {
    let c = config();
    let id = TenantId::new;
    assert_eq!(c.resolve(1000, 100, Some("secret-2")), id("by-token"));
    assert_eq!(c.resolve(1000, 100, Some("wrong")), id("by-uid"), "unknown token falls through");
    assert_eq!(c.resolve(1000, 100, None), id("by-uid"));
    assert_eq!(c.resolve(5, 100, None), id("by-gid"));
    assert_eq!(c.resolve(5, 5, None), id("default"));
    assert_eq!(c.resolve(5, 5, Some("secret-1")), id("by-token"));
}

#[test]
fn no_request_gets_the_quota() {
    let c = config();
    let l = c.effective_limits(&TenantId::new("by-uid"), &ClientRequest::default()).unwrap();
    assert_eq!(l.memory.for_device(0), Some(4 << 30));
    assert_eq!(l.memory.for_device(1), Some(1536 * MIB));
    assert_eq!(l.memory.for_device(2), Some(0));
    assert_eq!(l.compute, 50);
    assert!(l.clamped.is_empty());
}

#[test]
fn narrower_request_narrows() {
    let c = config();
    let req = ClientRequest::default().with_memory("1536MiB").unwrap().with_compute(20).unwrap();
    let l = c.effective_limits(&TenantId::new("by-token"), &req).unwrap();
    assert_eq!(l.memory.for_device(0), Some(1536 * MIB));
    assert_eq!(l.memory.for_device(7), Some(1536 * MIB));
    assert_eq!(l.compute, 20);
    assert!(l.clamped.is_empty());
    // On an unlimited tenant, the request is the limit.
    let l = c.effective_limits(&TenantId::new("by-gid"), &req).unwrap();
    assert_eq!(l.memory.for_device(3), Some(1536 * MIB));
}

#[test]
fn wider_request_is_clamped_and_reported() {
    let c = config();
    let req = ClientRequest::default().with_memory("2GiB").unwrap().with_compute(80).unwrap();
    let l = c.effective_limits(&TenantId::new("by-uid"), &req).unwrap();
    assert_eq!(l.memory.for_device(0), Some(2 << 30), "narrower than 4GiB: granted");
    assert_eq!(l.memory.for_device(1), Some(1536 * MIB), "wider than 1536MiB: clamped");
    assert_eq!(l.memory.for_device(2), Some(0));
    assert_eq!(l.compute, 50);
    assert_eq!(
        l.clamped,
        vec![
            Clamp { what: Clamped::Memory { device: Some(1) }, requested: 2 << 30, granted: 1536 * MIB },
            Clamp { what: Clamped::Compute, requested: 80, granted: 50 },
        ]
    );
    assert_eq!(l.clamped[0].to_string(), "memory 2GiB requested on device 1, tenant quota is 1536MiB");
    // All-devices request above an all-devices quota.
    let l = c.effective_limits(&TenantId::new("default"), &req).unwrap();
    assert_eq!(l.memory.for_device(0), Some(1 << 30));
    assert_eq!(l.clamped[0], Clamp { what: Clamped::Memory { device: None }, requested: 2 << 30, granted: 1 << 30 });
}

#[test]
fn hami_request_narrows_per_device() {
    let c = config();
    let req = request_from_hami_env([
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"),
        ("CUDA_DEVICE_MEMORY_LIMIT_1", "2g"),
        ("CUDA_DEVICE_SM_LIMIT", "40"),
    ])
    .unwrap();
    let l = c.effective_limits(&TenantId::new("by-uid"), &req).unwrap();
    assert_eq!(l.memory.for_device(0), Some(3000 * MIB));
    assert_eq!(l.memory.for_device(1), Some(1536 * MIB));
    assert_eq!(l.compute, 40);
    assert_eq!(
        l.clamped,
        vec![Clamp { what: Clamped::Memory { device: Some(1) }, requested: 2 << 30, granted: 1536 * MIB }]
    );
}

#[test]
fn bad_requests() {
    let c = config();
    let mut req = ClientRequest::default();
    req.memory.devices.insert(0, MIB + 1);
    assert!(matches!(c.effective_limits(&TenantId::new("by-uid"), &req), Err(LimitsError::Memory { .. })));
    let req = ClientRequest { compute: Some(0), ..Default::default() };
    assert_eq!(c.effective_limits(&TenantId::new("by-uid"), &req), Err(LimitsError::Compute(0)));
    assert!(ClientRequest::default().with_compute(101).is_err());
    assert!(ClientRequest::default().with_memory("4GB").is_err());
    assert_eq!(
        c.effective_limits(&TenantId::new("nobody"), &ClientRequest::default()),
        Err(LimitsError::UnknownTenant(TenantId::new("nobody")))
    );
}
