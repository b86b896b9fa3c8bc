//! The node maintenance gauges: maintenances per stage and pods pending / evacuating, refreshed
//! from the cache after each reconciliation.

use super::gather::evacuation_totals;
use crate::api::Stage;
use crate::cluster::Caches;
use crate::metrics::{StageLabel, metrics};

/// Maintenances per stage and pods pending / evacuating, from the cache.
pub fn refresh_gauges(caches: &Caches) {
    let m = metrics();
    let all = caches.node_maintenances.all();
    for stage in Stage::ALL {
        let count = all.iter().filter(|nm| nm.spec.stage() == stage).count();
        m.maintenances
            .get_or_create(&StageLabel {
                stage: stage.as_str(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    let (pending, evacuating) = evacuation_totals(&all);
    m.pods_pending_evacuation.set(pending);
    m.pods_evacuating.set(evacuating);
}
