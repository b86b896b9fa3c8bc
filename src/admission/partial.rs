//! Partial views of admitted objects: what a webhook decodes from the AdmissionReview when its
//! rules read only a few fields. The rest of the object is scanned (it must still be valid JSON)
//! but never built: no label map, no managed fields, no containers.
//!
//! The pod webhook (rules P1–P7) reads only the interceptor annotation, on every pod the cluster
//! creates or updates, so its decoding is most of what it costs per request. The EvictionRequest
//! webhook reads the whole spec and status but, of the metadata, only the name, namespace,
//! `generateName` and `creationTimestamp`: the labels (copied from the pod), annotations and
//! managed fields of both objects of an update are scanned, not built.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::api::{
    EvictionRequest, EvictionRequestSpec, EvictionRequestStatus, INTERCEPTORS_ANNOTATION,
};

/// What the pod rules read of a pod.
pub trait InterceptorAnnotation {
    /// The raw interceptor annotation, if any.
    fn interceptor_annotation(&self) -> Option<&str>;
}

/// Any object carries it in its metadata: the cached pod, the partial pod.
impl<K: kube::Resource> InterceptorAnnotation for K {
    fn interceptor_annotation(&self) -> Option<&str> {
        self.meta()
            .annotations
            .as_ref()?
            .get(INTERCEPTORS_ANNOTATION)
            .map(String::as_str)
    }
}

/// A Pod as the pod webhook decodes it: name, namespace and the interceptor annotation. Every
/// other annotation is checked to be a string (as a full decode would) and dropped.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct AdmittedPod {
    /// Name, namespace and at most the interceptor annotation.
    #[serde(default, deserialize_with = "partial_meta")]
    pub metadata: ObjectMeta,
}

/// The metadata the pod webhook reads.
#[derive(Deserialize)]
struct PartialMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default, deserialize_with = "interceptor_annotation_only")]
    annotations: Option<String>,
}

fn partial_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = PartialMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        annotations: m
            .annotations
            .map(|v| BTreeMap::from([(INTERCEPTORS_ANNOTATION.to_string(), v)])),
        ..ObjectMeta::default()
    })
}

/// A string, borrowed from the input when it has no escapes. Read with `deserialize_str`
/// directly, so that error paths still name the key it is the value of.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Str;
        impl<'de> Visitor<'de> for Str {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(Str)
    }
}

/// The `annotations` map, keeping only the interceptor annotation's value; other values must be
/// strings but are not copied (borrowed from the body unless they contain escapes).
fn interceptor_annotation_only<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    struct Annotations;

    impl<'de> Visitor<'de> for Annotations {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            d.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = None;
            while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                let Text(value) = map.next_value::<Text<'de>>()?;
                if key == INTERCEPTORS_ANNOTATION {
                    // A duplicate key: the last value wins, as in a full decode into a map.
                    kept = Some(value.into_owned());
                }
            }
            Ok(kept)
        }
    }

    d.deserialize_option(Annotations)
}

crate::cluster::pod_resource!(AdmittedPod);

/// An EvictionRequest as its webhook decodes it: the spec and status whole, of the metadata only
/// what the rules read (E1, E3, D1 and the heartbeat deadline): name, namespace, `generateName`,
/// `creationTimestamp`. The rules take the [`EvictionRequest`] inside. Boxed: the envelope's
/// request is moved whole several times between the decoder and the handler, and two unboxed
/// objects made it 1.9 KiB (a memory copy of 2–4% of a status update's decoding).
#[derive(Clone, Debug)]
pub struct AdmittedEvictionRequest(pub Box<EvictionRequest>);

impl<'de> Deserialize<'de> for AdmittedEvictionRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// The object as the CustomResource derive decodes it (`metadata` and `spec`
        /// required), with the metadata cut down.
        #[derive(Deserialize)]
        struct Wire {
            metadata: Meta,
            spec: EvictionRequestSpec,
            #[serde(default)]
            status: Option<EvictionRequestStatus>,
        }
        let w = Wire::deserialize(d)?;
        // `ObjectMeta` (most of the object's size) is built here, once: decoded into it and
        // moved from decoder to decoder, it made a third of the memory copying of a heartbeat
        // review's decoding (perf of `benches/review.rs`).
        Ok(Self(Box::new(EvictionRequest {
            metadata: ObjectMeta {
                name: w.metadata.name,
                namespace: w.metadata.namespace,
                generate_name: w.metadata.generate_name,
                creation_timestamp: w.metadata.creation_timestamp,
                ..ObjectMeta::default()
            },
            spec: w.spec,
            status: w.status,
        })))
    }
}

/// The metadata fields the EvictionRequest rules read; the others are skipped unbuilt. Decoded
/// as k8s-openapi decodes `ObjectMeta` (the same name in errors, the last of duplicate keys
/// wins), so that a malformed object gets the same answer.
#[derive(Default)]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    generate_name: Option<String>,
    creation_timestamp: Option<Time>,
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Meta;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("ObjectMeta")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
                let mut m = Meta::default();
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    match key.as_ref() {
                        "name" => m.name = map.next_value()?,
                        "namespace" => m.namespace = map.next_value()?,
                        "generateName" => m.generate_name = map.next_value()?,
                        "creationTimestamp" => {
                            m.creation_timestamp = map.next_value::<CreationTimestamp>()?.0;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(m)
            }
        }
        d.deserialize_struct(
            "ObjectMeta",
            &["name", "namespace", "generateName", "creationTimestamp"],
            Fields,
        )
    }
}

/// `creationTimestamp`, decoded as k8s-openapi does, through [`crate::api::time::opt_time`].
struct CreationTimestamp(Option<Time>);

impl<'de> Deserialize<'de> for CreationTimestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        crate::api::time::opt_time(d).map(Self)
    }
}

impl kube::Resource for AdmittedEvictionRequest {
    type DynamicType = ();
    type Scope = <EvictionRequest as kube::Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        EvictionRequest::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        EvictionRequest::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        EvictionRequest::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        EvictionRequest::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        EvictionRequest::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}
