//! Serving certificates: generation with rcgen (a CA and a serving certificate for the Service
//! DNS names, `localhost` and `127.0.0.1`), loading from a directory, the rustls server
//! configuration, and the renewal schedule. Storage in a Secret lives in [`crate::certs`].

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// File names in a certificate directory (the same keys as in the Secret).
pub const CERT_FILE: &str = "tls.crt";
/// Private key of the serving certificate.
pub const KEY_FILE: &str = "tls.key";
/// The CA certificate that kube-apiserver must trust (`caBundle`).
pub const CA_FILE: &str = "ca.crt";
/// The CA's private key (only when evictord generated the CA).
pub const CA_KEY_FILE: &str = "ca.key";

/// Errors of certificate handling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen refused the parameters.
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    File {
        action: &'static str,
        path: String,
        source: std::io::Error,
    },
    /// The PEM data is not a certificate or key rustls accepts.
    #[error("loading {what}: {message}")]
    Pem { what: &'static str, message: String },
    /// rustls refused the certificate and key.
    #[error("building the TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Crate-style result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A CA and a serving certificate, PEM-encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertBundle {
    /// The CA certificate (what clients trust).
    pub ca_pem: String,
    /// The CA private key, when evictord generated the CA (needed to renew).
    pub ca_key_pem: Option<String>,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
}

/// DNS names of the webhook Service (`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`)
/// plus `localhost` and `127.0.0.1`.
pub fn serving_names(service: Option<&str>, namespace: Option<&str>) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if let (Some(svc), Some(ns)) = (service, namespace) {
        names.extend([
            svc.to_string(),
            format!("{svc}.{ns}"),
            format!("{svc}.{ns}.svc"),
            format!("{svc}.{ns}.svc.cluster.local"),
        ]);
    }
    names
}

/// How far `notBefore` of a generated certificate lies before its issuance.
const BACKDATE_SECS: i64 = 3600;

fn validity_window(
    now: Timestamp,
    validity: Duration,
) -> (time::OffsetDateTime, time::OffsetDateTime) {
    // Back-date by an hour: a node whose clock is slightly behind must still accept the cert.
    let start = now.as_second() - BACKDATE_SECS;
    let end = now.as_second() + validity.as_secs() as i64;
    let to_odt = |s: i64| {
        time::OffsetDateTime::from_unix_timestamp(s).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
    };
    (to_odt(start), to_odt(end))
}

/// Generates a new CA and a serving certificate valid for `names` (DNS names and IP addresses).
///
/// # Errors
/// When rcgen rejects a name or fails to sign.
pub fn generate(names: &[String], validity: Duration, now: Timestamp) -> Result<CertBundle> {
    let (not_before, not_after) = validity_window(now, validity);
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params.distinguished_name.push(
        DnType::CommonName,
        format!("evictord-ca-{}", now.as_second()),
    );
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    // The CA outlives the serving certificate so that renewing the leaf keeps the caBundle.
    ca_params.not_before = not_before;
    ca_params.not_after = validity_window(now, validity * 3).1;
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key)?;
    let ca_key_pem = ca_key_pem(&ca);
    let leaf = issue_leaf(&ca, names, not_before, not_after)?;
    Ok(CertBundle {
        ca_pem: ca.pem(),
        ca_key_pem: Some(ca_key_pem),
        cert_pem: leaf.0,
        key_pem: leaf.1,
    })
}

fn ca_key_pem(ca: &CertifiedIssuer<'_, KeyPair>) -> String {
    ca.key().serialize_pem()
}

fn issue_leaf(
    ca: &rcgen::Issuer<'_, KeyPair>,
    names: &[String],
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        names
            .iter()
            .find(|n| n.contains('.'))
            .cloned()
            .unwrap_or_else(|| "evictord".into()),
    );
    params.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => Ok(SanType::DnsName(n.clone().try_into()?)),
        })
        .collect::<Result<_, rcgen::Error>>()?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Issues a fresh serving certificate from the bundle's CA (renewal keeps the CA, so the
/// `caBundle` kube-apiserver trusts stays valid). Without the CA key, a new CA is generated.
///
/// # Errors
/// When the CA cannot be parsed or signing fails.
pub fn renew(
    bundle: &CertBundle,
    names: &[String],
    validity: Duration,
    now: Timestamp,
) -> Result<CertBundle> {
    let Some(ca_key_pem) = &bundle.ca_key_pem else {
        return generate(names, validity, now);
    };
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let ca = rcgen::Issuer::from_ca_cert_pem(&bundle.ca_pem, ca_key)?;
    let ca_expiry = not_after(&bundle.ca_pem)?;
    let (not_before, mut leaf_not_after) = validity_window(now, validity);
    // A CA close to its own expiry is replaced altogether.
    if ca_expiry.as_second() < leaf_not_after.unix_timestamp() {
        return generate(names, validity, now);
    }
    leaf_not_after = leaf_not_after.min(
        time::OffsetDateTime::from_unix_timestamp(ca_expiry.as_second()).unwrap_or(leaf_not_after),
    );
    let (cert_pem, key_pem) = issue_leaf(&ca, names, not_before, leaf_not_after)?;
    Ok(CertBundle {
        ca_pem: bundle.ca_pem.clone(),
        ca_key_pem: bundle.ca_key_pem.clone(),
        cert_pem,
        key_pem,
    })
}

/// The `notAfter` of the first certificate in `pem`.
///
/// # Errors
/// When the PEM holds no parsable certificate.
pub fn not_after(pem: &str) -> Result<Timestamp> {
    validity_of(pem).map(|(_, end)| end)
}

/// `notBefore` and `notAfter` of the first certificate in `pem`.
///
/// # Errors
/// When the PEM holds no parsable certificate.
pub fn validity_of(pem: &str) -> Result<(Timestamp, Timestamp)> {
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|e| Error::Pem {
        what: "certificate",
        message: e.to_string(),
    })?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| Error::Pem {
        what: "certificate",
        message: e.to_string(),
    })?;
    let v = cert.validity();
    let ts = |t: i64| Timestamp::from_second(t).unwrap_or(Timestamp::UNIX_EPOCH);
    Ok((ts(v.not_before.timestamp()), ts(v.not_after.timestamp())))
}

/// When the serving certificate should be renewed: at two thirds of its validity, counted from
/// its issuance (`notBefore` plus the back-dating hour, when the certificate spans more than that),
/// so that short validities are renewed at two thirds too rather than at every check.
///
/// # Errors
/// When the certificate cannot be parsed.
pub fn renewal_time(bundle: &CertBundle) -> Result<Timestamp> {
    let (start, end) = validity_of(&bundle.cert_pem)?;
    let span = end.as_second() - start.as_second();
    let issued = if span > BACKDATE_SECS {
        start.as_second() + BACKDATE_SECS
    } else {
        start.as_second()
    };
    let validity = end.as_second() - issued;
    Ok(Timestamp::from_second(issued + validity * 2 / 3).unwrap_or(start))
}

/// Reads a bundle from a directory (`tls.crt`, `tls.key`, `ca.crt`, optional `ca.key`).
/// `Ok(None)` when any of the three required files is missing.
///
/// # Errors
/// When a present file cannot be read.
pub fn load_dir(dir: &Path) -> Result<Option<CertBundle>> {
    let read = |name: &str| -> Result<Option<String>> {
        let path = dir.join(name);
        match std::fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::File {
                action: "reading",
                path: path.display().to_string(),
                source: e,
            }),
        }
    };
    let (Some(cert_pem), Some(key_pem), Some(ca_pem)) =
        (read(CERT_FILE)?, read(KEY_FILE)?, read(CA_FILE)?)
    else {
        return Ok(None);
    };
    Ok(Some(CertBundle {
        ca_pem,
        ca_key_pem: read(CA_KEY_FILE)?,
        cert_pem,
        key_pem,
    }))
}

/// Writes a bundle into a directory; private keys are readable by the owner only.
///
/// # Errors
/// When the directory or a file cannot be written.
pub fn write_dir(dir: &Path, bundle: &CertBundle) -> Result<()> {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error + use<> {
        let path = path.display().to_string();
        move |source| Error::File {
            action,
            path,
            source,
        }
    }
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let mut files = vec![
        (CA_FILE, &bundle.ca_pem, false),
        (CERT_FILE, &bundle.cert_pem, false),
        (KEY_FILE, &bundle.key_pem, true),
    ];
    if let Some(k) = &bundle.ca_key_pem {
        files.push((CA_KEY_FILE, k, true));
    }
    for (name, content, private) in files {
        let path = dir.join(name);
        std::fs::write(&path, content).map_err(io("writing", &path))?;
        if private {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(io("chmod", &path))?;
        }
    }
    Ok(())
}

/// The rustls server configuration for a bundle (ring provider, HTTP/2 and HTTP/1.1 by ALPN).
///
/// No session resumption: no TLS 1.3 tickets are sent and no TLS 1.2 sessions are kept.
/// kube-apiserver, the only client of the webhook port, keeps no TLS session cache in its webhook
/// client, and it opens a new connection for every call beyond the 25 idle ones it keeps per
/// host, so the two tickets rustls sends by default were derived, stored and written on every
/// such handshake and never redeemed: about 12 µs, 5% of the server's CPU for a request on a new
/// connection (`benches/HISTORY.md`, 2026-11-25).
///
/// # Errors
/// When the certificate chain or key is malformed or they do not match.
pub fn server_config(bundle: &CertBundle) -> Result<Arc<ServerConfig>> {
    let certs = CertificateDer::pem_slice_iter(bundle.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Pem {
            what: "serving certificate",
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(Error::Pem {
            what: "serving certificate",
            message: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(bundle.key_pem.as_bytes()).map_err(|e| Error::Pem {
        what: "private key",
        message: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.send_tls13_tickets = 0;
    config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_load_renew() {
        let now = Timestamp::now();
        let names = serving_names(Some("evictord"), Some("ns"));
        let b = generate(&names, Duration::from_secs(3600), now).unwrap();
        assert!(server_config(&b).is_ok());
        let dir = tempfile::tempdir().unwrap();
        write_dir(dir.path(), &b).unwrap();
        assert_eq!(load_dir(dir.path()).unwrap(), Some(b.clone()));
        let (start, end) = validity_of(&b.cert_pem).unwrap();
        assert!(end.as_second() - start.as_second() == 3600 + 3600);
        let r = renew(&b, &names, Duration::from_secs(3600), now).unwrap();
        assert_eq!(r.ca_pem, b.ca_pem);
        assert_ne!(r.cert_pem, b.cert_pem);
        assert!(renewal_time(&b).unwrap() < end);
        assert_eq!(load_dir(&dir.path().join("missing")).unwrap(), None);
    }

    /// A client that keeps sessions (unlike kube-apiserver's) is offered none: the handshake
    /// sends no TLS 1.3 ticket. The default configuration, checked the same way, sends two.
    #[test]
    fn the_server_sends_no_session_tickets() {
        let b = generate(
            &serving_names(None, None),
            Duration::from_secs(3600),
            Timestamp::now(),
        )
        .unwrap();
        let ours = server_config(&b).unwrap();
        assert_eq!(tickets_received(&b, ours.clone()), 0);
        let mut default = (*ours).clone();
        default.send_tls13_tickets = 2;
        default.session_storage = rustls::server::ServerSessionMemoryCache::new(16);
        assert_eq!(tickets_received(&b, Arc::new(default)), 2);
    }

    /// Tickets a session-keeping client receives in one full handshake with `server`.
    fn tickets_received(bundle: &CertBundle, server: Arc<ServerConfig>) -> usize {
        use rustls::{ClientConfig, ClientConnection, ServerConnection};
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(bundle.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let store = Arc::new(TicketCounter::default());
        client.resumption = rustls::client::Resumption::store(store.clone());
        let name = "localhost".try_into().unwrap();
        let mut client = ClientConnection::new(Arc::new(client), name).unwrap();
        let mut server = ServerConnection::new(server).unwrap();
        // A handshake and the records after it, in at most a few flights each way.
        for _ in 0..5 {
            let mut flight = Vec::new();
            while client.wants_write() {
                client.write_tls(&mut flight).unwrap();
            }
            server.read_tls(&mut flight.as_slice()).unwrap();
            server.process_new_packets().unwrap();
            let mut flight = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut flight).unwrap();
            }
            client.read_tls(&mut flight.as_slice()).unwrap();
            client.process_new_packets().unwrap();
        }
        assert!(!client.is_handshaking() && !server.is_handshaking());
        store.tls13.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A client session store that only counts the TLS 1.3 tickets it is given.
    #[derive(Debug, Default)]
    struct TicketCounter {
        tls13: std::sync::atomic::AtomicUsize,
    }

    impl rustls::client::ClientSessionStore for TicketCounter {
        fn set_kx_hint(&self, _: rustls_pki_types::ServerName<'static>, _: rustls::NamedGroup) {}
        fn kx_hint(&self, _: &rustls_pki_types::ServerName<'_>) -> Option<rustls::NamedGroup> {
            None
        }
        fn set_tls12_session(
            &self,
            _: rustls_pki_types::ServerName<'static>,
            _: rustls::client::Tls12ClientSessionValue,
        ) {
        }
        fn tls12_session(
            &self,
            _: &rustls_pki_types::ServerName<'_>,
        ) -> Option<rustls::client::Tls12ClientSessionValue> {
            None
        }
        fn remove_tls12_session(&self, _: &rustls_pki_types::ServerName<'static>) {}
        fn insert_tls13_ticket(
            &self,
            _: rustls_pki_types::ServerName<'static>,
            _: rustls::client::Tls13ClientSessionValue,
        ) {
            self.tls13
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        fn take_tls13_ticket(
            &self,
            _: &rustls_pki_types::ServerName<'static>,
        ) -> Option<rustls::client::Tls13ClientSessionValue> {
            None
        }
    }

    #[test]
    fn renewal_at_two_thirds_of_the_validity_from_issuance() {
        let now = Timestamp::now();
        let names = serving_names(None, None);
        for secs in [9, 3 * 3600, 365 * 24 * 3600] {
            let b = generate(&names, Duration::from_secs(secs), now).unwrap();
            let at = renewal_time(&b).unwrap().as_second();
            let expected = now.as_second() + secs as i64 * 2 / 3;
            assert!(
                (at - expected).abs() <= 1,
                "validity {secs}s: renewal at {at}, expected {expected}"
            );
        }
    }
}
