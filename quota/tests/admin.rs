//! `admin_token_sha256`: a token that reads every tenant's status and names no tenant.

use gpupool_quota::{Config, ConfigError, TenantId, hash_token};

fn tenant(name: &str, token: &str) -> String {
    format!("[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\n", hash_token(token))
}

#[test]
fn the_admin_token_is_recognised_and_names_no_tenant() {
    let text = format!("admin_token_sha256 = \"{}\"\n{}", hash_token("root-token"), tenant("a", "a-token"));
    let cfg = Config::from_toml_str(&text).unwrap();
    assert!(cfg.is_admin_token("root-token"));
    assert!(!cfg.is_admin_token("a-token"), "a tenant's token is not the admin's");
    assert!(!cfg.is_admin_token("root-token "), "the exact token only");
    assert_eq!(cfg.resolve_token("root-token"), None, "it opens no session as any tenant");
    assert_eq!(cfg.resolve_token("a-token"), Some(TenantId::new("a")));
    // A list, as token_sha256 takes one.
    let list = format!("admin_token_sha256 = [\"{}\", \"{}\"]\n", hash_token("x"), hash_token("y"));
    let cfg = Config::from_toml_str(&list).unwrap();
    assert!(cfg.is_admin_token("x") && cfg.is_admin_token("y") && !cfg.is_admin_token("z"));
    // None configured: no token is the admin's.
    assert!(!Config::unrestricted().is_admin_token(""));
    assert!(!Config::from_toml_str(&tenant("a", "a-token")).unwrap().is_admin_token("a-token"));
}

/// The example in README.md: its admin token is sha256("admin-secret").
#[test]
fn readme_example_admin_token() {
    let readme = include_str!("../README.md");
    let start = readme.find("```toml\n").expect("README has a toml block") + "```toml\n".len();
    let end = start + readme[start..].find("```").unwrap();
    let cfg = Config::from_toml_str(&readme[start..end]).unwrap();
    assert!(cfg.is_admin_token("admin-secret"));
    assert!(!cfg.is_admin_token("secret"), "the inference tenant's token is not the admin's");
}

#[test]
fn an_admin_token_that_is_also_a_tenants_or_not_a_digest_is_refused() {
    let text = format!("admin_token_sha256 = \"{}\"\n{}", hash_token("shared"), tenant("a", "shared"));
    match Config::from_toml_str(&text) {
        Err(ConfigError::Field { tenant, field, message }) => {
            assert_eq!((tenant.as_str(), field.as_str()), ("a", "token_sha256"));
            assert!(message.contains("admin_token_sha256"), "{message}");
        }
        other => panic!("expected a field error, got {other:?}"),
    }
    match Config::from_toml_str("admin_token_sha256 = \"abc\"\n") {
        Err(ConfigError::Field { field, message, .. }) => {
            assert_eq!(field, "admin_token_sha256");
            assert!(message.contains("not 64 hex digits"), "{message}");
        }
        other => panic!("expected a field error, got {other:?}"),
    }
}
