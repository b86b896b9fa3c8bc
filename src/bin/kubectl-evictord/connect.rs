//! The client, from the user's kubeconfig and kubectl's flags.

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use evictord::kube_client::{Component, KubeClients};
use evictord::plugin::{Error, Result};

use crate::cli::Connection;

/// A client as kubectl would build it, and the namespace to use.
pub async fn connect(c: &Connection) -> Result<(Client, String)> {
    let kubeconfig = match &c.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    }
    .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    let options = KubeConfigOptions {
        context: c.context.clone(),
        cluster: c.cluster.clone(),
        user: c.user.clone(),
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    if let Some(user) = &c.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    if !c.as_group.is_empty() {
        config.auth_info.impersonate_groups = Some(c.as_group.clone());
    }
    let namespace = c
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = KubeClients::new(config, None, None)
        .map_err(|e| Error::Kubeconfig(e.to_string()))?
        .client(Component::Plugin);
    Ok((client, namespace))
}
