//! Micro-benchmarks of the admission path the server runs per request, without HTTP: decode
//! the AdmissionReview body (as the handler does, `admission::http::decode`), then the pure
//! review against a [`StaticView`] built from `tests/data/objects.yaml`.
//!
//! - `review_pod/annotated_10KiB`: a ~10 KiB pod carrying a valid interceptor annotation, so
//!   every rule P1–P6 runs;
//! - `review_pod/unannotated_10KiB`: the same pod without the annotation (the common case the
//!   Pod webhook must not slow down);
//! - `review_eviction_request/status_heartbeat`: an interceptor's heartbeat, UPDATE of
//!   `evictionrequests/status` (rules S1–S6);
//! - `review_eviction_request/status_heartbeat_decode_only`: its decoding alone;
//! - `review_eviction_request/status_heartbeat_uid_only`: the least a webhook decodes of it, the
//!   `request.uid` with the rest skipped (what `make bench`'s limit server does), so that the
//!   three say where the time goes: skipping the JSON, building the objects, the rules;
//! - `review_eviction_request/status_heartbeat_floor_{envelope,statuses,everything}`: the floor
//!   of any serde_json decoding of it that builds what the status rules read, with every string
//!   borrowed from the body and every other field skipped ([`floor`]): the envelope alone, the
//!   two statuses alone, and all that rules S1–S6 read.
//!
//! Run: `cargo bench --bench review -- --quick` (or `--warm-up-time 1 --measurement-time 2`).

#[path = "../tests/data/fixture.rs"]
mod fixture;
#[path = "review/floor.rs"]
mod floor;

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use evictord::admission::Settings;
use evictord::admission::http::{decode, review_request};
use evictord::admission::offline::view_from_objects;
use evictord::admission::partial::{AdmittedEvictionRequest, AdmittedPod};
use evictord::admission::webhooks::{VALIDATE_EVICTION_REQUESTS, VALIDATE_PODS};
use evictord::cluster::StaticView;
use fixture::*;
use jiff::Timestamp;

/// The allocator of the evictord binary (src/main.rs), so that these figures are the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const JSON: Option<&str> = Some("application/json");

/// The pod fixture, allowed, padded to about 10 KiB with environment variables (which the
/// trimmed `CachedPod` decoding has to skip).
fn pod_review(annotated: bool) -> Vec<u8> {
    let fixture = if annotated {
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            ANNOTATION.into(),
            "checkout.shop.example.com, pdb.example.com, statefulset.apps.k8s.io, drain-guard.example.org"
                .into(),
        );
        review(POD).set("/request/object/metadata/annotations", annotations)
    } else {
        review(POD).remove("/request/object/metadata/annotations")
    };
    fixture.padded_json(10 * 1024)
}

fn view() -> StaticView {
    let objects = std::fs::read(data_path(OBJECTS)).expect("objects.yaml");
    view_from_objects(&objects).expect("objects.yaml is a valid view")
}

/// Decode + review of a pod, as the Pod route does; returns whether it was allowed.
fn review_pod(body: &[u8], view: &StaticView, settings: &Settings, now: Timestamp) -> bool {
    let req = decode::<AdmittedPod>(JSON, body).expect("decodes");
    let verdict = (VALIDATE_PODS.review)(&review_request(&req, now), view, settings);
    verdict.allowed()
}

/// Decode + review of an EvictionRequest write; returns whether it was allowed.
fn review_eviction_request(
    body: &[u8],
    view: &StaticView,
    settings: &Settings,
    now: Timestamp,
) -> bool {
    let req = decode::<AdmittedEvictionRequest>(JSON, body).expect("decodes");
    let verdict = (VALIDATE_EVICTION_REQUESTS.review)(&review_request(&req, now), view, settings);
    verdict.allowed()
}

/// An AdmissionReview read for its `request.uid` only.
#[derive(serde::Deserialize)]
struct UidOnly<'a> {
    #[serde(borrow)]
    request: UidOnlyRequest<'a>,
}

#[derive(serde::Deserialize)]
struct UidOnlyRequest<'a> {
    uid: &'a str,
}

fn uid_only(body: &[u8]) -> usize {
    serde_json::from_slice::<UidOnly>(body)
        .expect("uid")
        .request
        .uid
        .len()
}

fn benches(c: &mut Criterion) {
    let view = view();
    let settings = Settings::default();
    let now: Timestamp = NOW.parse().expect("NOW");

    let mut pods = c.benchmark_group("review_pod");
    for (name, annotated) in [("annotated_10KiB", true), ("unannotated_10KiB", false)] {
        let body = pod_review(annotated);
        assert!(
            review_pod(&body, &view, &settings, now),
            "{name} must be allowed"
        );
        pods.throughput(Throughput::Bytes(body.len() as u64));
        pods.bench_function(name, |b| {
            b.iter(|| review_pod(black_box(&body), &view, &settings, now))
        });
    }
    pods.finish();

    let heartbeat = review(HEARTBEAT).json();
    assert!(
        review_eviction_request(&heartbeat, &view, &settings, now),
        "the heartbeat must be allowed"
    );
    let mut requests = c.benchmark_group("review_eviction_request");
    requests.throughput(Throughput::Bytes(heartbeat.len() as u64));
    requests.bench_function("status_heartbeat", |b| {
        b.iter(|| review_eviction_request(black_box(&heartbeat), &view, &settings, now))
    });
    requests.bench_function("status_heartbeat_decode_only", |b| {
        b.iter(|| decode::<AdmittedEvictionRequest>(JSON, black_box(&heartbeat)).is_ok())
    });
    requests.bench_function("status_heartbeat_uid_only", |b| {
        b.iter(|| uid_only(black_box(&heartbeat)))
    });
    // Both statuses built, two interceptor entries each.
    assert_eq!(floor::statuses(&heartbeat), 4);
    for (name, decode) in [
        (
            "status_heartbeat_floor_envelope",
            floor::envelope as fn(&[u8]) -> usize,
        ),
        ("status_heartbeat_floor_statuses", floor::statuses),
        ("status_heartbeat_floor_everything", floor::everything),
    ] {
        requests.bench_function(name, |b| b.iter(|| decode(black_box(&heartbeat))));
    }
    requests.finish();
}

criterion_group!(review_benches, benches);
criterion_main!(review_benches);
