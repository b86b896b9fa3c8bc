//! Generation of the CustomResourceDefinitions from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{EvictionInterceptor, EvictionRequest, MaintenanceBudget, NodeMaintenance};

/// Every CRD: EvictionRequest, NodeMaintenance, EvictionInterceptor, MaintenanceBudget.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        EvictionRequest::crd(),
        NodeMaintenance::crd(),
        EvictionInterceptor::crd(),
        MaintenanceBudget::crd(),
    ]
}

/// Every CRD as one multi-document YAML stream, as `evictord crds` prints it.
///
/// # Errors
/// Only if serialisation fails, which the types rule out in practice.
pub fn crds_yaml() -> Result<String, serde_norway::Error> {
    let mut out = String::new();
    for crd in all_crds() {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&crd)?);
    }
    Ok(out)
}
