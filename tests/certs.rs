//! Certificates of the running server: rotation from `--cert-dir` (same CA, new CA, and the
//! renewal evictord does itself at two thirds of the validity) served without a restart while
//! TLS handshakes keep succeeding; and the Secret path, where two replicas started at once
//! converge on one CA (create-only Secret), patch it into `caBundle`, and follow a rotated Secret.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use evictord::tls::{self, CertBundle};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use support::Evictord;
use support::evictord::SpawnOptions;
use support::wait::until;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

const T: Duration = Duration::from_secs(60);

fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("PEM certificate")
        .to_vec()
}

fn connector(cas: &[&str]) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for ca in cas {
        for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
            roots.add(cert.expect("CA")).expect("root");
        }
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_root_certificates(roots)
            .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// One verified TLS handshake and an HTTP/1.1 request on 127.0.0.1:`port`; returns the served
/// leaf certificate (DER) once the server has answered with an HTTP status line.
async fn handshake(connector: &TlsConnector, port: u16, name: &str) -> Result<Vec<u8>, String> {
    let io = async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        let server_name = ServerName::try_from(name.to_string()).expect("server name");
        let mut tls = connector.connect(server_name, tcp).await?;
        let leaf = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .ok_or_else(|| std::io::Error::other("no peer certificate"))?;
        tls.write_all(
            format!("GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut head = [0u8; 12];
        tls.read_exact(&mut head).await?;
        if !head.starts_with(b"HTTP/1.1 ") {
            return Err(std::io::Error::other(format!(
                "not an HTTP answer: {:?}",
                String::from_utf8_lossy(&head)
            )));
        }
        Ok::<_, std::io::Error>(leaf)
    };
    match tokio::time::timeout(Duration::from_secs(5), io).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err("handshake timed out".into()),
    }
}

/// Handshakes in a loop (trusting `cas`) until dropped; counts successes and records failures.
struct Prober {
    ok: Arc<AtomicUsize>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    fn start(port: u16, cas: &[&str], name: &str) -> Prober {
        let connector = connector(cas);
        let (ok, failures, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(std::sync::Mutex::new(Vec::new())),
            Arc::new(AtomicBool::new(false)),
        );
        let (o, f, s, name) = (ok.clone(), failures.clone(), stop.clone(), name.to_string());
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                match handshake(&connector, port, &name).await {
                    Ok(_) => {
                        o.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => f.lock().unwrap().push(e),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Prober {
            ok,
            failures,
            stop,
            task,
        }
    }

    /// Stops and asserts that every handshake succeeded; returns how many there were.
    async fn finish(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let failures = self.failures.lock().unwrap().clone();
        assert!(failures.is_empty(), "failed handshakes: {failures:?}");
        self.ok.load(Ordering::Relaxed)
    }
}

async fn wait_served(port: u16, cas: &[&str], name: &str, expected: &[u8], what: &str) {
    let connector = connector(cas);
    until(T, what, || async {
        let leaf = handshake(&connector, port, name).await.ok()?;
        (leaf == expected).then_some(())
    })
    .await;
}

#[tokio::test]
async fn rotated_files_are_served_without_a_restart() {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let mut e = Evictord::start(c, &["--controllers=none", "--cert-check-interval=1s"]).await;
    let pid = e.pid().unwrap();
    let dir = e.cert_dir.clone();
    let first = tls::load_dir(&dir).unwrap().expect("generated bundle");
    let names = tls::serving_names(None, None);
    let served = handshake(&connector(&[&first.ca_pem]), e.webhook_port, "localhost")
        .await
        .expect("handshake with the generated CA");
    assert_eq!(served, der(&first.cert_pem));

    // Same CA, new serving certificate.
    let renewed = tls::renew(
        &first,
        &names,
        Duration::from_secs(3600),
        jiff::Timestamp::now(),
    )
    .unwrap();
    assert_eq!(renewed.ca_pem, first.ca_pem);
    let prober = Prober::start(e.webhook_port, &[&first.ca_pem], "localhost");
    tls::write_dir(&dir, &renewed).unwrap();
    wait_served(
        e.webhook_port,
        &[&first.ca_pem],
        "localhost",
        &der(&renewed.cert_pem),
        "the renewed certificate to be served",
    )
    .await;
    assert!(prober.finish().await > 0);

    // A new CA: clients that trust both keep working through the switch.
    let fresh = tls::generate(&names, Duration::from_secs(3600), jiff::Timestamp::now()).unwrap();
    let prober = Prober::start(e.webhook_port, &[&first.ca_pem, &fresh.ca_pem], "127.0.0.1");
    tls::write_dir(&dir, &fresh).unwrap();
    wait_served(
        e.webhook_port,
        &[&fresh.ca_pem],
        "127.0.0.1",
        &der(&fresh.cert_pem),
        "the certificate of the new CA to be served",
    )
    .await;
    assert!(prober.finish().await > 0);

    assert!(e.running(), "evictord exited:\n{}", e.logs());
    assert_eq!(e.pid(), Some(pid), "no restart");
    assert!(
        e.logs().matches("serving the new certificate").count() >= 2,
        "{}",
        e.logs()
    );
}

/// evictord renews its own certificate at two thirds of `--cert-validity` and serves it at once.
#[tokio::test]
async fn short_lived_certificates_are_renewed_before_expiry() {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let mut e = Evictord::start(
        c,
        &[
            "--controllers=none",
            "--cert-check-interval=1s",
            "--cert-validity=9s",
        ],
    )
    .await;
    let first = tls::load_dir(&e.cert_dir)
        .unwrap()
        .expect("generated bundle");
    let prober = Prober::start(e.webhook_port, &[&first.ca_pem], "localhost");
    let connector = connector(&[&first.ca_pem]);
    let (port, cert) = (e.webhook_port, der(&first.cert_pem));
    until(T, "a renewed certificate to be served", || {
        let (connector, cert) = (&connector, &cert);
        async move {
            let leaf = handshake(connector, port, "localhost").await.ok()?;
            (&leaf != cert).then_some(())
        }
    })
    .await;
    let renewed = tls::load_dir(&e.cert_dir).unwrap().unwrap();
    assert_eq!(renewed.ca_pem, first.ca_pem, "renewal keeps the CA");
    assert!(prober.finish().await > 0);
    assert!(e.running(), "evictord exited:\n{}", e.logs());
    assert!(e.logs().contains("renewed the serving certificate"));
    // Renewed at two thirds, not at every check: only a few renewals within a few seconds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let renewals = e.logs().matches("renewed the serving certificate").count();
    assert!(
        renewals <= 3,
        "{renewals} renewals of a 9s certificate:\n{}",
        e.logs()
    );
}

fn ca_bundles(
    v: &ValidatingWebhookConfiguration,
    m: &MutatingWebhookConfiguration,
) -> Vec<Option<ByteString>> {
    v.webhooks
        .iter()
        .flatten()
        .map(|w| w.client_config.ca_bundle.clone())
        .chain(
            m.webhooks
                .iter()
                .flatten()
                .map(|w| w.client_config.ca_bundle.clone()),
        )
        .collect()
}

async fn wait_ca_bundle(client: &Client, name: &str, ca: &str) {
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mapi: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    // After a CA change the bundle holds the new CA first and the previous one after it, so
    // that replicas still serving the old certificate stay trusted until they reload.
    until(T, "caBundle patched with the Secret's CA", || async {
        let (v, m) = (vapi.get(name).await.ok()?, mapi.get(name).await.ok()?);
        let all = ca_bundles(&v, &m);
        let current =
            |b: &Option<ByteString>| b.as_ref().is_some_and(|b| b.0.starts_with(ca.as_bytes()));
        (!all.is_empty() && all.iter().all(current)).then_some(())
    })
    .await;
}

fn bundle_of(secret: &Secret) -> CertBundle {
    let data = secret.data.as_ref().expect("data");
    let get = |k: &str| String::from_utf8(data.get(k).expect(k).0.clone()).unwrap();
    CertBundle {
        ca_pem: get("ca.crt"),
        ca_key_pem: data
            .get("ca.key")
            .map(|b| String::from_utf8(b.0.clone()).unwrap()),
        cert_pem: get("tls.crt"),
        key_pem: get("tls.key"),
    }
}

#[tokio::test]
async fn replicas_started_at_once_converge_on_one_secret() {
    let c = support::cluster().await;
    support::evictord::install_crds(c).await;
    let client = c.client().await;
    let ns = c.namespace("certs-secret").await;
    let config_name = format!("{ns}-evictord");
    let svc_name = format!("evictord.{ns}.svc");
    let port_a = support::control_plane::free_port();
    // Registered by URL with a placeholder CA that evictord must replace.
    Evictord::register_webhooks_at(c, &config_name, port_a, &c.dir.join("ca.crt")).await;

    let service_namespace = format!("--service-namespace={ns}");
    let webhook_config = format!("--webhook-config-name={config_name}");
    let args = [
        "--controllers=none",
        "--tls-secret=evictord-tls",
        "--service-name=evictord",
        &service_namespace,
        &webhook_config,
        "--cert-check-interval=1s",
    ];
    let mut a = Evictord::spawn(
        c,
        &args,
        SpawnOptions {
            webhook_port: Some(port_a),
            ..Default::default()
        },
    );
    let mut b = Evictord::spawn(c, &args, SpawnOptions::default());
    a.ready().await;
    b.ready().await;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let stored = bundle_of(&secrets.get("evictord-tls").await.unwrap());
    for e in [&a, &b] {
        let leaf = handshake(&connector(&[&stored.ca_pem]), e.webhook_port, &svc_name)
            .await
            .unwrap_or_else(|err| panic!("handshake with the Secret's CA: {err}\n{}", e.logs()));
        assert_eq!(leaf, der(&stored.cert_pem), "both serve the Secret's copy");
    }
    let generated = [&a, &b]
        .iter()
        .map(|e| {
            e.logs()
                .matches("generated certificates and stored them in the Secret")
                .count()
        })
        .sum::<usize>();
    assert_eq!(generated, 1, "exactly one replica created the Secret");
    wait_ca_bundle(&client, &config_name, &stored.ca_pem).await;

    // A rotated Secret (same CA) is served by both without a restart.
    let (pid_a, pid_b) = (a.pid(), b.pid());
    let names = tls::serving_names(Some("evictord"), Some(&ns));
    let renewed = tls::renew(
        &stored,
        &names,
        Duration::from_secs(3600),
        jiff::Timestamp::now(),
    )
    .unwrap();
    replace_secret(&secrets, &renewed).await;
    for e in [&a, &b] {
        wait_served(
            e.webhook_port,
            &[&stored.ca_pem],
            &svc_name,
            &der(&renewed.cert_pem),
            "the rotated Secret to be served",
        )
        .await;
    }

    // A new CA in the Secret: served, and patched into caBundle.
    let fresh = tls::generate(&names, Duration::from_secs(3600), jiff::Timestamp::now()).unwrap();
    replace_secret(&secrets, &fresh).await;
    for e in [&a, &b] {
        wait_served(
            e.webhook_port,
            &[&fresh.ca_pem],
            &svc_name,
            &der(&fresh.cert_pem),
            "the new CA's certificate to be served",
        )
        .await;
    }
    wait_ca_bundle(&client, &config_name, &fresh.ca_pem).await;
    assert!(a.running() && b.running());
    assert_eq!((a.pid(), b.pid()), (pid_a, pid_b), "no restart");

    for e in [&mut a, &mut b] {
        let status = e.stop().unwrap();
        assert!(status.success(), "exit {status}:\n{}", e.logs());
    }
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(&config_name, &Default::default())
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(&config_name, &Default::default())
        .await;
    c.delete_namespace(&ns).await;
}

async fn replace_secret(api: &Api<Secret>, bundle: &CertBundle) {
    let mut s = api.get("evictord-tls").await.unwrap();
    let mut data = std::collections::BTreeMap::new();
    for (k, v) in [
        ("ca.crt", Some(&bundle.ca_pem)),
        ("ca.key", bundle.ca_key_pem.as_ref()),
        ("tls.crt", Some(&bundle.cert_pem)),
        ("tls.key", Some(&bundle.key_pem)),
    ] {
        if let Some(v) = v {
            data.insert(k.to_string(), ByteString(v.clone().into_bytes()));
        }
    }
    s.data = Some(data);
    s.metadata.managed_fields = None;
    api.replace("evictord-tls", &PostParams::default(), &s)
        .await
        .expect("replacing the Secret");
}
