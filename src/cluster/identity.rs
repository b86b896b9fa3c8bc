//! evictord's own user name, as kube-apiserver will put it in the `userInfo` of the admission
//! reviews of evictord's own writes (rule S7 lets evictord write every interceptor entry). Read
//! from the client configuration, first match wins:
//!
//! 1. the impersonated user (kubeconfig `as:`);
//! 2. the subject of a service account token (in-cluster: `system:serviceaccount:NS:NAME`);
//! 3. the common name of the client certificate (kube-apiserver's x509 authenticator uses it as
//!    the user name).
//!
//! Anything else (an exec plugin, OIDC, a static token) cannot be read locally: `--own-user`
//! names the user then.

use base64::Engine;
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use secrecy::ExposeSecret;

use crate::api::identity::token_subject;

/// The user name of the configuration `kubeconfig` points to (or the inferred one: in-cluster,
/// `$KUBECONFIG`, `~/.kube/config`). `None` when it cannot be told.
pub async fn own_user(kubeconfig: Option<&std::path::Path>) -> Option<String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).ok()?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .ok()?
        }
        None => kube::Config::infer().await.ok()?,
    };
    user_of(&config.auth_info)
}

/// The user name `auth` authenticates as, when it can be told locally.
pub fn user_of(auth: &AuthInfo) -> Option<String> {
    if let Some(user) = auth.impersonate.as_ref().filter(|u| !u.is_empty()) {
        return Some(user.clone());
    }
    let token = match (&auth.token, &auth.token_file) {
        (Some(t), _) => Some(t.expose_secret().to_string()),
        (None, Some(file)) => std::fs::read_to_string(file).ok(),
        (None, None) => None,
    };
    if let Some(sub) = token.as_deref().and_then(token_subject) {
        return Some(sub);
    }
    let pem = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()?,
        (None, Some(file)) => std::fs::read(file).ok()?,
        (None, None) => return None,
    };
    certificate_common_name(&pem)
}

/// The common name of the first certificate in `pem`.
pub fn certificate_common_name(pem: &[u8]) -> Option<String> {
    let der = CertificateDer::from_pem_slice(pem).ok()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(cn: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.distinguished_name.push(
            rcgen::DnType::OrganizationName,
            "system:masters".to_string(),
        );
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn client_certificate_common_name() {
        let pem = certificate("admin");
        assert_eq!(
            certificate_common_name(pem.as_bytes()).as_deref(),
            Some("admin")
        );
        let auth = AuthInfo {
            client_certificate_data: Some(base64::engine::general_purpose::STANDARD.encode(&pem)),
            ..AuthInfo::default()
        };
        assert_eq!(user_of(&auth).as_deref(), Some("admin"));
    }

    #[test]
    fn impersonation_wins() {
        let auth = AuthInfo {
            impersonate: Some("system:serviceaccount:evictord:evictord".into()),
            client_certificate_data: Some(
                base64::engine::general_purpose::STANDARD.encode(certificate("admin")),
            ),
            ..AuthInfo::default()
        };
        assert_eq!(
            user_of(&auth).as_deref(),
            Some("system:serviceaccount:evictord:evictord")
        );
    }

    #[test]
    fn service_account_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let enc = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let token = format!(
            "{}.{}.sig",
            enc(r#"{"alg":"RS256"}"#),
            enc(r#"{"sub":"system:serviceaccount:ops:evictord"}"#)
        );
        std::fs::write(&file, token).unwrap();
        let auth = AuthInfo {
            token_file: Some(file.display().to_string()),
            ..AuthInfo::default()
        };
        assert_eq!(
            user_of(&auth).as_deref(),
            Some("system:serviceaccount:ops:evictord")
        );
    }

    #[test]
    fn unknown_without_credentials_it_can_read() {
        assert_eq!(user_of(&AuthInfo::default()), None);
        let auth = AuthInfo {
            token: Some("opaque".to_string().into()),
            ..AuthInfo::default()
        };
        assert_eq!(user_of(&auth), None);
    }
}
