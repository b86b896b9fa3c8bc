//! The chart's API Priority and Fairness objects: FlowSchemas and PriorityLevelConfigurations in
//! the flowcontrol version each Kubernetes release serves, and on the real control plane
//! kube-apiserver classifying the chart's accounts into them.

use crate::support::tools::{kubectl, run};
use crate::support::wait::until;
use kube::Api;

use super::*;

const FLOWCONTROL: &str = "flowcontrol.apiserver.k8s.io";

/// The chart's flowcontrol object of `kind` named `name` (panics if missing).
fn flow_object<'a>(
    docs: &'a [serde_norway::Value],
    kind_name: &str,
    name: &str,
) -> &'a serde_norway::Value {
    docs.iter()
        .find(|d| kind(d) == kind_name && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind_name} {name} not rendered"))
}

fn is_flowcontrol(doc: &serde_norway::Value) -> bool {
    matches!(kind(doc), "FlowSchema" | "PriorityLevelConfiguration")
}

/// What a values file asks of the APF objects (the defaults, or ci/full-values.yaml's).
struct ApfValues {
    fullname: &'static str,
    namespace: &'static str,
    accounts: &'static [&'static str],
    lease_precedence: i64,
    lease_shares: i64,
    precedence: i64,
    shares: i64,
    lendable: i64,
    queuing: [i64; 3],
}

/// The four APF objects as rendered for a server serving `version` of the API: the version's
/// fields (assuredConcurrencyShares until v1beta2; nominalConcurrencyShares and lendablePercent
/// from v1beta3), the Leases' FlowSchema matched first into a level of its own that lends nothing,
/// the other FlowSchema matching every request of the same accounts into a queuing level.
fn check_apf_objects(docs: &[serde_norway::Value], version: &str, v: &ApfValues, what: &str) {
    let api_version = format!("{FLOWCONTROL}/{version}");
    let lease_name = format!("{}-leader-election", v.fullname);
    let flow: Vec<&serde_norway::Value> = docs.iter().filter(|d| is_flowcontrol(d)).collect();
    assert_eq!(flow.len(), 4, "{what}: {flow:?}");
    for d in &flow {
        assert_eq!(d["apiVersion"], api_version.as_str(), "{what}: {d:?}");
    }
    let subjects: Vec<(String, String)> = v
        .accounts
        .iter()
        .map(|a| (a.to_string(), v.namespace.to_string()))
        .collect();
    let subjects_of = |fs: &serde_norway::Value| -> Vec<(String, String)> {
        fs["spec"]["rules"][0]["subjects"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s["kind"], "ServiceAccount");
                (
                    s["serviceAccount"]["name"].as_str().unwrap().to_string(),
                    s["serviceAccount"]["namespace"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect()
    };
    let nominal = matches!(version, "v1beta3" | "v1");
    let check_level = |name: &str, shares: i64, lendable: i64, queuing: [i64; 3]| {
        let pl = flow_object(docs, "PriorityLevelConfiguration", name);
        assert_eq!(pl["spec"]["type"], "Limited", "{what}: {name}");
        let limited = &pl["spec"]["limited"];
        let (present, absent) = if nominal {
            ("nominalConcurrencyShares", "assuredConcurrencyShares")
        } else {
            ("assuredConcurrencyShares", "nominalConcurrencyShares")
        };
        assert_eq!(limited[present], shares, "{what}: {name} {present}");
        assert!(limited[absent].is_null(), "{what}: {name} has {absent}");
        if nominal {
            assert_eq!(limited["lendablePercent"], lendable, "{what}: {name}");
        } else {
            assert!(
                limited["lendablePercent"].is_null(),
                "{what}: {name}: lendablePercent before v1beta3"
            );
        }
        let lr = &limited["limitResponse"];
        assert_eq!(lr["type"], "Queue", "{what}: {name}");
        let q = &lr["queuing"];
        assert_eq!(
            [&q["queues"], &q["handSize"], &q["queueLengthLimit"]],
            queuing.each_ref(),
            "{what}: {name} queuing"
        );
    };
    check_level(&lease_name, v.lease_shares, 0, [16, 4, 50]);
    check_level(v.fullname, v.shares, v.lendable, v.queuing);

    let lease_fs = flow_object(docs, "FlowSchema", &lease_name);
    let fs = flow_object(docs, "FlowSchema", v.fullname);
    assert_eq!(
        lease_fs["spec"]["priorityLevelConfiguration"]["name"],
        lease_name.as_str()
    );
    assert_eq!(fs["spec"]["priorityLevelConfiguration"]["name"], v.fullname);
    assert_eq!(lease_fs["spec"]["matchingPrecedence"], v.lease_precedence);
    assert_eq!(fs["spec"]["matchingPrecedence"], v.precedence);
    assert!(
        v.lease_precedence < v.precedence,
        "the Leases' FlowSchema must be matched first"
    );
    for f in [lease_fs, fs] {
        assert_eq!(subjects_of(f), subjects, "{what}: subjects");
        assert_eq!(f["spec"]["distinguisherMethod"]["type"], "ByUser");
        assert_eq!(f["spec"]["rules"].as_sequence().unwrap().len(), 1);
    }
    let lease_rules = &lease_fs["spec"]["rules"][0];
    let leases: serde_norway::Value = serde_norway::from_str(
        "[{apiGroups: [coordination.k8s.io], resources: [leases], verbs: ['*'], namespaces: ['*']}]",
    )
    .unwrap();
    assert_eq!(lease_rules["resourceRules"], leases, "{what}");
    assert!(lease_rules["nonResourceRules"].is_null(), "{what}");
    let everything: serde_norway::Value = serde_norway::from_str(
        "[{apiGroups: ['*'], resources: ['*'], verbs: ['*'], clusterScope: true, namespaces: ['*']}]",
    )
    .unwrap();
    let rules = &fs["spec"]["rules"][0];
    assert_eq!(rules["resourceRules"], everything, "{what}");
    let non_resource: serde_norway::Value =
        serde_norway::from_str("[{nonResourceURLs: ['*'], verbs: ['*']}]").unwrap();
    assert_eq!(rules["nonResourceRules"], non_resource, "{what}");
}

const DEFAULT_APF: ApfValues = ApfValues {
    fullname: "evictord",
    namespace: "evictord-system",
    accounts: &["evictord"],
    lease_precedence: 190,
    lease_shares: 5,
    precedence: 850,
    shares: 20,
    lendable: 50,
    queuing: [16, 4, 100],
};

const FULL_APF: ApfValues = ApfValues {
    fullname: "evictord-full",
    namespace: "evictord-system",
    accounts: &["evictord-sa", "evictord-agent-sa"],
    lease_precedence: 180,
    lease_shares: 8,
    precedence: 800,
    shares: 30,
    lendable: 25,
    queuing: [32, 6, 64],
};

/// The API version of FlowSchema and PriorityLevelConfiguration follows the server: from the API
/// list when helm has one (`helm install`; here `--api-versions` with kinds, as discovery gives
/// them), else from `--kube-version` (`helm template` alone holds every version helm knows in its
/// default list, so a group/version there says nothing about the server).
#[test]
fn apf_objects_follow_the_servers_flowcontrol_version() {
    let served = |versions: &[&str]| -> Vec<String> {
        versions
            .iter()
            .flat_map(|v| {
                ["FlowSchema", "PriorityLevelConfiguration"]
                    .map(|k| format!("{FLOWCONTROL}/{v}/{k}"))
            })
            .collect()
    };
    let cases: &[(&str, Vec<String>, &str)] = &[
        ("1.20.2", vec![], "v1beta1"),
        ("1.22.17", vec![], "v1beta1"),
        ("1.23.0", vec![], "v1beta2"),
        ("1.25.16", vec![], "v1beta2"),
        ("1.26.0", vec![], "v1beta3"),
        ("1.28.15", vec![], "v1beta3"),
        ("1.29.0", vec![], "v1"),
        ("1.31.0", vec![], "v1"),
        // What servers discover: the newest of them, never v1alpha1.
        ("1.20.2", served(&["v1alpha1", "v1beta1"]), "v1beta1"),
        ("1.23.0", served(&["v1beta1", "v1beta2"]), "v1beta2"),
        ("1.26.0", served(&["v1beta2", "v1beta3"]), "v1beta3"),
        ("1.31.0", served(&["v1beta3", "v1"]), "v1"),
        // The list wins over the version: a 1.26 server with v1beta3 turned off
        // (--runtime-config), a 1.29 server with v1 turned off.
        ("1.26.0", served(&["v1beta1", "v1beta2"]), "v1beta2"),
        ("1.29.0", served(&["v1beta3"]), "v1beta3"),
    ];
    let full = full_values();
    for (kube_version, api_versions, expected) in cases {
        for (values, apf) in [(None, &DEFAULT_APF), (Some(full.as_str()), &FULL_APF)] {
            let mut extra = vec!["--kube-version", kube_version];
            for a in api_versions {
                extra.extend(["--api-versions", a.as_str()]);
            }
            if let Some(v) = values {
                extra.extend(["--values", v]);
            }
            let what = format!("helm template {}", extra.join(" "));
            let docs = documents(&ok(&what, &render_with("evictord", apf.namespace, &extra)));
            check_apf_objects(&docs, expected, apf, &what);
        }
    }
}

/// `apf.enabled: false` renders no flowcontrol object (and the rest of the chart as before).
#[test]
fn apf_disabled_renders_no_flowcontrol_object() {
    for kube_version in ["1.20.2", "1.26.0", "1.31.0"] {
        for (set, expected) in [(None, 4), (Some("apf.enabled=false"), 0)] {
            let mut extra = vec!["--kube-version", kube_version];
            if let Some(s) = set {
                extra.extend(["--set", s]);
            }
            let what = format!("helm template {}", extra.join(" "));
            let docs = documents(&ok(
                &what,
                &render_with("evictord", "evictord-system", &extra),
            ));
            assert_eq!(
                docs.iter().filter(|d| is_flowcontrol(d)).count(),
                expected,
                "{what}"
            );
            assert!(docs.iter().any(|d| kind(d) == "Deployment"), "{what}");
        }
    }
}

/// Values that would make the Leases' flow useless or that kube-apiserver would refuse are
/// refused by `helm template` already, with the value named.
#[test]
fn apf_values_kube_apiserver_would_refuse_are_refused() {
    assert_refused(&[
        (
            "apf.leaderElection.matchingPrecedence=900",
            "apf.leaderElection.matchingPrecedence (900) must be below apf.requests.matchingPrecedence (850)",
        ),
        (
            "apf.requests.handSize=20",
            "apf.requests.handSize (20) must not exceed apf.requests.queues (16)",
        ),
        (
            "apf.requests.matchingPrecedence=10000",
            "/apf/requests/matchingPrecedence",
        ),
        (
            "apf.requests.lendablePercent=101",
            "/apf/requests/lendablePercent",
        ),
        (
            "apf.leaderElection.concurrencyShares=0",
            "/apf/leaderElection/concurrencyShares",
        ),
    ]);
}

/// The chart's FlowSchemas and PriorityLevelConfigurations on the real control plane
/// (kube-apiserver 1.20, flowcontrol.apiserver.k8s.io/v1beta1, APF on by default): `helm
/// template --dry-run=server`, with the server's discovery and version as `helm install` has them,
/// renders v1beta1, and that discovery lists the kinds the chart asks for; kube-apiserver accepts
/// the objects, its APF
/// configuration controller digests them (Dangling False), and it classifies requests made as
/// the chart's ServiceAccount into them: a Lease into the Leases' flow, anything else into the
/// other (the X-Kubernetes-PF-* response headers name the FlowSchema and the level by UID).
#[tokio::test]
async fn apf_objects_classify_the_chart_accounts_on_the_real_control_plane() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let c = support::cluster().await;
    let (release, ns) = ("apf", "apf-system");
    let fullname = "apf-evictord";
    let lease_flow = format!("{fullname}-leader-election");

    let chart_dir = chart().display().to_string();
    let discovered = ok(
        "helm template --dry-run=server",
        &run(
            "helm",
            &[
                "template",
                release,
                &chart_dir,
                "--namespace",
                ns,
                "--dry-run=server",
            ],
            Some(&c.kubeconfig),
            None,
        ),
    );
    let discovered = documents(&discovered);
    // The helper asks the API list for "<group>/<version>/<Kind>": discovery names kinds (helm's
    // built-in list, without a cluster, does not), so on a real server the list decides.
    let probe = tempfile::tempdir().unwrap();
    std::fs::create_dir(probe.path().join("templates")).unwrap();
    std::fs::write(
        probe.path().join("Chart.yaml"),
        "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(
        probe.path().join("templates/probe.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  \
             v1beta1: \"{{{{ .Capabilities.APIVersions.Has \"{FLOWCONTROL}/v1beta1/FlowSchema\" }}}}\"\n  \
             v1beta2: \"{{{{ .Capabilities.APIVersions.Has \"{FLOWCONTROL}/v1beta2/FlowSchema\" }}}}\"\n"
        ),
    )
    .unwrap();
    let probe_dir = probe.path().display().to_string();
    let probed = ok(
        "helm template --dry-run=server (probe)",
        &run(
            "helm",
            &["template", "probe", &probe_dir, "--dry-run=server"],
            Some(&c.kubeconfig),
            None,
        ),
    );
    let probed = &documents(&probed)[0]["data"];
    assert_eq!(
        (&probed["v1beta1"], &probed["v1beta2"]),
        (&"true".into(), &"false".into()),
        "discovered kinds"
    );
    let versions: std::collections::BTreeSet<&str> = discovered
        .iter()
        .filter(|d| is_flowcontrol(d))
        .map(|d| d["apiVersion"].as_str().unwrap())
        .collect();
    assert_eq!(
        versions.into_iter().collect::<Vec<_>>(),
        [format!("{FLOWCONTROL}/v1beta1").as_str()],
        "from the server's discovery"
    );

    let docs = apply_chart(c, release, ns, None).await;
    assert_eq!(docs.iter().filter(|d| is_flowcontrol(d)).count(), 4);
    let client = c.client().await;
    let api = |kind: &str| {
        Api::<DynamicObject>::all_with(
            client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(FLOWCONTROL, "v1beta1", kind)),
        )
    };
    let (schemas, levels) = (api("FlowSchema"), api("PriorityLevelConfiguration"));
    let mut uids = std::collections::BTreeMap::new();
    for name in [fullname, lease_flow.as_str()] {
        let pl = levels
            .get(name)
            .await
            .expect("the PriorityLevelConfiguration");
        uids.insert(("level", name), pl.metadata.uid.unwrap());
        let fs = until(T, &format!("FlowSchema {name} Dangling=False"), || async {
            let fs = schemas.get(name).await.ok()?;
            let dangling = fs.data["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Dangling")?
                .clone();
            (dangling["status"] == "False").then_some(fs)
        })
        .await;
        assert_eq!(fs.data["spec"]["priorityLevelConfiguration"]["name"], name);
        uids.insert(("schema", name), fs.metadata.uid.unwrap());
    }

    // Requests as the chart's ServiceAccount (impersonated: APF classifies after impersonation);
    // whatever their answer (the Lease does not exist, the account may not list pods), they
    // are classified first.
    let sa = format!("system:serviceaccount:{ns}:{fullname}");
    let as_sa = c.client_as(&sa, &[]).await;
    for (path, flow) in [
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{fullname}-leader"),
            lease_flow.as_str(),
        ),
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            lease_flow.as_str(),
        ),
        (
            format!("/api/v1/namespaces/{ns}/secrets/{fullname}-tls"),
            fullname,
        ),
        ("/api/v1/pods?limit=1".to_string(), fullname),
        ("/apis".to_string(), fullname),
    ] {
        let request = http::Request::get(&path)
            .body(kube::client::Body::from(Vec::new()))
            .unwrap();
        let response = as_sa.send(request).await.expect("request as the account");
        let header = |h: &str| {
            response
                .headers()
                .get(h)
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(
            header("X-Kubernetes-PF-FlowSchema-UID").as_deref(),
            Some(uids[&("schema", flow)].as_str()),
            "GET {path} ({}) not in FlowSchema {flow}",
            response.status()
        );
        assert_eq!(
            header("X-Kubernetes-PF-PriorityLevel-UID").as_deref(),
            Some(uids[&("level", flow)].as_str()),
            "GET {path} not in PriorityLevelConfiguration {flow}"
        );
    }
    // And kube-apiserver's metrics count them by FlowSchema and level (two Lease requests, three
    // others above), as the book tells operators to check.
    let metrics = ok(
        "kubectl get --raw /metrics",
        &kubectl(c, &["get", "--raw", "/metrics"], None),
    );
    for (flow, at_least) in [(lease_flow.as_str(), 2.0), (fullname, 3.0)] {
        let series = format!(
            "apiserver_flowcontrol_dispatched_requests_total{{flow_schema=\"{flow}\",priority_level=\"{flow}\"}} "
        );
        let n: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str()))
            .unwrap_or_else(|| panic!("no {series}in kube-apiserver's metrics"))
            .trim()
            .parse()
            .unwrap();
        assert!(n >= at_least, "{series}{n}");
    }
}
