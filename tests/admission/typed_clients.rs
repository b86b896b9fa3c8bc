//! An EvictionRequest status as a typed Go client writes it (every field present, zero values
//! included) is admitted through the real kube-apiserver.

use super::*;

/// Seed 000 declares `InterceptorStatus.message` required, so a typed Go client's
/// `UpdateStatus` sends the whole status with `message: ""` in every entry (and `null` for a
/// `metav1.Time` it leaves zero): such an initialisation is admitted (rule S4), one row per zero
/// value; a real message in an entry that is not active is still denied.
#[tokio::test]
async fn typed_client_initialisation_is_admitted() {
    let (client, ns) = setup("adm-typed").await;
    let names = [
        "x.example.com",
        "y.example.com",
        "imperative-eviction.k8s.io",
    ];
    let null_times = json!({
        "activationTime": null, "startTime": null, "heartbeatTime": null,
        "expectedFinishTime": null, "completionTime": null
    });
    let rows: [(&str, Value, Option<&str>); 4] = [
        ("absent message and times", json!({}), None),
        ("empty message", json!({"message": ""}), None),
        (
            "empty message and null times",
            {
                let mut v = null_times.clone();
                v["message"] = json!("");
                v
            },
            None,
        ),
        (
            "a message in an entry that is not active",
            json!({"message": "moved"}),
            Some("S4"),
        ),
    ];
    for (i, (row, zero, denial)) in rows.into_iter().enumerate() {
        let pod_name = format!("p{i}");
        let uid = pod_uid(&client, &ns, &pod_name).await;
        let created = create_er(&client, &ns, er(&uid, &pod_name, &uid, &["a.example.com"]))
            .await
            .unwrap();
        let mut whole = serde_json::to_value(&created).unwrap();
        let entries: Vec<Value> = names
            .iter()
            .map(|n| {
                let mut e = zero.clone();
                e["name"] = json!(n);
                e
            })
            .collect();
        whole["status"] = json!({
            "targetInterceptors": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
            "activeInterceptors": [],
            "processedInterceptors": [],
            "interceptors": entries,
        });
        // As client-go's UpdateStatus sends it: a PUT of the whole object, the JSON as written.
        let req = http::Request::put(format!(
            "/apis/evictord.dev/v1alpha1/namespaces/{ns}/evictionrequests/{uid}/status"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&whole).unwrap())
        .unwrap();
        let result = client
            .request::<EvictionRequest>(req)
            .await
            .map_err(|e| e.to_string());
        match denial {
            None => {
                let stored = result.unwrap_or_else(|e| panic!("{row}: {e}"));
                let st = stored.status.expect("status");
                assert_eq!(st.interceptors.len(), 3, "{row}");
            }
            Some(rule) => denied(result, rule),
        }
    }
}
