//! Leader election on a `coordination.k8s.io` Lease, the way client-go's elector keeps one, with
//! the guarantee a shared cluster needs: a leader that cannot renew its Lease stops leading
//! ([`RENEW_DEADLINE`]) before the Lease can expire for the others ([`LEASE_DURATION`]), so two
//! replicas never write at once. Others judge expiry by their own clock, from when they saw the
//! Lease last change, never by comparing clocks across machines.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::time::Instant;

/// How long a Lease stays held without a renewal, as the others count it.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A leader that has not renewed for this long stops leading: a third of the Lease is left for
/// its in-flight requests to end (they are cut when the process exits).
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often the leader renews, and how often a standby looks whether the Lease is free.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// How often a healthy leader renews: well inside the deadline, so one failed renewal is retried
/// several times before leadership ends.
const RENEW_PERIOD: Duration = Duration::from_secs(4);

// A leader gives up with a request's time to spare before its Lease can lapse, and a failed
// renewal is retried before it gives up.
const _: () = assert!(RENEW_DEADLINE.as_secs() + RETRY_PERIOD.as_secs() < LEASE_DURATION.as_secs());
const _: () = assert!(RENEW_PERIOD.as_secs() + RETRY_PERIOD.as_secs() < RENEW_DEADLINE.as_secs());

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("the Lease {lease} was taken by {holder}")]
    TakenBy { lease: String, holder: String },
    #[error(
        "the Lease {lease} was not renewed for {:?} (last error: {last_error})",
        RENEW_DEADLINE
    )]
    NotRenewed { lease: String, last_error: String },
}

/// What a standby does on seeing the Lease as `record`.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// It is free (no holder, or not renewed for its duration as this process saw it): take it.
    Take,
    /// Another holds it: look again.
    Wait,
}

/// A Lease as a standby last saw it change, by its own clock.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    duration: Duration,
    since: Instant,
}

impl Observed {
    /// The record seen at `now`, given what was seen before: a record that did not change keeps
    /// the time it was first seen.
    pub fn see(previous: Option<Self>, spec: &LeaseSpec, now: Instant) -> Self {
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(LEASE_DURATION, Duration::from_secs);
        let since = match previous {
            Some(seen) if seen.holder == holder && seen.renew_time == spec.renew_time => seen.since,
            _ => now,
        };
        Self {
            holder,
            renew_time: spec.renew_time.clone(),
            duration,
            since,
        }
    }

    pub fn step(&self, identity: &str, now: Instant) -> Step {
        match &self.holder {
            None => Step::Take,
            Some(holder) if holder == identity => Step::Take,
            Some(_) if now.duration_since(self.since) >= self.duration => Step::Take,
            Some(_) => Step::Wait,
        }
    }
}

/// One process's part in the election of `name`.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
}

/// The Lease as this process holds it: the version its last write made.
pub struct Held {
    resource_version: Option<String>,
}

impl Elector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str) -> Self {
        Self {
            api,
            name: name.to_owned(),
            identity: identity.to_owned(),
        }
    }

    /// Waits until this process holds the Lease. Errors are logged and retried.
    pub async fn acquire(&self) -> Held {
        let mut observed = None;
        loop {
            match self.try_acquire(&mut observed).await {
                Ok(Some(held)) => return held,
                Ok(None) => {}
                Err(error) => tracing::warn!(lease = %self.name, %error, "cannot take the Lease"),
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    }

    async fn try_acquire(
        &self,
        observed: &mut Option<Observed>,
    ) -> Result<Option<Held>, kube::Error> {
        let now = Timestamp::now();
        let Some(lease) = bounded(self.api.get_opt(&self.name)).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.record(now, 0)),
            };
            return match bounded(self.api.create(&PostParams::default(), &lease)).await {
                Ok(made) => Ok(Some(Held {
                    resource_version: made.metadata.resource_version,
                })),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
                Err(error) => Err(error),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let seen = Observed::see(observed.take(), &spec, Instant::now());
        let step = seen.step(&self.identity, Instant::now());
        *observed = Some(seen);
        if step == Step::Wait {
            return Ok(None);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let taken_over = spec.holder_identity.as_deref() != Some(self.identity.as_str());
        let mut record = self.record(now, transitions + i32::from(taken_over));
        if !taken_over {
            record.acquire_time = spec.acquire_time;
        }
        // Written over the version read: if another took it meanwhile, this write fails.
        let patch = json!({
            "metadata": {"resourceVersion": lease.metadata.resource_version},
            "spec": record,
        });
        match bounded(
            self.api
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await
        {
            Ok(written) => Ok(Some(Held {
                resource_version: written.metadata.resource_version,
            })),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(error) => Err(error),
        }
    }

    fn record(&self, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: i32::try_from(LEASE_DURATION.as_secs()).ok(),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// Renews the Lease until it is lost: taken by another, or not renewed within
    /// [`RENEW_DEADLINE`] (whatever the apiserver connection does: a hung request counts as a
    /// failed one).
    pub async fn hold(&self, held: &mut Held) -> LeaderError {
        let mut renewed = Instant::now();
        let mut last_error = String::from("none");
        loop {
            let deadline = renewed + RENEW_DEADLINE;
            // Counted from when the renewal was sent: the others count from no earlier.
            let sent = Instant::now();
            let attempt = tokio::time::timeout_at(deadline, self.renew(held));
            match attempt.await {
                Ok(Ok(())) => {
                    renewed = sent;
                    tokio::time::sleep(RENEW_PERIOD).await;
                    continue;
                }
                Ok(Err(Renewal::Taken(holder))) => {
                    return LeaderError::TakenBy {
                        lease: self.name.clone(),
                        holder,
                    };
                }
                Ok(Err(Renewal::Failed(error))) => {
                    tracing::warn!(lease = %self.name, %error, "cannot renew the Lease; retrying");
                    last_error = error.to_string();
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return LeaderError::NotRenewed {
                    lease: self.name.clone(),
                    last_error,
                };
            }
            tokio::time::sleep_until((Instant::now() + RETRY_PERIOD).min(deadline)).await;
        }
    }

    /// One renewal. A conflict with a write of this process's own (an earlier renewal that timed
    /// out here but was stored) is settled at once with the stored version: waiting for the next
    /// retry would spend the renew deadline on a Lease that is still this process's.
    async fn renew(&self, held: &mut Held) -> Result<(), Renewal> {
        let mut conflicts = 0;
        loop {
            let patch = json!({
                "metadata": {"resourceVersion": held.resource_version},
                "spec": {"holderIdentity": self.identity, "renewTime": MicroTime(Timestamp::now())},
            });
            let params = PatchParams::default();
            match bounded(self.api.patch(&self.name, &params, &Patch::Merge(&patch))).await {
                Ok(lease) => {
                    held.resource_version = lease.metadata.resource_version;
                    return Ok(());
                }
                // Deleted (its namespace going, say): this process holds nothing any more.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Err(Renewal::Taken("nobody: it was deleted".to_owned()));
                }
                // Written meanwhile: by this process's own earlier, timed-out renewal, or by another.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    let lease = bounded(self.api.get(&self.name))
                        .await
                        .map_err(Renewal::Failed)?;
                    let holder = lease
                        .spec
                        .and_then(|s| s.holder_identity)
                        .unwrap_or_default();
                    if holder != self.identity {
                        return Err(Renewal::Taken(holder));
                    }
                    held.resource_version = lease.metadata.resource_version;
                    conflicts += 1;
                    if conflicts > 1 {
                        return Err(Renewal::Failed(kube::Error::Api(status)));
                    }
                }
                Err(error) => return Err(Renewal::Failed(error)),
            }
        }
    }

    /// Gives the Lease up, so a standby leads at once; only if this process still holds it.
    pub async fn release(&self, held: &Held) {
        let patch = json!({
            "metadata": {"resourceVersion": held.resource_version},
            "spec": {"holderIdentity": null, "leaseDurationSeconds": 1,
                     "renewTime": MicroTime(Timestamp::now())},
        });
        let released = bounded(self.api.patch(
            &self.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        ))
        .await;
        match released {
            Ok(_) => tracing::info!(lease = %self.name, "released the Lease"),
            Err(error) => tracing::warn!(lease = %self.name, %error, "cannot release the Lease"),
        }
    }
}

enum Renewal {
    Taken(String),
    Failed(kube::Error),
}

/// One request to the apiserver, given up after [`RETRY_PERIOD`]: an election must never wait on
/// a connection that went silent.
async fn bounded<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(RETRY_PERIOD, request)
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(
                format!("no answer within {RETRY_PERIOD:?}").into(),
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            renew_time: Timestamp::from_second(1_800_000_000 + renewed)
                .ok()
                .map(MicroTime),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_is_free_once_it_went_unrenewed_for_its_duration_by_the_observers_clock() {
        let start = Instant::now();
        let held = spec(Some("a"), 0);
        let seen = Observed::see(None, &held, start);
        assert_eq!(seen.step("b", start + Duration::from_secs(14)), Step::Wait);
        // Seen again unchanged, it keeps the time it was first seen.
        let again = Observed::see(Some(seen), &held, start + Duration::from_secs(10));
        assert_eq!(again.step("b", start + Duration::from_secs(15)), Step::Take);
        // A renewal restarts the count, whatever the holder's clock says.
        let renewed = Observed::see(
            Some(again),
            &spec(Some("a"), -100),
            start + Duration::from_secs(14),
        );
        assert_eq!(
            renewed.step("b", start + Duration::from_secs(20)),
            Step::Wait
        );
        assert_eq!(
            renewed.step("b", start + Duration::from_secs(29)),
            Step::Take
        );
    }

    #[test]
    fn a_released_or_own_lease_is_taken_at_once() {
        let now = Instant::now();
        assert_eq!(
            Observed::see(None, &spec(None, 0), now).step("b", now),
            Step::Take
        );
        assert_eq!(
            Observed::see(None, &spec(Some(""), 0), now).step("b", now),
            Step::Take
        );
        assert_eq!(
            Observed::see(None, &spec(Some("b"), 0), now).step("b", now),
            Step::Take
        );
    }
}
