//! Where the serving certificates come from and how they stay fresh: a directory (local runs)
//! or a Secret (in the cluster, created once so that every replica converges on the same CA),
//! `caBundle` patched into evictord's own webhook configurations, renewal at two thirds of the
//! validity and reload into the running server without a restart.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::cli::ServeArgs;
use crate::tls::{self, CA_FILE, CA_KEY_FILE, CERT_FILE, CertBundle, KEY_FILE};

/// Where the certificates live.
enum Store {
    Dir(PathBuf),
    Secret { api: Box<Api<Secret>>, name: String },
}

/// The certificates of the running server and where they come from.
pub struct TlsSource {
    store: Store,
    bundle: CertBundle,
    names: Vec<String>,
    validity: std::time::Duration,
    check_interval: std::time::Duration,
    ca_patch: Option<(Client, String)>,
    /// A changed directory bundle seen once and not yet served (see [`refresh`]).
    pending: Option<CertBundle>,
}

impl TlsSource {
    /// The rustls configuration of the current bundle.
    ///
    /// # Errors
    /// When the bundle is malformed.
    pub fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        Ok(tls::server_config(&self.bundle)?)
    }
}

/// Label on the Secret evictord created itself. Only such a Secret is renewed: a Secret the
/// user brought (even one holding `ca.key`) is theirs to rotate, and the chart grants evictord
/// read-only access to it.
const GENERATED_LABEL: &str = "evictord.dev/generated";

/// The bundle a certificate Secret holds (`ca.crt`, `tls.crt`, `tls.key`, and `ca.key` only in a
/// Secret evictord generated); `None` when one of the first three is missing or not UTF-8.
pub fn bundle_from_secret(secret: &Secret) -> Option<CertBundle> {
    let generated = secret
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(GENERATED_LABEL).map(String::as_str) == Some("true"));
    let data = secret.data.as_ref()?;
    let get = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Some(CertBundle {
        ca_pem: get(CA_FILE)?,
        ca_key_pem: get(CA_KEY_FILE).filter(|_| generated),
        cert_pem: get(CERT_FILE)?,
        key_pem: get(KEY_FILE)?,
    })
}

fn secret_data(bundle: &CertBundle) -> BTreeMap<String, ByteString> {
    let mut data = BTreeMap::from([
        (
            CA_FILE.to_string(),
            ByteString(bundle.ca_pem.clone().into_bytes()),
        ),
        (
            CERT_FILE.to_string(),
            ByteString(bundle.cert_pem.clone().into_bytes()),
        ),
        (
            KEY_FILE.to_string(),
            ByteString(bundle.key_pem.clone().into_bytes()),
        ),
    ]);
    if let Some(k) = &bundle.ca_key_pem {
        data.insert(CA_KEY_FILE.to_string(), ByteString(k.clone().into_bytes()));
    }
    data
}

/// Loads or creates the certificates as the flags say, and patches `caBundle`.
///
/// # Errors
/// When the Secret or directory cannot be read or written, or generation fails.
pub async fn obtain(args: &ServeArgs, client: Option<&Client>) -> anyhow::Result<TlsSource> {
    let names = tls::serving_names(
        args.service_name.as_deref(),
        args.service_namespace.as_deref(),
    );
    let (store, bundle) = match (&args.tls_secret, client) {
        (Some(name), Some(client)) => {
            let ns = args
                .service_namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let bundle = secret_bundle_or_create(&api, name, &names, args.cert_validity).await?;
            (
                Store::Secret {
                    api: Box::new(api),
                    name: name.clone(),
                },
                bundle,
            )
        }
        _ => {
            let dir = args.cert_dir.clone();
            let bundle = match tls::load_dir(&dir)? {
                Some(b) => {
                    info!(dir = %dir.display(), "loaded certificates");
                    b
                }
                None => {
                    let b = tls::generate(&names, args.cert_validity, Timestamp::now())?;
                    tls::write_dir(&dir, &b)?;
                    info!(dir = %dir.display(), names = ?names, "generated a CA and a serving certificate");
                    b
                }
            };
            (Store::Dir(dir), bundle)
        }
    };
    let ca_patch = match (client, &args.webhook_config_name, args.patch_ca_bundle) {
        (Some(c), Some(name), true) => Some((c.clone(), name.clone())),
        _ => None,
    };
    let source = TlsSource {
        store,
        bundle,
        names,
        validity: args.cert_validity,
        check_interval: args.cert_check_interval,
        ca_patch,
        pending: None,
    };
    patch_ca_bundle(&source, None).await;
    Ok(source)
}

async fn secret_bundle_or_create(
    api: &Api<Secret>,
    name: &str,
    names: &[String],
    validity: std::time::Duration,
) -> anyhow::Result<CertBundle> {
    if let Some(s) = api
        .get_opt(name)
        .await
        .context("reading the certificate Secret")?
    {
        if let Some(b) = bundle_from_secret(&s) {
            info!(secret = name, "loaded certificates from the Secret");
            return Ok(b);
        }
        anyhow::bail!("Secret {name} exists but lacks ca.crt, tls.crt or tls.key");
    }
    let bundle = tls::generate(names, validity, Timestamp::now())?;
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                GENERATED_LABEL.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(secret_data(&bundle)),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            info!(
                secret = name,
                "generated certificates and stored them in the Secret"
            );
            Ok(bundle)
        }
        // Another replica won the race: use its copy so that every replica serves one CA.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = api
                .get(name)
                .await
                .context("reading the certificate Secret after a lost race")?;
            bundle_from_secret(&s).context("the Secret created by another replica is incomplete")
        }
        Err(e) => Err(e).context("creating the certificate Secret"),
    }
}

/// Writes the CA into the `caBundle` of every webhook of evictord's own configurations.
///
/// `previous_ca` is kept in the bundle beside the current CA: during a CA change, replicas that
/// have not yet picked the new certificate up keep serving the old one, and kube-apiserver must
/// trust both until they have.
async fn patch_ca_bundle(source: &TlsSource, previous_ca: Option<&str>) {
    let Some((client, name)) = &source.ca_patch else {
        return;
    };
    let mut pem = source.bundle.ca_pem.clone();
    if let Some(previous) = previous_ca.filter(|p| *p != pem) {
        if !pem.ends_with('\n') {
            pem.push('\n');
        }
        pem.push_str(previous);
    }
    let ca = ByteString(pem.into_bytes());
    let vapi: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mapi: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let result: anyhow::Result<()> = async {
        if let Some(mut v) = vapi.get_opt(name).await? {
            let count = v.webhooks.as_ref().map_or(0, Vec::len);
            for w in v.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = Some(ca.clone());
            }
            v.metadata.managed_fields = None;
            vapi.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"webhooks": v.webhooks})),
            )
            .await?;
            info!(configuration = %name, webhooks = count, "patched caBundle (validating)");
        }
        if let Some(mut m) = mapi.get_opt(name).await? {
            for w in m.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = Some(ca.clone());
            }
            mapi.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({"webhooks": m.webhooks})),
            )
            .await?;
            info!(configuration = %name, "patched caBundle (mutating)");
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        warn!(error = %e, "could not patch caBundle into the webhook configurations");
    }
}

async fn current(source: &TlsSource) -> anyhow::Result<Option<CertBundle>> {
    Ok(match &source.store {
        Store::Dir(dir) => tls::load_dir(dir)?,
        Store::Secret { api, name } => api
            .get_opt(name)
            .await?
            .as_ref()
            .and_then(bundle_from_secret),
    })
}

async fn store_renewed(source: &TlsSource, renewed: &CertBundle) -> anyhow::Result<()> {
    match &source.store {
        Store::Dir(dir) => Ok(tls::write_dir(dir, renewed)?),
        Store::Secret { api, name } => {
            // Replace with the resourceVersion we read: if another replica renewed first, the
            // write conflicts and the next round picks that replica's certificate up.
            let mut s = api.get(name).await?;
            s.data = Some(secret_data(renewed));
            s.metadata.managed_fields = None;
            api.replace(name, &PostParams::default(), &s).await?;
            Ok(())
        }
    }
}

/// Reloads changed certificates and renews them at two thirds of their validity, until
/// `shutdown`. The running server swaps configurations atomically; connections in flight keep
/// their old certificate.
pub async fn keep_fresh(mut source: TlsSource, rustls: RustlsConfig, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(source.check_interval) => {}
        }
        if let Err(e) = refresh(&mut source, &rustls).await {
            warn!(error = %e, "certificate refresh failed; keeping the current certificate");
        }
    }
}

/// True when `latest` can be served now: it comes from a Secret (read atomically) or a previous
/// check read the same directory contents. Remembers `latest` otherwise.
fn settled(source: &mut TlsSource, latest: &CertBundle) -> bool {
    if matches!(source.store, Store::Secret { .. }) || source.pending.as_ref() == Some(latest) {
        source.pending = None;
        return true;
    }
    source.pending = Some(latest.clone());
    false
}

async fn refresh(source: &mut TlsSource, rustls: &RustlsConfig) -> anyhow::Result<()> {
    let read = current(source)
        .await?
        .unwrap_or_else(|| source.bundle.clone());
    if read == source.bundle {
        source.pending = None;
    } else if !settled(source, &read) {
        // The files of a directory are written one by one (ca.crt, tls.crt, tls.key, ...): a
        // read in the middle mixes old and new files, e.g. a new CA with the old serving
        // certificate, which would be patched into caBundle while the old certificate is still
        // served, or renewed from with the wrong CA key. A changed directory is only taken once
        // two checks in a row read the same files.
        return Ok(());
    }
    let mut latest = read;
    if Timestamp::now() >= tls::renewal_time(&latest)? && latest.ca_key_pem.is_some() {
        let renewed = tls::renew(&latest, &source.names, source.validity, Timestamp::now())?;
        match store_renewed(source, &renewed).await {
            Ok(()) => {
                info!("renewed the serving certificate");
                latest = renewed;
            }
            Err(e) => {
                warn!(error = %e, "storing the renewed certificate failed (another replica may have renewed)")
            }
        }
    }
    if latest != source.bundle {
        let previous_ca =
            (latest.ca_pem != source.bundle.ca_pem).then(|| source.bundle.ca_pem.clone());
        rustls.reload_from_config(tls::server_config(&latest)?);
        source.bundle = latest;
        info!("serving the new certificate");
        if let Some(previous) = previous_ca {
            patch_ca_bundle(source, Some(&previous)).await;
        }
    }
    Ok(())
}
