//! Who a process is to kube-apiserver, read from its own credentials: the subject of a service
//! account token (the JWT kube-apiserver mounts into pods). Pure: callers read the token.
//!
//! evictord needs its own user name for rule S7 (its writes of a registered interceptor's
//! entry are its own), and the SDK's runner the service account it registers an interceptor
//! with. The token's signature is not checked: the process reads its own credentials, which
//! kube-apiserver checks on every call anyway.

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, general_purpose};

/// Where kube-apiserver's service account token is mounted in a pod.
pub const SERVICE_ACCOUNT_TOKEN_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// URL-safe base64 that takes JWT segments with or without padding.
const JWT_SEGMENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The `sub` claim of a JSON Web Token (for a service account token:
/// `system:serviceaccount:NAMESPACE:NAME`, the user name kube-apiserver gives it). `None` for
/// anything that is not a JWT with a string `sub`.
pub fn token_subject(token: &str) -> Option<String> {
    let payload = token.trim().split('.').nth(1)?;
    let bytes = JWT_SEGMENT
        .decode(payload)
        .or_else(|_| general_purpose::STANDARD.decode(payload))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("sub")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        let enc = |s: &str| general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.c2ln", enc(r#"{"alg":"RS256"}"#), enc(claims))
    }

    #[test]
    fn subject_of_a_service_account_token() {
        let token = jwt(
            r#"{"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:evictord:evictord"}"#,
        );
        assert_eq!(
            token_subject(&format!("{token}\n")).as_deref(),
            Some("system:serviceaccount:evictord:evictord")
        );
    }

    #[test]
    fn not_a_token() {
        assert_eq!(token_subject("opaque-static-token"), None);
        assert_eq!(token_subject("a.%%%.c"), None);
        assert_eq!(token_subject(&jwt(r#"{"iss":"x"}"#)), None);
        assert_eq!(token_subject(&jwt(r#"{"sub":7}"#)), None);
    }
}
