//! The checks every kind shares, mirroring the CRD's CEL rules so `trainset render` and the
//! controller refuse what the apiserver would, with the same field names.

use jobset_types::keys::kueue::MAX_POD_SETS;
use kube::Resource;

use super::{CompileError, Framework};
use crate::api::TrainingJob;

/// `<name>-<type>-<job index>-<pod index>-<5 characters>` must fit in 63 characters.
const POD_NAME_LIMIT: usize = 63;

pub fn common<F: Framework>(job: &F::Job) -> Result<(), CompileError> {
    let name = job.meta().name.as_deref().unwrap_or_default();
    if !is_dns1035_label(name) {
        return Err(CompileError::invalid(
            "metadata.name",
            format!(
                "{name:?} must be a DNS-1035 label: at most 63 lower-case letters, digits and '-', starting with a letter and ending with a letter or digit"
            ),
        ));
    }
    if let Some(policy) = job.run_policy() {
        let limits = [
            ("backoffLimit", policy.backoff_limit.map(i64::from)),
            (
                "ttlSecondsAfterFinished",
                policy.ttl_seconds_after_finished.map(i64::from),
            ),
            ("activeDeadlineSeconds", policy.active_deadline_seconds),
        ];
        for (name, value) in limits {
            if let Some(value) = value.filter(|v| *v < 0) {
                return Err(CompileError::invalid(
                    format!("spec.runPolicy.{name}"),
                    format!("must be at least 0, got {value}"),
                ));
            }
        }
    }
    let field = format!("spec.{}", F::Job::REPLICA_SPECS_FIELD);
    let specs = job.replica_specs();
    if specs.is_empty() {
        return Err(CompileError::invalid(
            field,
            "must hold at least one replica spec",
        ));
    }
    if specs.0.len() > MAX_POD_SETS {
        return Err(CompileError::invalid(
            field,
            format!("at most {MAX_POD_SETS} replica types compile into one JobSet"),
        ));
    }
    for (key, spec) in specs.iter() {
        let at = format!("{field}.{key}");
        if !F::Job::REPLICA_TYPES
            .iter()
            .any(|t| t.eq_ignore_ascii_case(key))
        {
            return Err(CompileError::invalid(
                at,
                format!(
                    "unknown replica type; {} takes {}",
                    F::Job::kind(&()),
                    F::Job::REPLICA_TYPES.join(", ")
                ),
            ));
        }
        if specs
            .iter()
            .filter(|(other, _)| other.eq_ignore_ascii_case(key))
            .count()
            > 1
        {
            return Err(CompileError::invalid(
                at,
                "each replica type may be given only once, whatever its case",
            ));
        }
        let replicas = spec.replicas_or(F::default_replicas(key));
        if replicas < 0 {
            return Err(CompileError::invalid(
                format!("{at}.replicas"),
                format!("must be at least 0, got {replicas}"),
            ));
        }
        let containers = spec
            .template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .map(|p| p.containers.as_slice())
            .unwrap_or_default();
        if containers.is_empty() {
            return Err(CompileError::invalid(
                format!("{at}.template.spec.containers"),
                "must hold at least one container",
            ));
        }
        for (i, container) in containers.iter().enumerate() {
            if container.image.as_deref().unwrap_or_default().is_empty() {
                return Err(CompileError::invalid(
                    format!("{at}.template.spec.containers[{i}].image"),
                    "every container needs an image",
                ));
            }
        }
        if let Some(default) = F::Job::DEFAULT_CONTAINER
            && !containers.iter().any(|c| c.name == default)
        {
            return Err(CompileError::invalid(
                format!("{at}.template.spec.containers"),
                format!("needs a container named {default}"),
            ));
        }
        let widest_index = (replicas.max(1) - 1).to_string();
        // One of the two indexes is always 0: "-" type "-" index "-0-" five characters.
        let pod_name = name.len() + 1 + key.len() + 1 + widest_index.len() + 3 + 5;
        if pod_name > POD_NAME_LIMIT {
            return Err(CompileError::invalid(
                "metadata.name",
                format!(
                    "is too long: pod names of {key} would have {pod_name} characters, more than {POD_NAME_LIMIT}"
                ),
            ));
        }
    }
    Ok(())
}

/// Fails on replica type `replica_type` when its replica count is not `expected`.
pub fn replicas_exactly<F: Framework>(
    job: &F::Job,
    replica_type: &str,
    expected: i32,
) -> Result<(), CompileError> {
    for (key, spec) in job
        .replica_specs()
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(replica_type))
    {
        let replicas = spec.replicas_or(F::default_replicas(replica_type));
        if replicas != expected {
            return Err(CompileError::invalid(
                format!("spec.{}.{key}.replicas", F::Job::REPLICA_SPECS_FIELD),
                format!("{replica_type} replicas must be exactly {expected}, got {replicas}"),
            ));
        }
    }
    Ok(())
}

/// Fails when the job has no replica spec of type `replica_type`.
pub fn required<F: Framework>(job: &F::Job, replica_type: &str) -> Result<(), CompileError> {
    match job.replica_specs().get(replica_type) {
        Some(_) => Ok(()),
        None => Err(CompileError::invalid(
            format!("spec.{}", F::Job::REPLICA_SPECS_FIELD),
            format!("a {replica_type} replica spec is required"),
        )),
    }
}

fn is_dns1035_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.last().is_some_and(|b| *b != b'-')
}
