//! An elastic job's Worker count changed while it runs (`kubectl scale`, its HPA): the Worker Job
//! is resized in place. Its JobSet's Worker replicated job is one Indexed Job of as many pods as
//! workers; JobSet's `ElasticJobSet` feature lets parallelism and completions of a running
//! JobSet change together, and the Job controller then adds the highest indexes or removes them,
//! leaving the other pods running. torchrun's rendezvous takes in the new size. Pure: the
//! controller applies the patch.

use jobset_types::JobSet;
use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, ReplaceOperation, TestOperation};
use serde_json::json;

use crate::api::TrainingJob;

/// The replica type an elastic job resizes, and its replicated job (the lower-case type).
const WORKER: &str = "Worker";
/// With a Master, workers' ranks and `WORLD_SIZE` are fixed when the pods are made (and a
/// PyTorchJob's Workers are then single-pod Jobs): such a job is not resized.
const MASTER: &str = "Master";

/// The JSON patch (RFC 6902) that gives the running JobSet `live` as many Worker pods as `job`
/// asks for, if they differ and the job is elastic. `None` for a suspended JobSet: a resume
/// writes the job as it is then.
pub fn patch<K: TrainingJob>(job: &K, live: &JobSet) -> Option<Patch> {
    let specs = job.replica_specs();
    if !job.is_elastic() || specs.get(MASTER).is_some() || live.spec.suspend == Some(true) {
        return None;
    }
    let wanted = specs.get(WORKER)?.replicas.unwrap_or(1);
    let name = WORKER.to_ascii_lowercase();
    let (index, replicated) = live
        .spec
        .replicated_jobs
        .iter()
        .enumerate()
        .find(|(_, r)| r.name == name)?;
    let spec = replicated.template.spec.as_ref()?;
    // One Indexed Job of all the Worker pods, as every Worker-only job is compiled.
    if replicated.replicas != Some(1)
        || spec.parallelism == Some(wanted) && spec.completions == Some(wanted)
    {
        return None;
    }
    let index = index.to_string();
    let pointer = |field: &str| {
        PointerBuf::from_tokens(["spec", "replicatedJobs", &index, "template", "spec", field])
    };
    let replace = |field: &str| {
        PatchOperation::Replace(ReplaceOperation {
            path: pointer(field),
            value: json!(wanted),
        })
    };
    Some(Patch(vec![
        // The replicated job at that index is still the Worker's.
        PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["spec", "replicatedJobs", &index, "name"]),
            value: json!(name),
        }),
        replace("parallelism"),
        replace("completions"),
    ]))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::api::{PaddleJob, PyTorchJob, TFJob};
    use crate::compile::Options;
    use crate::kinds::compile_manifest;

    fn manifest(kind: &str, workers: i32, elastic: bool) -> Value {
        let container = if kind == "PaddleJob" {
            "paddle"
        } else {
            "pytorch"
        };
        let replica = |replicas: i32| {
            json!({"replicas": replicas, "template": {"spec": {"containers": [
                {"name": container, "image": "img"}]}}})
        };
        let field = if kind == "PaddleJob" {
            "paddleReplicaSpecs"
        } else {
            "pytorchReplicaSpecs"
        };
        let mut job = json!({"apiVersion": "kubeflow.org/v1", "kind": kind,
            "metadata": {"name": "elastic", "namespace": "ns"},
            "spec": {field: {"Worker": replica(workers)}}});
        if elastic {
            job["spec"]["elasticPolicy"] = json!({"minReplicas": 1, "maxReplicas": 8});
        }
        job
    }

    fn compiled(manifest: Value) -> JobSet {
        compile_manifest(manifest, &Options::default())
            .map(|c| c.jobset)
            .unwrap_or_else(|e| panic!("compile: {e}"))
    }

    fn live(kind: &str, workers: i32) -> JobSet {
        compiled(manifest(kind, workers, true))
    }

    fn job<K: TrainingJob>(kind: &str, workers: i32, elastic: bool) -> K {
        serde_json::from_value(manifest(kind, workers, elastic))
            .unwrap_or_else(|e| panic!("{kind}: {e}"))
    }

    fn applied(live: &JobSet, patch: &Patch) -> JobSet {
        let mut value = serde_json::to_value(live).unwrap_or_default();
        json_patch::patch(&mut value, patch).unwrap_or_else(|e| panic!("patch: {e}"));
        serde_json::from_value(value).unwrap_or_else(|e| panic!("JobSet: {e}"))
    }

    fn resizes<K: TrainingJob>(kind: &str) {
        let live = live(kind, 2);
        assert!(
            patch(&job::<K>(kind, 2, true), &live).is_none(),
            "{kind}: no change"
        );
        for workers in [4, 1] {
            let patch = patch(&job::<K>(kind, workers, true), &live)
                .unwrap_or_else(|| panic!("{kind}: resized to {workers}"));
            let resized = applied(&live, &patch);
            let worker = resized
                .spec
                .replicated_jobs
                .iter()
                .find(|r| r.name == "worker");
            let spec = worker
                .and_then(|w| w.template.spec.clone())
                .unwrap_or_default();
            assert_eq!(
                (spec.parallelism, spec.completions),
                (Some(workers), Some(workers))
            );
            let mut unchanged = resized.clone();
            unchanged.spec.replicated_jobs = live.spec.replicated_jobs.clone();
            assert_eq!(
                serde_json::to_value(&unchanged).ok(),
                serde_json::to_value(&live).ok(),
                "{kind}: nothing else changes"
            );
        }
        let mut suspended = live.clone();
        suspended.spec.suspend = Some(true);
        assert!(
            patch(&job::<K>(kind, 4, true), &suspended).is_none(),
            "{kind}: suspended"
        );
        assert!(
            patch(&job::<K>(kind, 4, false), &live).is_none(),
            "{kind}: not elastic"
        );
    }

    #[test]
    fn a_running_elastic_job_gets_as_many_worker_pods_as_it_asks_for() {
        resizes::<PyTorchJob>("PyTorchJob");
        resizes::<PaddleJob>("PaddleJob");
    }

    #[test]
    fn a_job_with_a_master_is_not_resized() {
        let mut with_master = manifest("PyTorchJob", 2, true);
        with_master["spec"]["pytorchReplicaSpecs"]["Master"] =
            with_master["spec"]["pytorchReplicaSpecs"]["Worker"].clone();
        with_master["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = json!(1);
        let live = compiled(with_master.clone());
        with_master["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = json!(3);
        let job: PyTorchJob =
            serde_json::from_value(with_master).unwrap_or_else(|e| panic!("job: {e}"));
        assert!(patch(&job, &live).is_none());
    }

    #[test]
    fn the_patch_fails_if_the_replicated_job_moved() {
        let live = live("PyTorchJob", 2);
        let patch = patch(&job::<PyTorchJob>("PyTorchJob", 3, true), &live);
        let patch = patch.unwrap_or_else(|| panic!("resized"));
        let mut moved = serde_json::to_value(&live).unwrap_or_default();
        moved["spec"]["replicatedJobs"][0]["name"] = json!("other");
        assert!(json_patch::patch(&mut moved, &patch).is_err());
    }

    #[test]
    fn a_kind_without_elastic_policy_is_never_resized() {
        let tf: TFJob = serde_json::from_value(json!({"apiVersion": "kubeflow.org/v1",
            "kind": "TFJob", "metadata": {"name": "tf", "namespace": "ns"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3, "template": {"spec": {
                "containers": [{"name": "tensorflow", "image": "img"}]}}}}}}))
        .unwrap_or_else(|e| panic!("TFJob: {e}"));
        assert!(patch(&tf, &live("PyTorchJob", 2)).is_none());
    }
}
