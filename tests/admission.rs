//! Admission through a real kube-apiserver: the apiserver calls the running `evictord serve`
//! through the configurations printed by `evictord webhook-config`. For every rule, one request
//! the apiserver rejects with the webhook's message and one it accepts. Controllers are off so
//! that status writes come only from the tests.

#[path = "admission/pods.rs"]
mod pods;
mod support;
#[path = "admission/typed_clients.rs"]
mod typed_clients;

use evictord::api::EvictionRequest;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::fixtures::pod;
use support::tools::kubectl;

const ARGS: &[&str] = &[
    "--controllers=none",
    "--min-heartbeat-interval=60s",
    "--interceptor-deadline=20m",
];

async fn setup(prefix: &str) -> (Client, String) {
    support::evictord::shared(ARGS).await;
    let c = support::cluster().await;
    (c.client().await, c.namespace(prefix).await)
}

fn er(name: &str, pod: &str, uid: &str, requesters: &[&str]) -> Value {
    json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": name},
        "spec": {"target": {"pod": {"name": pod, "uid": uid}}, "requesters": requesters.iter().map(|r| json!({"name": r})).collect::<Vec<_>>()}
    })
}

async fn create_er(client: &Client, ns: &str, body: Value) -> Result<EvictionRequest, String> {
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), ns);
    let obj: EvictionRequest = serde_json::from_value(body).map_err(|e| e.to_string())?;
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| e.to_string())
}

fn denied(result: Result<impl std::fmt::Debug, String>, rule: &str) {
    match result {
        Ok(v) => panic!("expected a denial by rule {rule}, got {v:?}"),
        Err(e) => assert!(
            e.contains(&format!("rule {rule}")),
            "expected rule {rule} in: {e}"
        ),
    }
}

async fn pod_uid(client: &Client, ns: &str, name: &str) -> String {
    let p = pod(name).create(client, ns).await;
    p.metadata.uid.expect("uid")
}

#[tokio::test]
async fn eviction_request_create_rules() {
    let (client, ns) = setup("adm-create").await;
    let uid = pod_uid(&client, &ns, "p1").await;

    let mut e1 = er(&uid, "p1", &uid, &["a.example.com"]);
    e1["metadata"] = json!({"generateName": "x-"});
    let e1 = create_er(&client, &ns, e1).await;
    assert!(
        e1.as_ref()
            .is_err_and(|e| e.contains("generateName is not supported")),
        "E1: {e1:?}"
    );
    denied(
        create_er(&client, &ns, er(&uid, "Bad_Name", &uid, &["a.example.com"])).await,
        "E2",
    );
    denied(
        create_er(&client, &ns, er("abc", "p1", &uid, &["a.example.com"])).await,
        "E3",
    );
    denied(
        create_er(&client, &ns, er(&uid, "p1", &uid, &["nofqdn"])).await,
        "E4",
    );
    denied(
        create_er(&client, &ns, er(&uid, "p1", &uid, &[])).await,
        "E4",
    );
    // E5's bounds are also in the schema, which rejects first; 700 is inside both.
    let mut e5 = er(&uid, "p1", &uid, &["a.example.com"]);
    e5["spec"]["heartbeatDeadlineSeconds"] = json!(100);
    assert!(
        create_er(&client, &ns, e5).await.is_err(),
        "E5 out of bounds must be rejected"
    );

    // E7: a pod of that name with another UID is denied, naming both UIDs.
    let e7 = create_er(
        &client,
        &ns,
        er("other-uid", "p1", "other-uid", &["a.example.com"]),
    )
    .await;
    denied(e7.as_ref().map(|_| ()).map_err(Clone::clone), "E7");
    assert!(e7.unwrap_err().contains(&uid), "E7 names the pod's UID");

    // Allowed: the valid request.
    let mut ok = er(&uid, "p1", &uid, &["a.example.com"]);
    ok["spec"]["heartbeatDeadlineSeconds"] = json!(700);
    create_er(&client, &ns, ok)
        .await
        .expect("a valid EvictionRequest is admitted");
}

#[tokio::test]
async fn missing_pod_is_allowed_with_a_warning() {
    let (_client, ns) = setup("adm-warn").await;
    let c = support::cluster().await;
    let body = er("ghost-uid", "ghost", "ghost-uid", &["a.example.com"]).to_string();
    let out = kubectl(c, &["create", "-n", &ns, "-f", "-"], Some(&body));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "E7 missing pod must be allowed: {stderr}"
    );
    assert!(
        stderr.contains("not found") && stderr.contains("canceled"),
        "E7 warning expected, got: {stderr}"
    );
}

/// RBAC for a user who may manage EvictionRequests and NodeMaintenances but may not delete
/// pods or nodes.
async fn limited_user(client: &Client, ns: &str, user: &str) {
    let rules = json!([
        {"apiGroups": ["evictord.dev"], "resources": ["evictionrequests", "nodemaintenances"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["get", "list"]}
    ]);
    let cr: ClusterRole = serde_json::from_value(
        json!({"metadata": {"name": format!("{user}-role")}, "rules": rules}),
    )
    .unwrap();
    let _ = Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &cr)
        .await;
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{user}-binding")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{user}-role")},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    }))
    .unwrap();
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &crb)
        .await;
    let _ = ns;
}

async fn grant_pod_delete(client: &Client, ns: &str, user: &str) {
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "pod-deleter"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]})).unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "pod-deleter"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-deleter"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
}

#[tokio::test]
async fn authorization_e8_u5_d1() {
    let (client, ns) = setup("adm-authz").await;
    let c = support::cluster().await;
    let user = format!("limited-{ns}");
    limited_user(&client, &ns, &user).await;
    let as_user = c.client_as(&user, &["system:authenticated"]).await;
    let uid = pod_uid(&client, &ns, "p1").await;

    denied(
        create_er(&as_user, &ns, er(&uid, "p1", &uid, &["a.example.com"])).await,
        "E8",
    );
    // The admin creates it; the limited user may neither update nor delete it.
    create_er(&client, &ns, er(&uid, "p1", &uid, &["a.example.com"]))
        .await
        .unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(as_user.clone(), &ns);
    let patch =
        json!({"spec": {"requesters": [{"name": "a.example.com"}, {"name": "b.example.com"}]}});
    denied(
        api.patch(&uid, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| e.to_string()),
        "U5",
    );
    denied(
        api.delete(&uid, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        "D1",
    );

    // With `delete pods` in the namespace the same user is allowed (verdicts are cached ~5 s).
    grant_pod_delete(&client, &ns, &user).await;
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    api.patch(&uid, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("U5 allowed with delete pods");
    api.delete(&uid, &DeleteParams::default())
        .await
        .expect("D1 allowed with delete pods");
}

/// E8 with `delete` on one pod only (`resourceNames`): the namespace-wide question is answered
/// no, so the pod itself is asked about; a request for that pod is allowed, for another denied.
#[tokio::test]
async fn authorization_e8_by_resource_name() {
    let (client, ns) = setup("adm-authz-name").await;
    let c = support::cluster().await;
    let user = format!("one-pod-{ns}");
    limited_user(&client, &ns, &user).await;
    let uid1 = pod_uid(&client, &ns, "p1").await;
    let uid2 = pod_uid(&client, &ns, "p2").await;
    let role: Role = serde_json::from_value(json!({"metadata": {"name": "p1-deleter"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "resourceNames": ["p1"], "verbs": ["delete"]}]})).unwrap();
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "p1-deleter"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "p1-deleter"},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &rb)
        .await
        .unwrap();
    let as_user = c.client_as(&user, &["system:authenticated"]).await;
    create_er(&as_user, &ns, er(&uid1, "p1", &uid1, &["a.example.com"]))
        .await
        .expect("E8 allowed: the user may delete p1");
    denied(
        create_er(&as_user, &ns, er(&uid2, "p2", &uid2, &["a.example.com"])).await,
        "E8",
    );
}

async fn status_patch(
    api: &Api<EvictionRequest>,
    name: &str,
    status: Value,
) -> Result<EvictionRequest, String> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": status})),
    )
    .await
    .map_err(|e| e.to_string())
}

#[tokio::test]
async fn eviction_request_update_and_status_rules() {
    let (client, ns) = setup("adm-update").await;
    let uid = pod_uid(&client, &ns, "p1").await;
    create_er(&client, &ns, er(&uid, "p1", &uid, &["a.example.com"]))
        .await
        .unwrap();
    let api: Api<EvictionRequest> = Api::namespaced(client.clone(), &ns);
    let merge = |v: Value| Patch::Merge(v);

    // U1 / U2.
    denied(
        api.patch(
            &uid,
            &PatchParams::default(),
            &merge(json!({"spec": {"target": {"pod": {"name": "p2", "uid": uid}}}})),
        )
        .await
        .map_err(|e| e.to_string()),
        "U1",
    );
    denied(
        api.patch(
            &uid,
            &PatchParams::default(),
            &merge(json!({"spec": {"requesters": [{"name": "Bad"}]}})),
        )
        .await
        .map_err(|e| e.to_string()),
        "U2",
    );
    api.patch(
        &uid,
        &PatchParams::default(),
        &merge(
            json!({"spec": {"requesters": [{"name": "a.example.com"}, {"name": "b.example.com"}]}}),
        ),
    )
    .await
    .expect("U2 valid requesters");

    // S1: targetInterceptors set once, ending with the imperative interceptor.
    denied(
        status_patch(
            &api,
            &uid,
            json!({"targetInterceptors": [{"name": "x.example.com"}]}),
        )
        .await,
        "S1",
    );
    let targets = json!([{"name": "x.example.com"}, {"name": "imperative-eviction.k8s.io"}]);
    let names = json!([{"name": "x.example.com"}, {"name": "imperative-eviction.k8s.io"}]);
    status_patch(
        &api,
        &uid,
        json!({"targetInterceptors": targets, "interceptors": names}),
    )
    .await
    .expect("S1 first set");
    denied(status_patch(&api, &uid, json!({"targetInterceptors": [{"name": "y.example.com"}, {"name": "imperative-eviction.k8s.io"}]})).await, "S1");

    // S2: only the next unprocessed interceptor can be activated.
    denied(
        status_patch(
            &api,
            &uid,
            json!({"activeInterceptors": ["imperative-eviction.k8s.io"]}),
        )
        .await,
        "S2",
    );
    let now = jiff::Timestamp::now();
    let t = |offset: i64| {
        (now + jiff::SignedDuration::from_secs(offset))
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    status_patch(&api, &uid, json!({"activeInterceptors": ["x.example.com"], "interceptors": [{"name": "x.example.com", "activationTime": t(0)}, {"name": "imperative-eviction.k8s.io"}]}))
        .await
        .expect("S2 activate the next one");

    // S4: heartbeats not in the future, first one with startTime; S3: processed only by hand-off.
    denied(status_patch(&api, &uid, json!({"interceptors": [{"name": "x.example.com", "activationTime": t(0), "startTime": t(0), "heartbeatTime": t(3600)}, {"name": "imperative-eviction.k8s.io"}]})).await, "S4");
    status_patch(&api, &uid, json!({"interceptors": [{"name": "x.example.com", "activationTime": t(0), "startTime": t(0), "heartbeatTime": t(0)}, {"name": "imperative-eviction.k8s.io"}]}))
        .await
        .expect("S4 first heartbeat with startTime");
    denied(
        status_patch(
            &api,
            &uid,
            json!({"processedInterceptors": ["imperative-eviction.k8s.io"]}),
        )
        .await,
        "S3",
    );

    // S6: the counter never decreases.
    status_patch(
        &api,
        &uid,
        json!({"podEvictionStatus": {"failedAPIEvictionCounter": 2}}),
    )
    .await
    .expect("S6 counter up");
    denied(
        status_patch(
            &api,
            &uid,
            json!({"podEvictionStatus": {"failedAPIEvictionCounter": 1}}),
        )
        .await,
        "S6",
    );

    // U3: with Forbid, requesters cannot be removed while the pod exists.
    status_patch(
        &api,
        &uid,
        json!({"evictionRequestCancellationPolicy": "Forbid"}),
    )
    .await
    .expect("S6 policy Forbid");
    denied(
        api.patch(
            &uid,
            &PatchParams::default(),
            &merge(json!({"spec": {"requesters": [{"name": "a.example.com"}]}})),
        )
        .await
        .map_err(|e| e.to_string()),
        "U3",
    );
    // D2: nor can the request be deleted.
    denied(
        api.delete(&uid, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        "D2",
    );

    // S5 / U4: once Evicted, it stays Evicted and requesters are frozen.
    let evicted = json!([{"type": "Evicted", "status": "True", "reason": "PodDeleted", "message": "gone", "lastTransitionTime": t(0)}]);
    status_patch(
        &api,
        &uid,
        json!({"conditions": evicted, "activeInterceptors": null}),
    )
    .await
    .expect("S5 set Evicted");
    let back = json!([{"type": "Evicted", "status": "False", "reason": "Oops", "message": "back", "lastTransitionTime": t(0)}]);
    denied(
        status_patch(&api, &uid, json!({"conditions": back})).await,
        "S5",
    );
    denied(
        api.patch(
            &uid,
            &PatchParams::default(),
            &merge(json!({"spec": {"requesters": [{"name": "c.example.com"}]}})),
        )
        .await
        .map_err(|e| e.to_string()),
        "U4",
    );
    api.delete(&uid, &DeleteParams::default())
        .await
        .expect("D2 allows deleting an Evicted request");
}

fn nm(name: &str, nodes: &[&str], extra: Value) -> Value {
    let mut v = json!({
        "apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}]}}
    });
    if let (Some(spec), Value::Object(extra)) = (v["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    v
}

#[tokio::test]
async fn node_maintenance_rules() {
    let (client, ns) = setup("adm-nm").await;
    let c = support::cluster().await;
    let api: Api<evictord::api::NodeMaintenance> = Api::all(client.clone());
    let node = format!("{ns}-node");
    let node_obj: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": node}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .create(&PostParams::default(), &node_obj)
        .await
        .unwrap();

    // M1, M2: a partial plan comes back with the 12 defaults inserted and sorted; kubectl shows the warning.
    let body = nm(
        &format!("{ns}-m"),
        &[&node],
        json!({"drainPlan": [{"podPriority": 5000, "podType": "Default"}]}),
    )
    .to_string();
    let out = kubectl(c, &["create", "-f", "-", "-o", "json"], Some(&body));
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "create: {stderr}");
    assert!(
        stderr.contains("Warning") && stderr.contains("rule M2"),
        "M2 warning: {stderr}"
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["spec"]["stage"], "Idle", "M1");
    let plan = created["spec"]["drainPlan"].as_array().unwrap();
    assert_eq!(plan.len(), 13, "M2: 12 defaults + 1");
    assert_eq!(plan[0], json!({"podPriority": 5000, "podType": "Default"}));
    assert_eq!(
        plan[12],
        json!({"podPriority": 2147483647, "podType": "Static"})
    );

    let create = |v: Value| {
        let api = api.clone();
        async move {
            let obj: evictord::api::NodeMaintenance =
                serde_json::from_value(v).map_err(|e| e.to_string())?;
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|e| e.to_string())
        }
    };
    // N1: malformed selector.
    let mut bad = nm(&format!("{ns}-n1"), &[&node], json!({}));
    bad["spec"]["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]});
    denied(create(bad).await, "N1");
    // N3: duplicate entries.
    let dup = json!({"drainPlan": [{"podPriority": 5000, "podType": "Default"}, {"podPriority": 5000, "podType": "Default"}]});
    denied(create(nm(&format!("{ns}-n3"), &[&node], dup)).await, "N3");
    // N4: stage forward only; drain plan immutable.
    let name = format!("{ns}-m");
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"stage": "Cordon"}})),
    )
    .await
    .expect("N4 forward");
    denied(
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"stage": "Idle"}})),
        )
        .await
        .map_err(|e| e.to_string()),
        "N4",
    );
    denied(
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"drainPlan": [{"podPriority": 1, "podType": "Default"}]}}),
            ),
        )
        .await
        .map_err(|e| e.to_string()),
        "N4",
    );

    // N5: selecting every node warns about a degraded and unrecoverable cluster.
    let every = json!({"apiVersion": "evictord.dev/v1alpha1", "kind": "NodeMaintenance", "metadata": {"name": format!("{ns}-all")},
        "spec": {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "no-such-label", "operator": "DoesNotExist"}]}]}}});
    let out = kubectl(
        c,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&every.to_string()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "N5 is only a warning: {stderr}");
    assert!(
        stderr.contains("degraded and unrecoverable"),
        "N5 warning: {stderr}"
    );

    // N6: a user who may not delete the node is refused.
    let user = format!("nm-limited-{ns}");
    limited_user(&client, &ns, &user).await;
    let as_user: Api<evictord::api::NodeMaintenance> =
        Api::all(c.client_as(&user, &["system:authenticated"]).await);
    let obj: evictord::api::NodeMaintenance =
        serde_json::from_value(nm(&format!("{ns}-n6"), &[&node], json!({}))).unwrap();
    denied(
        as_user
            .create(&PostParams::default(), &obj)
            .await
            .map_err(|e| e.to_string()),
        "N6",
    );
}
