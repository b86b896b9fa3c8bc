//! Admission of Pods through the real kube-apiserver: the rules of the interceptors annotation.

use super::*;

#[tokio::test]
async fn pod_annotation_rules() {
    let (client, ns) = setup("adm-pod").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (bad, rule) in [
        ("nofqdn", "P2"),
        ("a.example.com,a.example.com", "P3"),
        ("imperative-eviction.k8s.io", "P5"),
        ("foo.k8s.io", "P6"),
    ] {
        let p = pod("bad").interceptors(&[bad]).build();
        denied(
            pods.create(&PostParams::default(), &p)
                .await
                .map_err(|e| e.to_string()),
            rule,
        );
    }
    // Allowed: valid names, an allowlisted *.k8s.io name, and pods without the annotation.
    pod("good")
        .interceptors(&["a.example.com", "deployment.apps.k8s.io"])
        .create(&client, &ns)
        .await;
    pod("plain").create(&client, &ns).await;
    // P7: the annotation is immutable after creation.
    let change = json!({"metadata": {"annotations": {"evictord.dev/eviction-interceptors": "b.example.com"}}});
    denied(
        pods.patch("good", &PatchParams::default(), &Patch::Merge(&change))
            .await
            .map_err(|e| e.to_string()),
        "P7",
    );
    // Other updates of an annotated pod are fine.
    pods.patch(
        "good",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .expect("label update");
}
