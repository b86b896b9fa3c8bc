//! Rule S4 (SPEC 2.2): the `status.interceptors[]` entries, one per target interceptor.
//!
//! Which entry may change: the entry of an interceptor that is active before **or** after the
//! update. So the active interceptor writes its own progress, the controller may set the
//! `activationTime` of the interceptor it activates, and the writer that deactivates an
//! interceptor (e.g. the controller finishing the imperative eviction) may record its
//! completion in the same update. An interceptor that was handed off can no longer write.
//!
//! `activationTime` changes only in the update that activates that interceptor and, because it
//! anchors the heartbeat deadline just like `heartbeatTime`, it may not lie in the future (beyond
//! the clock skew) either.

use std::borrow::Cow;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::admission::Settings;
use crate::api::{EvictionRequestStatus, InterceptorStatus, MAX_INTERCEPTOR_MESSAGE_BYTES};

/// The names of `status.targetInterceptors`, in order.
pub(super) fn target_names(status: &EvictionRequestStatus) -> Vec<&str> {
    status
        .target_interceptors
        .iter()
        .map(|t| t.name.as_str())
        .collect()
}

/// An entry as the rules read it: the zero value a typed client writes for a field it leaves
/// unset counts as unset. Seed 000 declares `InterceptorStatus.message` required, so a Go client
/// sends `message: ""` in every entry it writes; times it leaves unset come as absent or `null`,
/// which decode as unset already. Without this, a Go client initialising `status.interceptors`
/// (or writing back a status it read, with `""` where nothing was stored) would change entries
/// that are not the active interceptor's (rule S4).
fn as_read(entry: &InterceptorStatus) -> Cow<'_, InterceptorStatus> {
    if entry.message.as_deref() == Some("") {
        Cow::Owned(InterceptorStatus {
            message: None,
            ..entry.clone()
        })
    } else {
        Cow::Borrowed(entry)
    }
}

/// S4: names equal `targetInterceptors` in order; only the active entry changes, within the
/// per-field rules of [`Entry`]. Initialising the whole list at once compares every entry with
/// an entry that holds only its name. Zero values of a typed client count as unset ([`as_read`]).
pub(super) fn s4_interceptors(
    was: &EvictionRequestStatus,
    is: &EvictionRequestStatus,
    now: Timestamp,
    settings: &Settings,
) -> Result<(), String> {
    let targets = target_names(is);
    let entries: Vec<&str> = is.interceptors.iter().map(|i| i.name.as_str()).collect();
    if entries != targets {
        return Err(format!(
            "status.interceptors must hold one entry per status.targetInterceptors entry, in the same order \
             (rule S4): expected names {targets:?}, got {entries:?}"
        ));
    }
    let activating = is
        .active_interceptors
        .first()
        .filter(|a| !was.active_interceptors.contains(a));
    let writable = |name: &String| {
        was.active_interceptors.contains(name) || is.active_interceptors.contains(name)
    };
    for (i, new) in is.interceptors.iter().enumerate() {
        let new = as_read(new);
        let new = new.as_ref();
        let old = was
            .interceptors
            .get(i)
            .filter(|o| o.name == new.name)
            .map(|o| as_read(o).into_owned())
            .unwrap_or_else(|| InterceptorStatus {
                name: new.name.clone(),
                ..InterceptorStatus::default()
            });
        if old == *new {
            continue;
        }
        if !writable(&new.name) {
            return Err(format!(
                "status.interceptors[{i}] ({}) cannot change (rule S4): only the entry of the active interceptor \
                 {:?} may change",
                new.name, is.active_interceptors
            ));
        }
        let entry = Entry {
            index: i,
            old: &old,
            new,
            activating: activating == Some(&new.name),
            now,
            settings,
        };
        entry.check()?;
    }
    Ok(())
}

/// One changed entry of the active interceptor.
struct Entry<'a> {
    index: usize,
    old: &'a InterceptorStatus,
    new: &'a InterceptorStatus,
    /// This update activates the interceptor.
    activating: bool,
    now: Timestamp,
    settings: &'a Settings,
}

impl Entry<'_> {
    fn check(&self) -> Result<(), String> {
        self.activation_time()?;
        self.heartbeat_time()?;
        self.set_once_near_now("startTime", &self.old.start_time, &self.new.start_time)?;
        self.set_once_near_now(
            "completionTime",
            &self.old.completion_time,
            &self.new.completion_time,
        )?;
        self.expected_finish_time()?;
        self.message()
    }

    fn field(&self, name: &str) -> String {
        format!(
            "status.interceptors[{}].{name} ({})",
            self.index, self.new.name
        )
    }

    fn latest_allowed(&self) -> Timestamp {
        self.now
            .checked_add(self.settings.clock_skew)
            .unwrap_or(Timestamp::MAX)
    }

    fn earliest_allowed(&self) -> Timestamp {
        self.now
            .checked_sub(self.settings.clock_skew)
            .unwrap_or(Timestamp::MIN)
    }

    fn skew(&self) -> String {
        humantime::format_duration(self.settings.clock_skew).to_string()
    }

    fn activation_time(&self) -> Result<(), String> {
        if self.old.activation_time == self.new.activation_time {
            return Ok(());
        }
        if !self.activating {
            return Err(format!(
                "{} can only be set in the update that activates the interceptor (rule S4)",
                self.field("activationTime")
            ));
        }
        match &self.new.activation_time {
            Some(Time(t)) if *t > self.latest_allowed() => Err(format!(
                "{} {t} is in the future (rule S4): it may be at most {} after now ({})",
                self.field("activationTime"),
                self.skew(),
                self.now
            )),
            _ => Ok(()),
        }
    }

    fn heartbeat_time(&self) -> Result<(), String> {
        if self.old.heartbeat_time == self.new.heartbeat_time {
            return Ok(());
        }
        let Some(Time(new)) = &self.new.heartbeat_time else {
            return Err(format!(
                "{} cannot be removed (rule S4): it never decreases",
                self.field("heartbeatTime")
            ));
        };
        if *new > self.latest_allowed() {
            return Err(format!(
                "{} {new} is in the future (rule S4): it may be at most {} after now ({})",
                self.field("heartbeatTime"),
                self.skew(),
                self.now
            ));
        }
        match &self.old.heartbeat_time {
            Some(Time(old)) => self.heartbeat_step(*old, *new),
            None if self.new.start_time.is_none() => Err(format!(
                "{}: the first heartbeat must come with startTime (rule S4); set startTime in the same update",
                self.field("heartbeatTime")
            )),
            None => Ok(()),
        }
    }

    fn heartbeat_step(&self, old: Timestamp, new: Timestamp) -> Result<(), String> {
        let min = self.settings.min_heartbeat_interval;
        if new >= old.checked_add(min).unwrap_or(Timestamp::MAX) {
            return Ok(());
        }
        Err(format!(
            "{} must move forward by at least {} (rule S4): it was {old}, not {new}; send heartbeats less often",
            self.field("heartbeatTime"),
            humantime::format_duration(min)
        ))
    }

    fn set_once_near_now(
        &self,
        name: &str,
        old: &Option<Time>,
        new: &Option<Time>,
    ) -> Result<(), String> {
        if old == new {
            return Ok(());
        }
        match (old, new) {
            (Some(Time(old)), _) => Err(format!(
                "{} is set once and then immutable (rule S4): it is {old}",
                self.field(name)
            )),
            (None, Some(Time(t)))
                if !(self.earliest_allowed()..=self.latest_allowed()).contains(t) =>
            {
                Err(format!(
                    "{} {t} must be within {} of now ({}) when it is set (rule S4)",
                    self.field(name),
                    self.skew(),
                    self.now
                ))
            }
            _ => Ok(()),
        }
    }

    fn expected_finish_time(&self) -> Result<(), String> {
        if self.old.expected_finish_time == self.new.expected_finish_time {
            return Ok(());
        }
        match &self.new.expected_finish_time {
            Some(Time(t)) if *t < self.earliest_allowed() => Err(format!(
                "{} {t} is in the past (rule S4): an expected finish time must not be before now ({}, {} skew \
                 allowed)",
                self.field("expectedFinishTime"),
                self.now,
                self.skew()
            )),
            _ => Ok(()),
        }
    }

    fn message(&self) -> Result<(), String> {
        let len = self.new.message.as_ref().map_or(0, String::len);
        if len <= MAX_INTERCEPTOR_MESSAGE_BYTES {
            return Ok(());
        }
        Err(format!(
            "{} is {len} bytes; at most {MAX_INTERCEPTOR_MESSAGE_BYTES} are allowed (rule S4)",
            self.field("message")
        ))
    }
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::super::fixtures::*;
    use crate::api::CONDITION_EVICTED;

    /// `a` active, started and heartbeating since ten minutes ago.
    fn running() -> StatusBuilder {
        initialized().a_running(-600)
    }

    /// `a` just activated, not started.
    fn activated() -> StatusBuilder {
        initialized().active(&[A]).activated(A, -600)
    }

    #[rstest]
    #[case::s4_initialise_all_at_once_allowed(status(), initialized(), Expect::Allow)]
    #[case::s4_activation_time_on_activation_allowed(initialized(), initialized().active(&[A]).activated(A, 0), Expect::Allow)]
    #[case::s4_activation_with_start_and_heartbeat_allowed(initialized(), initialized().active(&[A]).activated(A, 0).started(A, 0).heartbeat(A, 0), Expect::Allow)]
    #[case::s4_activation_time_within_skew_allowed(initialized(), initialized().active(&[A]).activated(A, 10), Expect::Allow)]
    #[case::s4_heartbeat_allowed(running(), running().heartbeat(A, 0), Expect::Allow)]
    #[case::s4_heartbeat_within_skew_allowed(running(), running().heartbeat(A, 10), Expect::Allow)]
    #[case::s4_heartbeat_min_step_allowed(running().heartbeat(A, -60), running().heartbeat(A, 0), Expect::Allow)]
    #[case::s4_first_heartbeat_with_start_allowed(activated(), activated().started(A, 0).heartbeat(A, 0), Expect::Allow)]
    #[case::s4_start_without_heartbeat_allowed(activated(), activated().started(A, -10), Expect::Allow)]
    #[case::s4_completion_allowed(running(), running().completed(A, 5), Expect::Allow)]
    #[case::s4_expected_finish_allowed(running(), running().expected(A, 3600), Expect::Allow)]
    #[case::s4_expected_finish_within_skew_allowed(running(), running().expected(A, -10), Expect::Allow)]
    #[case::s4_message_allowed(running(), running().message(A, &"x".repeat(32768)), Expect::Allow)]
    #[case::s4_typed_client_initialisation_with_empty_messages_allowed(
        status(),
        typed_client(initialized()),
        Expect::Allow
    )]
    #[case::s4_typed_client_initialisation_on_activation_allowed(status(), typed_client(initialized()).active(&[A]).activated(A, 0), Expect::Allow)]
    #[case::s4_typed_client_writes_back_empty_messages_allowed(running(), typed_client(running()).heartbeat(A, 0), Expect::Allow)]
    #[case::s4_typed_client_empty_message_over_stored_empty_allowed(typed_client(running()), running().heartbeat(A, 0), Expect::Allow)]
    #[case::s4_deactivated_entry_may_finish_allowed(running(), running().completed(A, 0).active(&[]).condition(CONDITION_EVICTED, "True"), Expect::Allow)]
    fn allowed(#[case] old: StatusBuilder, #[case] new: StatusBuilder, #[case] expect: Expect) {
        check(&status_update(old, new), expect);
    }

    #[rstest]
    #[case::s4_names_out_of_order_denied(initialized(), initialized().entries(&[B, A, IMP]), "status.interceptors must hold one entry per status.targetInterceptors entry, in the same order (rule S4)")]
    #[case::s4_targets_without_entries_denied(status(), status().targets_only(&[A, IMP]), "expected names [\"a.example.com\", \"imperative-eviction.k8s.io\"], got []")]
    #[case::s4_entry_without_target_denied(status(), status().entries(&[A]), "(rule S4)")]
    #[case::s4_initialise_with_progress_denied(status(), initialized().started(B, 0), "status.interceptors[1] (b.example.com) cannot change (rule S4): only the entry of the active interceptor")]
    #[case::s4_other_entry_denied(running(), running().started(B, 0).heartbeat(B, 0), "status.interceptors[1] (b.example.com) cannot change (rule S4)")]
    #[case::s4_handed_off_entry_denied(running().completed(A, -5).processed(&[A]).active(&[B]), running().completed(A, -5).processed(&[A]).active(&[B]).heartbeat(A, 0), "status.interceptors[0] (a.example.com) cannot change (rule S4)")]
    #[case::s4_activation_time_later_denied(running(), running().activated(A, 0), "status.interceptors[0].activationTime (a.example.com) can only be set in the update that activates the interceptor (rule S4)")]
    #[case::s4_activation_time_in_future_denied(initialized(), initialized().active(&[A]).activated(A, 11), "activationTime (a.example.com) 2030-01-01T00:00:11Z is in the future (rule S4)")]
    #[case::s4_heartbeat_future_denied(running(), running().heartbeat(A, 11), "status.interceptors[0].heartbeatTime (a.example.com) 2030-01-01T00:00:11Z is in the future (rule S4): it may be at most 10s after now")]
    #[case::s4_heartbeat_backwards_denied(running(), running().heartbeat(A, -700), "heartbeatTime (a.example.com) must move forward by at least 1m (rule S4)")]
    #[case::s4_heartbeat_too_frequent_denied(running().heartbeat(A, -30), running().heartbeat(A, 0), "must move forward by at least 1m (rule S4): it was 2029-12-31T23:59:30Z, not 2030-01-01T00:00:00Z")]
    #[case::s4_heartbeat_removed_denied(running(), running().no_heartbeat(A), "heartbeatTime (a.example.com) cannot be removed (rule S4)")]
    #[case::s4_first_heartbeat_without_start_denied(activated(), activated().heartbeat(A, 0), "the first heartbeat must come with startTime (rule S4)")]
    #[case::s4_start_changed_denied(running(), running().started(A, 0), "status.interceptors[0].startTime (a.example.com) is set once and then immutable (rule S4)")]
    #[case::s4_start_not_now_denied(activated(), activated().started(A, -60), "startTime (a.example.com) 2029-12-31T23:59:00Z must be within 10s of now")]
    #[case::s4_completion_not_now_denied(running(), running().completed(A, 30), "completionTime (a.example.com) 2030-01-01T00:00:30Z must be within 10s of now")]
    #[case::s4_completion_changed_denied(running().completed(A, -5), running().completed(A, 0), "completionTime (a.example.com) is set once and then immutable (rule S4)")]
    #[case::s4_expected_finish_in_past_denied(running(), running().expected(A, -11), "expectedFinishTime (a.example.com) 2029-12-31T23:59:49Z is in the past (rule S4)")]
    #[case::s4_message_of_another_entry_still_denied(running(), running().message(B, "x"), "status.interceptors[1] (b.example.com) cannot change (rule S4)")]
    #[case::s4_typed_client_cannot_empty_another_entrys_message_denied(running().message(B, "moved"), running().message(B, ""), "status.interceptors[1] (b.example.com) cannot change (rule S4)")]
    #[case::s4_message_too_long_denied(running(), running().message(A, &"x".repeat(32769)), "status.interceptors[0].message (a.example.com) is 32769 bytes; at most 32768 are allowed (rule S4)")]
    fn denied(
        #[case] old: StatusBuilder,
        #[case] new: StatusBuilder,
        #[case] message: &'static str,
    ) {
        check(&status_update(old, new), Expect::Deny(message));
    }

    /// As a typed Go client writes the status: `message: ""` in every entry that has none.
    fn typed_client(mut b: StatusBuilder) -> StatusBuilder {
        for e in &mut b.0.interceptors {
            e.message.get_or_insert_with(String::new);
        }
        b
    }

    /// The zero values of times, `null` or absent, read the same: unset.
    #[test]
    fn s4_null_times_read_as_unset() {
        let entry = |times: serde_json::Value| -> crate::api::InterceptorStatus {
            let mut v = serde_json::json!({"name": A, "message": ""});
            if let serde_json::Value::Object(t) = times {
                v.as_object_mut().unwrap().extend(t);
            }
            serde_json::from_value(v).unwrap()
        };
        let nulls = entry(serde_json::json!({
            "activationTime": null, "startTime": null, "heartbeatTime": null,
            "expectedFinishTime": null, "completionTime": null
        }));
        let absent = entry(serde_json::json!({}));
        assert_eq!(nulls, absent);
        assert_eq!(
            super::as_read(&nulls).into_owned(),
            crate::api::InterceptorStatus {
                name: A.into(),
                ..Default::default()
            }
        );
    }
}
