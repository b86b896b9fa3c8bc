//! The floor of the heartbeat's decoding, for `review_eviction_request/status_heartbeat_floor_*`
//! in `benches/review.rs`: how fast any serde_json decoding that builds what rules S1–S6 read could
//! be. Every type here borrows its strings from the body (a `Cow`, owned only where the JSON
//! escapes a character) and holds only the fields the status rules, the route checks and the
//! answer read: of the envelope the uid, resource, sub-resource, name, namespace and operation;
//! of each object the creation timestamp, generation, target pod, requesters, the deadline and
//! the status. Everything else is skipped, as the limit server skips all but the uid.
//!
//! These types are not the server's: they measure what the "borrowed, zero-copy status for the
//! S-rules" lever named in issue 17 would save at most, before anyone rewrites every S-rule's
//! input type for it (docs/src/performance.md, the misses).

// The fields are built to measure what building them costs; the benchmark reads only a few.
#![allow(dead_code)]

use std::borrow::Cow;

use jiff::Timestamp;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// A string borrowed from the body where the JSON does not escape it.
#[derive(Deserialize)]
pub struct Str<'a>(#[serde(borrow)] pub Cow<'a, str>);

/// An AdmissionReview with only the envelope fields a status review reads, and its objects as
/// `O`: [`Object`] for everything S1–S6 read, [`IgnoredAny`] for the envelope alone.
#[derive(Deserialize)]
#[serde(bound(deserialize = "O: Deserialize<'de>"))]
pub struct Review<'a, O> {
    #[serde(borrow, rename = "apiVersion")]
    pub api_version: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    #[serde(borrow)]
    pub request: Request<'a, O>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "O: Deserialize<'de>"))]
pub struct Request<'a, O> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub resource: Resource<'a>,
    #[serde(borrow, default)]
    pub sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub operation: Cow<'a, str>,
    #[serde(default = "none")]
    pub object: Option<O>,
    #[serde(default = "none")]
    pub old_object: Option<O>,
    #[serde(default)]
    pub dry_run: bool,
}

fn none<O>() -> Option<O> {
    None
}

#[derive(Deserialize)]
pub struct Resource<'a> {
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    #[serde(borrow)]
    pub version: Cow<'a, str>,
    #[serde(borrow)]
    pub resource: Cow<'a, str>,
}

#[derive(Deserialize)]
pub struct Object<'a> {
    pub metadata: Meta,
    #[serde(borrow)]
    pub spec: Spec<'a>,
    #[serde(borrow, default)]
    pub status: Option<Status<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    #[serde(default, deserialize_with = "time")]
    pub creation_timestamp: Option<Timestamp>,
    #[serde(default)]
    pub generation: Option<i64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec<'a> {
    #[serde(borrow)]
    pub target: Target<'a>,
    #[serde(borrow, default)]
    pub requesters: Vec<Named<'a>>,
    #[serde(default)]
    pub heartbeat_deadline_seconds: Option<i32>,
}

#[derive(Deserialize)]
pub struct Target<'a> {
    #[serde(borrow)]
    pub pod: Pod<'a>,
}

#[derive(Deserialize)]
pub struct Pod<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
}

#[derive(Deserialize)]
pub struct Named<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

/// The status, with the conditions' type and status only (S5 reads nothing else).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status<'a> {
    #[serde(default)]
    pub observed_generation: Option<i64>,
    #[serde(borrow, default)]
    pub conditions: Vec<Condition<'a>>,
    #[serde(borrow, default)]
    pub target_interceptors: Vec<Named<'a>>,
    #[serde(borrow, default)]
    pub active_interceptors: Vec<Str<'a>>,
    #[serde(borrow, default)]
    pub processed_interceptors: Vec<Str<'a>>,
    #[serde(borrow, default)]
    pub interceptors: Vec<Entry<'a>>,
    #[serde(borrow, default)]
    pub eviction_request_cancellation_policy: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub struct Condition<'a> {
    #[serde(borrow, rename = "type")]
    pub type_: Cow<'a, str>,
    #[serde(borrow)]
    pub status: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, deserialize_with = "time")]
    pub activation_time: Option<Timestamp>,
    #[serde(default, deserialize_with = "time")]
    pub start_time: Option<Timestamp>,
    #[serde(default, deserialize_with = "time")]
    pub heartbeat_time: Option<Timestamp>,
    #[serde(default, deserialize_with = "time")]
    pub expected_finish_time: Option<Timestamp>,
    #[serde(default, deserialize_with = "time")]
    pub completion_time: Option<Timestamp>,
    #[serde(borrow, default)]
    pub message: Option<Cow<'a, str>>,
}

/// A timestamp read as the server reads it ([`evictord::api::time::parse_utc`], else jiff),
/// from a borrowed string.
fn time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
    let Some(Str(s)) = Option::<Str<'de>>::deserialize(d)? else {
        return Ok(None);
    };
    evictord::api::time::parse_utc(&s)
        .or_else(|| s.parse().ok())
        .map(Some)
        .ok_or_else(|| serde::de::Error::custom(format!("not a timestamp: {s:?}")))
}

/// The objects' statuses only: what building them costs on top of skipping the rest.
#[derive(Deserialize)]
pub struct Statuses<'a> {
    #[serde(borrow)]
    pub request: StatusesRequest<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusesRequest<'a> {
    #[serde(borrow, default)]
    pub object: Option<StatusOnly<'a>>,
    #[serde(borrow, default)]
    pub old_object: Option<StatusOnly<'a>>,
}

#[derive(Deserialize)]
pub struct StatusOnly<'a> {
    #[serde(borrow, default)]
    pub status: Option<Status<'a>>,
}

/// The three floors of a body, each decoded from the body checked as UTF-8 once, as the server
/// does: (envelope only, statuses only, everything S1–S6 read). Each returns a value read from
/// what it built, so that nothing is optimised away.
pub fn envelope(body: &[u8]) -> usize {
    let text = std::str::from_utf8(body).expect("UTF-8");
    let review: Review<'_, IgnoredAny> = serde_json::from_str(text).expect("envelope");
    review.request.uid.len() + review.request.resource.resource.len()
}

pub fn statuses(body: &[u8]) -> usize {
    let text = std::str::from_utf8(body).expect("UTF-8");
    let review: Statuses<'_> = serde_json::from_str(text).expect("statuses");
    [review.request.object, review.request.old_object]
        .iter()
        .flatten()
        .filter_map(|o| o.status.as_ref())
        .map(|s| s.interceptors.len())
        .sum()
}

pub fn everything(body: &[u8]) -> usize {
    let text = std::str::from_utf8(body).expect("UTF-8");
    let review: Review<'_, Object<'_>> = serde_json::from_str(text).expect("review");
    let request = review.request;
    [request.object, request.old_object]
        .iter()
        .flatten()
        .filter_map(|o| o.status.as_ref())
        .map(|s| s.interceptors.len())
        .sum::<usize>()
        + request.uid.len()
}
