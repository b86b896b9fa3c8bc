//! The controllers that make the evictord APIs work. Each one is split into a pure decision core
//! (`decide`: object, cached pod, clock → [`eviction_request::Decision`]) and a thin shell that
//! applies the decision (status patch, eviction call, events, requeue).

pub mod eviction_request;
