//! Playing an interceptor by hand: the test writes the interceptor's own status entry.

use std::time::Duration;

use evictord::api::{EvictionRequest, InterceptorStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::PostParams;

/// Now, to the second (as the API stores times).
pub fn now() -> Time {
    Time(jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap())
}

/// Plays interceptor `name`: waits (up to about 50 s) until the request exists and `name` is
/// active, then edits its own entry (read, modify, write with the resourceVersion; retried on
/// conflicts with the controller).
pub async fn write_when_active(
    api: &Api<EvictionRequest>,
    uid: &str,
    name: &str,
    edit: impl Fn(&mut InterceptorStatus),
) {
    for _ in 0..200 {
        let Some(mut obj) = api.get_opt(uid).await.unwrap() else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let mut s = obj.status.clone().unwrap_or_default();
        if s.active_interceptors.first().map(String::as_str) != Some(name) {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        let entry = s.interceptors.iter_mut().find(|i| i.name == name).unwrap();
        edit(entry);
        obj.status = Some(s);
        obj.metadata.managed_fields = None;
        match api.replace_status(uid, &PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("interceptor {name} status write failed: {e}"),
        }
    }
    panic!("interceptor {name} never became active, or too many conflicts");
}

/// Writes interceptor `name`'s own status entry now, as an interceptor would (read, modify,
/// write with the resourceVersion; retried on conflicts with the controller). The entry must exist.
pub async fn write_entry(
    api: &Api<EvictionRequest>,
    uid: &str,
    name: &str,
    edit: impl Fn(&mut InterceptorStatus),
) {
    for _ in 0..20 {
        let mut obj = api.get(uid).await.unwrap();
        let mut s = obj.status.clone().unwrap_or_default();
        let entry = s
            .interceptors
            .iter_mut()
            .find(|i| i.name == name)
            .expect("interceptor entry");
        edit(entry);
        obj.status = Some(s);
        obj.metadata.managed_fields = None;
        match api.replace_status(uid, &PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => panic!("interceptor {name} status write failed: {e}"),
        }
    }
    panic!("interceptor {name}: too many conflicts");
}
