//! The config format: parsing, sizes, validation errors naming tenant and field.

use gpupool_quota::{Config, ConfigError, MIB, Mode, Placement, Preemption, Priority, TenantId, hash_token};
use std::time::Duration;

fn err(text: &str) -> String {
    match Config::from_toml_str(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn field_err(text: &str) -> (String, String, String) {
    match Config::from_toml_str(text) {
        Err(ConfigError::Field { tenant, field, message }) => (tenant, field, message),
        other => panic!("expected a field error, got {other:?}"),
    }
}

/// The complete example in README.md parses, and means what the README says.
#[test]
fn readme_example_is_valid() {
    let readme = include_str!("../README.md");
    let start = readme.find("```toml\n").expect("README has a toml block") + "```toml\n".len();
    let end = start + readme[start..].find("```").unwrap();
    let cfg = Config::from_toml_str(&readme[start..end]).unwrap();
    let names: Vec<&str> = cfg.tenants().iter().map(|t| t.id.as_str()).collect();
    assert_eq!(names, ["training", "inference", "ci"]);
    let training = &cfg.tenants()[0];
    assert_eq!(training.memory.for_device(0), Some(40 << 30));
    assert_eq!(training.memory.for_device(5), Some(40 << 30));
    assert_eq!((training.compute, training.mode, training.priority), (60, Mode::Share, Priority::Normal));
    let inference = &cfg.tenants()[1];
    assert_eq!(inference.memory.for_device(0), Some(4 << 30));
    assert_eq!(inference.memory.for_device(1), Some(1536 * MIB));
    assert_eq!(inference.memory.for_device(2), Some(0), "unlisted device gets nothing");
    assert_eq!(inference.priority, Priority::High);
    let ci = &cfg.tenants()[2];
    assert_eq!((training.pinned, inference.pinned), (8 << 30, 4 << 30), "pinned: set, and the default");
    assert_eq!(ci.memory.for_device(0), Some(2 << 30));
    assert_eq!(ci.memory.for_device(3), Some(512 * MIB), "`*` covers unlisted devices");
    assert_eq!(cfg.default_tenant().memory.for_device(0), Some(1 << 30));
    assert_eq!(cfg.default_tenant().compute, 10);
    assert_eq!((cfg.placement, training.devices, inference.devices), (Some(Placement::Spread), Some(4), None));
    let p = cfg.preemption;
    assert_eq!((p.min_resident, p.resident_factor), (Duration::from_secs(2), 10));
    assert_eq!((p.max_move, p.drain_timeout), (Duration::from_secs(30), Duration::from_secs(2)));
}

#[test]
fn preemption_keys_have_defaults_and_bad_values_are_refused() {
    let d = Config::from_toml_str("").unwrap().preemption;
    assert_eq!(d, Preemption::default());
    assert_eq!((d.min_resident, d.resident_factor), (Duration::from_millis(500), 10));
    assert_eq!((d.max_move, d.drain_timeout), (Duration::from_secs(30), Duration::from_secs(2)));
    let p = Config::from_toml_str("[preemption]\nmin_resident_ms = 0\nresident_factor = 0\nmax_move_ms = 250\n")
        .unwrap()
        .preemption;
    assert_eq!((p.min_resident, p.resident_factor, p.max_move), (Duration::ZERO, 0, Duration::from_millis(250)));
    assert_eq!(p.drain_timeout, d.drain_timeout, "an unset key keeps its default");
    for (text, field) in [
        ("[preemption]\nmax_move_ms = 0\n", "preemption.max_move_ms"),
        ("[preemption]\ndrain_timeout_ms = -5\n", "preemption.drain_timeout_ms"),
        ("[preemption]\nmin_resident_ms = 86400001\n", "preemption.min_resident_ms"),
        ("[preemption]\nresident_factor = 1001\n", "preemption.resident_factor"),
    ] {
        let (_, f, message) = field_err(text);
        assert_eq!(f, field, "{message}");
    }
    assert!(err("[preemption]\nmin_resident = 5\n").contains("unknown field"), "unknown keys are errors");
}

#[test]
fn restore_wait_parses_and_bad_values_are_refused() {
    assert_eq!(Config::from_toml_str("restore_wait_s = 2.5\n").unwrap().restore_wait_ms, Some(2500));
    assert_eq!(Config::from_toml_str("").unwrap().restore_wait_ms, None);
    for bad in ["-1", "1e9", "nan"] {
        let e = err(&format!("restore_wait_s = {bad}\n"));
        assert!(e.contains("restore_wait_s") && e.contains("seconds from 0 to 86400"), "{bad}: {e}");
    }
}

#[test]
fn devices_and_placement_parse_and_bad_values_are_refused() {
    let cfg = Config::from_toml_str("placement = \"binpack\"\n[default]\ndevices = 2\n").unwrap();
    assert_eq!((cfg.placement, cfg.default_tenant().devices), (Some(Placement::Binpack), Some(2)));
    assert_eq!(Config::from_toml_str("").unwrap().placement, None);
    let (tenant, field, message) = field_err("[[tenant]]\nname = \"a\"\ndevices = 0\n");
    assert_eq!((tenant.as_str(), field.as_str()), ("a", "devices"), "{message}");
    assert!(err("placement = \"random\"\n").contains("placement"));
    assert_eq!("spread".parse::<Placement>(), Ok(Placement::Spread));
    assert!("fill".parse::<Placement>().is_err());
}

#[test]
fn sizes_and_defaults() {
    let cfg = Config::from_toml_str(
        r#"
        [[tenant]]
        name = "a"
        memory = 1048576
        [[tenant]]
        name = "b"
        memory = "80GiB"
        [[tenant]]
        name = "c"
        "#,
    )
    .unwrap();
    let t = cfg.tenants();
    assert_eq!(t[0].memory.for_device(0), Some(MIB));
    assert_eq!(t[1].memory.for_device(9), Some(80 << 30));
    assert_eq!(t[2].memory.for_device(0), None, "no memory field = unlimited");
    assert_eq!((t[2].compute, t[2].mode, t[2].priority), (100, Mode::Limit, Priority::Normal));
    // No [default]: unlimited.
    assert_eq!(cfg.default_tenant().id, TenantId::new("default"));
    assert_eq!(cfg.default_tenant().memory.for_device(0), None);
    // An empty file is a valid config.
    assert!(Config::from_toml_str("").unwrap().tenants().is_empty());
}

#[test]
fn memory_not_whole_mib_is_refused_naming_the_field() {
    let (t, f, m) = field_err("[[tenant]]\nname = \"a\"\nmemory = \"4GB\"\n");
    assert_eq!((t.as_str(), f.as_str()), ("a", "memory"));
    assert!(m.contains("whole number of MiB"), "{m}");
    let (t, f, _) = field_err("[[tenant]]\nname = \"b\"\nmemory = { 0 = \"1GiB\", 1 = 1000 }\n");
    assert_eq!((t.as_str(), f.as_str()), ("b", "memory.1"));
    let (t, f, _) = field_err("[default]\nmemory = \"1536KiB\"\n");
    assert_eq!((t.as_str(), f.as_str()), ("default", "memory"));
    let e = err("[[tenant]]\nname = \"a\"\nmemory = \"4GB\"\n");
    assert!(e.contains("tenant `a`") && e.contains("field `memory`"), "{e}");
}

#[test]
fn bad_values_name_tenant_and_field() {
    let cases = [
        ("[[tenant]]\nname = \"a\"\ncompute = 0\n", "a", "compute"),
        ("[[tenant]]\nname = \"a\"\ncompute = 101\n", "a", "compute"),
        ("[default]\ncompute = -3\n", "default", "compute"),
        ("[[tenant]]\nname = \"a\"\nmemory = \"lots\"\n", "a", "memory"),
        ("[[tenant]]\nname = \"a\"\nmemory = -1\n", "a", "memory"),
        ("[[tenant]]\nname = \"a\"\nmemory = { gpu0 = \"1GiB\" }\n", "a", "memory.gpu0"),
        ("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"abc\"\n", "a", "token_sha256"),
        ("[[tenant]]\nname = \"\"\n", "#1", "name"),
        ("[[tenant]]\nname = \"default\"\n", "default", "name"),
        ("[[tenant]]\nname = \"a\"\n[[tenant]]\nname = \"a\"\n", "a", "name"),
        ("[[tenant]]\nname = \"a\"\nuids = [1]\n[[tenant]]\nname = \"b\"\nuids = [1]\n", "b", "uids"),
        ("[[tenant]]\nname = \"a\"\ngids = [7, 7]\n", "a", "gids"),
    ];
    for (text, tenant, field) in cases {
        let (t, f, m) = field_err(text);
        assert_eq!((t.as_str(), f.as_str()), (tenant, field), "{text} -> {m}");
    }
    let (_, _, m) = field_err("[[tenant]]\nname = \"a\"\nuids = [1]\n[[tenant]]\nname = \"b\"\nuids = [1]\n");
    assert!(m.contains("tenant `a`"), "{m}");
    let h = hash_token("t");
    let text = format!(
        "[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\n[[tenant]]\nname = \"b\"\ntoken_sha256 = [\"{h}\"]\n"
    );
    assert_eq!(field_err(&text).1, "token_sha256");
}

#[test]
fn unknown_fields_and_wrong_types_are_errors() {
    for text in [
        "[[tenant]]\nname = \"a\"\nmemroy = \"1GiB\"\n",
        "[default]\nuids = [1]\n",
        "[defaults]\ncompute = 5\n",
        "tenants = []\n",
        "[[tenant]]\nname = \"a\"\nmode = \"hard\"\n",
        "[[tenant]]\nname = \"a\"\npriority = \"urgent\"\n",
        "[[tenant]]\nname = \"a\"\nuids = [-1]\n",
        "[[tenant]]\nuids = [1]\n",
    ] {
        assert!(matches!(Config::from_toml_str(text), Err(ConfigError::Toml(_))), "{text}");
    }
    let e = err("[[tenant]]\nname = \"a\"\nmemroy = \"1GiB\"\n");
    assert!(e.contains("memroy"), "{e}");
}

#[test]
fn tokens_are_sha256_hex() {
    assert_eq!(hash_token("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let upper = hash_token("abc").to_uppercase();
    let cfg = Config::from_toml_str(&format!("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{upper}\"\n")).unwrap();
    assert_eq!(cfg.resolve(1, 1, Some("abc")), TenantId::new("a"));
}

#[test]
fn from_table_for_a_shared_file() {
    let mut table: toml::Table =
        toml::from_str("[daemon]\nlisten = \"unix:///tmp/s\"\n[[tenant]]\nname = \"a\"\nmemory = \"1GiB\"\n").unwrap();
    table.remove("daemon");
    let cfg = Config::from_toml_table(table).unwrap();
    assert_eq!(cfg.tenants()[0].memory.for_device(0), Some(1 << 30));
}

/// `pinned`: one size for all the tenant's sessions together, whole MiB, 4 GiB when absent (the
/// default tenant and a config-less daemon included).
#[test]
fn pinned_quota_parses_defaults_and_refuses_bad_sizes() {
    let cfg = Config::from_toml_str(
        "[[tenant]]\nname = \"a\"\nuids = [1]\npinned = \"2GiB\"\n[[tenant]]\nname = \"b\"\nuids = [2]\npinned = 0\n\
         [[tenant]]\nname = \"c\"\nuids = [3]\n[default]\npinned = \"1536MiB\"\n",
    )
    .unwrap();
    let pinned: Vec<u64> = cfg.tenants().iter().map(|t| t.pinned).collect();
    assert_eq!(pinned, [2 << 30, 0, gpupool_quota::DEFAULT_PINNED]);
    assert_eq!(gpupool_quota::DEFAULT_PINNED, 4 << 30);
    assert_eq!(cfg.default_tenant().pinned, 1536 * MIB);
    assert_eq!(Config::unrestricted().default_tenant().pinned, 4 << 30);
    assert_eq!(Config::from_toml_str("").unwrap().default_tenant().pinned, 4 << 30);

    let (tenant, field, message) = field_err("[[tenant]]\nname = \"a\"\npinned = \"4GB\"\n");
    assert_eq!((tenant.as_str(), field.as_str()), ("a", "pinned"));
    assert!(message.contains("not a whole number of MiB"), "{message}");
    let (tenant, field, message) = field_err("[default]\npinned = -1\n");
    assert_eq!((tenant.as_str(), field.as_str()), ("default", "pinned"));
    assert!(message.contains("negative"), "{message}");
    let (_, field, message) = field_err("[default]\npinned = \"lots\"\n");
    assert_eq!(field, "pinned");
    assert!(message.contains("not a size"), "{message}");
    // Host memory is one figure, not per device.
    let e = err("[default]\npinned = { 0 = \"1GiB\" }\n");
    assert!(e.contains("pinned"), "{e}");
}

#[test]
fn npu_keys_are_placed_after_the_gpus() {
    let text = "[[tenant]]\nname = \"a\"\nuids = [1]\nmemory = { 0 = \"2GiB\", npu0 = \"8GiB\", npu1 = \"1536MiB\", \"*\" = \"1GiB\" }\n";
    let mut c = Config::from_toml_str(text).unwrap();
    let q = |c: &Config, d: u32| c.tenant(&TenantId::new("a")).unwrap().memory.for_device(d);
    // Before the daemon places them, npu keys name no device: every device but 0 gets "*".
    assert_eq!(
        (q(&c, 0), q(&c, 1), q(&c, 2), q(&c, 3)),
        (Some(2048 * MIB), Some(1024 * MIB), Some(1024 * MIB), Some(1024 * MIB))
    );
    // Two GPUs precede the NPUs: npu0 is device 2, npu1 device 3.
    c.place_npus(2);
    assert_eq!(
        (q(&c, 0), q(&c, 1), q(&c, 2), q(&c, 3)),
        (Some(2048 * MIB), Some(1024 * MIB), Some(8192 * MIB), Some(1536 * MIB))
    );
    let (tenant, field, message) = field_err("[[tenant]]\nname = \"b\"\nuids = [2]\nmemory = { npux = \"1GiB\" }\n");
    assert_eq!((tenant.as_str(), field.as_str()), ("b", "memory.npux"));
    assert!(message.contains("npu0"), "{message}");
}

/// Quotas may sum to more than a device holds (the config knows no device sizes; memory
/// preemption lends a lower-priority tenant's memory to a higher one), and `preemptible`
/// defaults to true, may be set per tenant and in `[default]`, and must be a boolean.
#[test]
fn oversubscribed_quotas_load_and_preemptible_defaults_to_true() {
    let c = Config::from_toml_str(
        "[default]\npreemptible = false\n\
         [[tenant]]\nname = \"batch\"\nuids = [1]\nmemory = \"80GiB\"\npriority = \"low\"\n\
         [[tenant]]\nname = \"keep\"\nuids = [2]\nmemory = \"80GiB\"\npriority = \"low\"\npreemptible = false\n\
         [[tenant]]\nname = \"infer\"\nuids = [3]\nmemory = \"80GiB\"\npriority = \"high\"\n",
    )
    .unwrap();
    let spec = |n: &str| c.tenant(&TenantId::new(n)).unwrap();
    assert!(spec("batch").preemptible);
    assert!(!spec("keep").preemptible);
    assert_eq!(spec("infer").memory.for_device(0), Some(80 << 30));
    assert!(!c.default_tenant().preemptible);
    assert!(err("[[tenant]]\nname = \"a\"\npreemptible = \"no\"\n").contains("preemptible"));
}

/// `checkpoint = "60s"` with `checkpoint_dir` (README.md, "Checkpoints"): periods in ms, s, m
/// or h of at least a second, an absolute directory, both or neither.
#[test]
fn periodic_checkpoints_need_a_period_and_an_absolute_dir() {
    let c = Config::from_toml_str(
        "[[tenant]]\nname = \"train\"\nuids = [1]\ncheckpoint = \"60s\"\ncheckpoint_dir = \"/var/lib/gpupool/ckpt\"\n\
         [[tenant]]\nname = \"quick\"\nuids = [2]\ncheckpoint = \"1500ms\"\ncheckpoint_dir = \"/c\"\n",
    )
    .unwrap();
    let p = c.tenant(&TenantId::new("train")).unwrap().checkpoint.clone().unwrap();
    assert_eq!((p.every, p.dir), (std::time::Duration::from_secs(60), "/var/lib/gpupool/ckpt".into()));
    let p = c.tenant(&TenantId::new("quick")).unwrap().checkpoint.clone().unwrap();
    assert_eq!(p.every, std::time::Duration::from_millis(1500));
    assert!(c.default_tenant().checkpoint.is_none());
    for (text, field, says) in [
        ("checkpoint = \"60s\"\n", "checkpoint_dir", "needs"),
        ("checkpoint_dir = \"/c\"\n", "checkpoint", "needs"),
        ("checkpoint = \"60s\"\ncheckpoint_dir = \"rel\"\n", "checkpoint_dir", "absolute"),
        ("checkpoint = \"500ms\"\ncheckpoint_dir = \"/c\"\n", "checkpoint", "at least 1s"),
        ("checkpoint = \"ten\"\ncheckpoint_dir = \"/c\"\n", "checkpoint", "not a period"),
        ("checkpoint = \"10d\"\ncheckpoint_dir = \"/c\"\n", "checkpoint", "not a period"),
    ] {
        let (tenant, f, message) = field_err(&format!("[[tenant]]\nname = \"t\"\nuids = [1]\n{text}"));
        assert_eq!((tenant.as_str(), f.as_str()), ("t", field), "{text}: {message}");
        assert!(message.contains(says), "{text}: {message}");
    }
}
