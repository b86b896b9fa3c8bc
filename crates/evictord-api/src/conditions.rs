//! Setting a `metav1.Condition` in a status's list, as Kubernetes' `meta.SetStatusCondition`
//! does: `lastTransitionTime` moves only when the status changes, so rewriting an unchanged
//! condition is no change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// `conditions` with `new` in place of the condition of its type (appended when absent). The
/// previous `lastTransitionTime` is kept when the status is unchanged.
pub fn with_condition(conditions: &[Condition], mut new: Condition) -> Vec<Condition> {
    let previous = conditions.iter().find(|c| c.type_ == new.type_);
    if let Some(p) = previous.filter(|p| p.status == new.status) {
        new.last_transition_time = p.last_transition_time.clone();
    }
    let mut next: Vec<Condition> = conditions
        .iter()
        .filter(|c| c.type_ != new.type_)
        .cloned()
        .collect();
    // The condition keeps its place in the list, so that rewriting it reorders nothing.
    let at = conditions
        .iter()
        .position(|c| c.type_ == new.type_)
        .unwrap_or(next.len());
    next.insert(at.min(next.len()), new);
    next
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn c(type_: &str, status: &str, at: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_second(at).unwrap()),
        }
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let list = vec![c("A", "True", 1), c("B", "False", 2)];
        let same = with_condition(&list, c("B", "False", 9));
        assert_eq!(same, list);
        let flipped = with_condition(&list, c("B", "True", 9));
        assert_eq!(flipped[1], c("B", "True", 9));
        assert_eq!(flipped[0], list[0]);
        let added = with_condition(&list, c("C", "True", 5));
        assert_eq!(added.len(), 3);
        assert_eq!(added[2], c("C", "True", 5));
        // The first of several keeps its place.
        assert_eq!(
            with_condition(&list, c("A", "False", 7))[0],
            c("A", "False", 7)
        );
    }
}
