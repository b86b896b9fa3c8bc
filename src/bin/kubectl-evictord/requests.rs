//! `evict` and `cancel`: a pod's EvictionRequest from the terminal.

use std::collections::BTreeSet;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use evictord::api::{EvictionRequest, Requester};
use evictord::cluster::CachedPod;
use evictord::plugin::blockers::holdup;
use evictord::plugin::errors::{Access, EXIT_INTERRUPTED, EXIT_TIMEOUT, api_error};
use evictord::plugin::requesting::{joined, new_request, withdrawn};
use evictord::plugin::{Error, Result};

use crate::cli::Output;
use crate::read;
use crate::show::{is_terminal, print_object};

const RESOURCE: &str = "evictionrequests.evictord.dev";

async fn write_requesters(
    api: &Api<EvictionRequest>,
    r: &EvictionRequest,
    list: &[Requester],
) -> Result<()> {
    let name = r.metadata.name.clone().unwrap_or_default();
    // The resourceVersion makes this a compare-and-swap: no other requester is lost.
    let patch = json!({
        "metadata": {"resourceVersion": r.metadata.resource_version},
        "spec": {"requesters": list},
    });
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| api_error(Access::new("patch", RESOURCE).named(&name), e))?;
    Ok(())
}

/// Creates or joins the pod's request; with `wait`, follows it.
pub async fn evict(
    client: &Client,
    namespace: &str,
    pod: &str,
    requester: &str,
    wait: bool,
    timeout: Option<Duration>,
    output: Option<Output>,
) -> Result<i32> {
    let pods: Api<CachedPod> = Api::namespaced(client.clone(), namespace);
    let p = pods.get(pod).await.map_err(|e| {
        api_error(
            Access::new("get", "pods")
                .in_namespace(namespace)
                .named(pod),
            e,
        )
    })?;
    let uid = p.uid().to_string();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
    let existing = api.get_opt(&uid).await.map_err(|e| {
        api_error(
            Access::new("get", RESOURCE)
                .in_namespace(namespace)
                .named(&uid),
            e,
        )
    })?;
    // With -o, standard output carries only the object.
    let say = |line: String| {
        if output.is_some() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    match existing {
        None => {
            api.create(
                &PostParams::default(),
                &new_request(pod, &uid, &p.labels().to_map(), requester),
            )
            .await
            .map_err(|e| api_error(Access::new("create", RESOURCE).in_namespace(namespace), e))?;
            say(format!(
                "evictionrequest {namespace}/{uid} created for pod {pod} (requester {requester})"
            ));
        }
        Some(r) => match joined(&r.spec.requesters, requester) {
            Some(list) => {
                write_requesters(&api, &r, &list).await?;
                say(format!(
                    "evictionrequest {namespace}/{uid} of pod {pod} joined (requester {requester})"
                ));
            }
            None => say(format!(
                "evictionrequest {namespace}/{uid} of pod {pod} already lists {requester}"
            )),
        },
    }
    if let Some(o) = output {
        let mut r = api.get(&uid).await.map_err(|e| {
            api_error(
                Access::new("get", RESOURCE)
                    .in_namespace(namespace)
                    .named(&uid),
                e,
            )
        })?;
        r.metadata.managed_fields = None;
        print_object(&r, o)?;
    }
    if !wait {
        return Ok(0);
    }
    follow_request(client, namespace, pod, &uid, timeout).await
}

/// Follows the request until the pod is gone (0), the request is canceled (1), the timeout (3)
/// or Ctrl-C (130).
async fn follow_request(
    client: &Client,
    namespace: &str,
    pod: &str,
    uid: &str,
    timeout: Option<Duration>,
) -> Result<i32> {
    let pods: Api<CachedPod> = Api::namespaced(client.clone(), namespace);
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
    let spinner = is_terminal().then(|| {
        let s = ProgressBar::new_spinner();
        s.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        s.set_prefix(format!("{namespace}/{pod}"));
        s.enable_steady_tick(Duration::from_millis(120));
        s
    });
    let mut printed = BTreeSet::new();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let say = |text: String| match &spinner {
        Some(s) => s.finish_with_message(text),
        None => println!("{namespace}/{pod}: {text}"),
    };
    loop {
        let p = pods.get_opt(pod).await.map_err(|e| {
            api_error(
                Access::new("get", "pods")
                    .in_namespace(namespace)
                    .named(pod),
                e,
            )
        })?;
        let r = api.get_opt(uid).await.map_err(|e| {
            api_error(
                Access::new("get", RESOURCE)
                    .in_namespace(namespace)
                    .named(uid),
                e,
            )
        })?;
        let Some(p) = p.filter(|p| p.uid() == uid) else {
            say("evicted: the pod is gone".into());
            return Ok(0);
        };
        if let Some(c) = r
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .and_then(|s| s.condition(evictord::api::CONDITION_CANCELED))
            .filter(|c| c.status == "True")
        {
            say(format!("request canceled: {}", c.message));
            return Ok(1);
        }
        let p = p.trim();
        let budgets = read::budgets(client, std::slice::from_ref(&p)).await?;
        let h = holdup(&p, r.as_ref(), &budgets, Timestamp::now());
        match &spinner {
            Some(s) => s.set_message(h.text.clone()),
            None => {
                if printed.insert(h.key.clone()) {
                    println!("{namespace}/{pod}: {}", h.text);
                }
            }
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            say(format!("timed out; the request stays: {}", h.text));
            return Ok(EXIT_TIMEOUT);
        }
        tokio::select! {
            _ = &mut interrupted => {
                say(format!("stopped following; the request stays (withdraw: kubectl evictord cancel {pod} -n {namespace})"));
                return Ok(EXIT_INTERRUPTED);
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Withdraws `requester` from the pod's open request.
pub async fn cancel(client: &Client, namespace: &str, pod: &str, requester: &str) -> Result<i32> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error(Access::new("list", RESOURCE).in_namespace(namespace), e))?;
    let Some((r, rest)) = list
        .items
        .iter()
        .filter(|r| r.spec.target.pod.name == pod && !r.is_terminal())
        .find_map(|r| withdrawn(&r.spec.requesters, requester).map(|rest| (r, rest)))
    else {
        return Err(Error::Usage(format!(
            "pod {pod} in namespace {namespace} has no open EvictionRequest with requester {requester}"
        )));
    };
    write_requesters(&api, r, &rest).await?;
    let name = r.metadata.name.clone().unwrap_or_default();
    if rest.is_empty() {
        println!(
            "requester {requester} withdrawn from evictionrequest {namespace}/{name}; it was the last, so the request is canceled"
        );
    } else {
        println!("requester {requester} withdrawn from evictionrequest {namespace}/{name}");
    }
    Ok(0)
}
