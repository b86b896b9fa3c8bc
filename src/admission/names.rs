//! Validation of requester and interceptor names: fully qualified domain names (SPEC 1) and the
//! `*.k8s.io` allowlist.

use crate::api::{BUILTIN_K8S_IO_ALLOWLIST, IMPERATIVE_INTERCEPTOR};
use crate::selector::is_dns_label;

/// Checks that `name` is a fully qualified domain name: at most 253 characters, at least two
/// dot-separated labels, each 1–63 characters of `[a-z0-9-]`, not starting or ending with `-`.
///
/// # Errors
/// A sentence saying what is wrong with the name.
pub fn validate_fqdn(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err(format!("{name:?} is longer than 253 characters"));
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 {
        return Err(format!(
            "{name:?} must be a fully qualified domain name with at least two labels (e.g. example.com)"
        ));
    }
    if let Some(bad) = labels.iter().find(|l| !is_dns_label(l)) {
        return Err(format!(
            "{name:?} is not a fully qualified domain name: label {bad:?} must be 1-63 characters of [a-z0-9-], not starting or ending with '-'"
        ));
    }
    Ok(())
}

/// True when the name is `k8s.io` or ends in `.k8s.io`.
pub fn is_k8s_io(name: &str) -> bool {
    name == "k8s.io" || name.ends_with(".k8s.io")
}

/// True when a `*.k8s.io` name may be used as an interceptor: in the built-in allowlist or the
/// operator's extra list. `imperative-eviction.k8s.io` is allowed only where `allow_imperative`.
pub fn k8s_io_interceptor_allowed(name: &str, extra: &[String], allow_imperative: bool) -> bool {
    if name == IMPERATIVE_INTERCEPTOR {
        return allow_imperative;
    }
    !is_k8s_io(name) || BUILTIN_K8S_IO_ALLOWLIST.contains(&name) || extra.iter().any(|e| e == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fqdn_rows() {
        for ok in [
            "a.b",
            "node-maintenance.evictord.dev",
            "x1.y2.z3",
            &format!("{}.io", "a".repeat(63)),
        ] {
            assert!(validate_fqdn(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "single",
            "a..b",
            "-a.b",
            "a-.b",
            "A.b",
            "a_b.c",
            &format!("{}.io", "a".repeat(64)),
            &"a.".repeat(127),
        ] {
            assert!(validate_fqdn(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allowlist_rows() {
        assert!(k8s_io_interceptor_allowed("example.com", &[], false));
        assert!(k8s_io_interceptor_allowed("kubelet.k8s.io", &[], false));
        assert!(!k8s_io_interceptor_allowed("foo.k8s.io", &[], false));
        assert!(!k8s_io_interceptor_allowed("k8s.io", &[], false));
        assert!(k8s_io_interceptor_allowed(
            "foo.k8s.io",
            &["foo.k8s.io".into()],
            false
        ));
        assert!(!k8s_io_interceptor_allowed(
            IMPERATIVE_INTERCEPTOR,
            &[],
            false
        ));
        assert!(k8s_io_interceptor_allowed(
            IMPERATIVE_INTERCEPTOR,
            &[],
            true
        ));
    }
}
