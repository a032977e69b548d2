//! The guards that keep `compile` bounded on any input. The apiserver already refuses a job
//! beyond `api::limits` or with a longer name; these hold for input it never saw (`trainset
//! render`, objects stored under an older CRD) before anything is allocated per replica, and
//! catch a job within the limits whose compiled objects etcd could still not store.

use serde::Serialize;

use super::{CompileError, Compiled};
use crate::api::TrainingJob;
use crate::api::limits::{MAX_REPLICAS, MAX_TOTAL_REPLICAS};

/// The largest object compile produces. etcd refuses a request over 1.5 MiB by default, and the
/// stored JobSet also carries its status and managedFields, so compiled objects get 1 MiB.
pub const MAX_OBJECT_BYTES: usize = 1 << 20;

/// Kubernetes names (and so the job's name and namespace, which every address repeats) are at
/// most this long.
pub const MAX_NAME: usize = 63;

/// The name and namespace every per-replica address repeats.
pub fn names(name: &str, namespace: &str) -> Result<(), CompileError> {
    for (field, value) in [("metadata.name", name), ("metadata.namespace", namespace)] {
        if value.len() > MAX_NAME {
            return Err(CompileError::invalid(
                field,
                format!("must be at most {MAX_NAME} characters, got {}", value.len()),
            ));
        }
    }
    Ok(())
}

/// What a pod's name under JobSet, `<jobset>-<replicated job>-<job index>-<pod index>-<5
/// random>`, has besides its four parts: three `-` between them, and the `-` and five random
/// characters the Job controller adds.
pub const POD_NAME_SEPARATORS: usize = 3 + 6;

/// Why `metadata.name` is too long for its pods, given the pieces as text: the admission
/// policy (`crate::trainjob_names`) passes CEL expressions, so both say the same.
pub fn pod_names_too_long(replicated: &str, longest: &str, spare: &str) -> String {
    format!(
        "Too long: the names of the {replicated} pods would take {longest} \
         characters (with the 5 random ones the Job controller adds), more than the {MAX_NAME} a \
         DNS label may: shorten the name by {spare}"
    )
}

/// A pod's name under JobSet is a DNS label: the JobSet webhook refuses a JobSet whose longest
/// one would pass [`MAX_NAME`] (and without that webhook the pods could not be made). Each
/// replicated job is given as its name, its replicas and its pods per Job; the error names the
/// one with the longest pod names (the first, where several tie).
pub fn pod_names<'a>(
    job: &str,
    replicated_jobs: impl IntoIterator<Item = (&'a str, i32, i32)>,
) -> Result<(), CompileError> {
    let digits = |count: i32| count.saturating_sub(1).max(0).to_string().len();
    let longest = replicated_jobs
        .into_iter()
        .map(|(replicated, replicas, pods)| {
            let length = job.len()
                + replicated.len()
                + digits(replicas)
                + digits(pods)
                + POD_NAME_SEPARATORS;
            (replicated, length)
        })
        .fold(None, |longest: Option<(&str, usize)>, next| match longest {
            Some(kept) if kept.1 >= next.1 => Some(kept),
            _ => Some(next),
        });
    match longest {
        Some((replicated, length)) if length > MAX_NAME => Err(CompileError::invalid(
            "metadata.name",
            pod_names_too_long(
                replicated,
                &length.to_string(),
                &(length - MAX_NAME).to_string(),
            ),
        )),
        _ => Ok(()),
    }
}

/// The replicas of each replica type of a v1 job (given as type and count), each within
/// [`MAX_REPLICAS`] and all together within [`MAX_TOTAL_REPLICAS`].
pub fn replicas<'a, J: TrainingJob>(
    counts: impl IntoIterator<Item = (&'a str, i32)>,
) -> Result<(), CompileError> {
    let mut total: i64 = 0;
    for (replica_type, replicas) in counts {
        if !(0..=MAX_REPLICAS).contains(&replicas) {
            return Err(CompileError::invalid(
                format!("spec.{}[{replica_type}].replicas", J::REPLICA_SPECS_FIELD),
                format!("Invalid value: {replicas}: must be between 0 and {MAX_REPLICAS}"),
            ));
        }
        total += i64::from(replicas);
    }
    if total > i64::from(MAX_TOTAL_REPLICAS) {
        return Err(CompileError::invalid(
            format!("spec.{}", J::REPLICA_SPECS_FIELD),
            format!(
                "at most {MAX_TOTAL_REPLICAS} replicas in all replica types together, got {total}"
            ),
        ));
    }
    Ok(())
}

/// Fails when one of the compiled objects is larger than [`MAX_OBJECT_BYTES`] as JSON.
pub fn object_sizes(compiled: &Compiled) -> Result<(), CompileError> {
    fits("JobSet", &compiled.jobset)?;
    if let Some(config_map) = &compiled.config_map {
        fits("ConfigMap", config_map)?;
    }
    if let Some(secret) = &compiled.secret {
        fits("Secret", secret)?;
    }
    Ok(())
}

fn fits(kind: &str, object: &impl Serialize) -> Result<(), CompileError> {
    let mut counter = Counter(0);
    // Counting cannot fail; a serialization error would only mean an unknown size.
    let _ = serde_json::to_writer(&mut counter, object);
    if counter.0 > MAX_OBJECT_BYTES {
        return Err(CompileError::TooLarge {
            kind: kind.to_owned(),
            bytes: counter.0,
        });
    }
    Ok(())
}

/// Counts the bytes written to it.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_longest_pod_name_is_a_dns_label() {
        let torchtune =
            |job: &str| super::pod_names(job, [("dataset-initializer", 1, 1), ("node", 1, 16)]);
        // `<33>-dataset-initializer-0-0-abcde` has 63 characters, `<34>-...` 64.
        assert!(torchtune(&"a".repeat(33)).is_ok());
        let refused = torchtune(&"a".repeat(34)).map_err(|e| e.to_string());
        assert_eq!(
            refused,
            Err(
                "metadata.name: Too long: the names of the dataset-initializer pods would take \
                 64 characters (with the 5 random ones the Job controller adds), more than the 63 \
                 a DNS label may: shorten the name by 1"
                    .to_owned()
            )
        );
        // Indexes count in digits: the 16th pod ends in `-0-15`.
        assert!(super::pod_names(&"a".repeat(47), [("node", 1, 16)]).is_ok());
        assert!(super::pod_names(&"a".repeat(48), [("node", 1, 16)]).is_err());
    }
}
