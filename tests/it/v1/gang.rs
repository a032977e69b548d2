//! v1 jobs under each gang scheduler: the PodGroup (or Workload and PodGroups) made beside the
//! JobSet, and what each pod carries to join it.

use serde_json::{Value, json};
use trainset::compile::gang::GangScheduler;

use crate::support::{compile_with_gang, gang_yaml};

fn pytorchjob(scheduling_policy: Value) -> Value {
    let pod = |cpu: &str| {
        json!({"spec": {"containers": [{
            "name": "pytorch", "image": "trainer:1",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}
        }]}})
    };
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "gang", "namespace": "team-a", "uid": "uid-1",
                     "annotations": {"team": "a"}},
        "spec": {
            "runPolicy": {"schedulingPolicy": scheduling_policy},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": pod("500m")},
                "Worker": {"replicas": 3, "template": pod("2")}
            }
        }
    })
}

fn scheduler_plugins() -> GangScheduler {
    GangScheduler::SchedulerPlugins {
        scheduler_name: "scheduler-plugins-scheduler".to_owned(),
    }
}

fn compiled(manifest: &Value, scheduler: &GangScheduler) -> String {
    let compiled = compile_with_gang(manifest, None, Some(scheduler))
        .unwrap_or_else(|e| panic!("compiles: {e}"));
    gang_yaml(&compiled)
}

#[test]
fn scheduler_plugins_pod_group_counts_every_pod_and_drops_the_startup_order() {
    let policy = json!({"scheduleTimeoutSeconds": 120});
    insta::assert_snapshot!(compiled(&pytorchjob(policy), &scheduler_plugins()));
}

#[test]
fn volcano_pod_group_takes_queue_priority_and_min_available_from_the_policy() {
    let policy = json!({"minAvailable": 2, "queue": "research", "priorityClass": "high"});
    insta::assert_snapshot!(compiled(&pytorchjob(policy), &GangScheduler::Volcano));
}

#[test]
fn native_workload_has_one_group_per_ordered_replicated_job() {
    insta::assert_snapshot!(compiled(&pytorchjob(json!({})), &GangScheduler::Native));
}

#[test]
fn native_workload_without_order_is_one_gang_of_min_available() {
    let mut job = pytorchjob(json!({"minAvailable": 3}));
    // Workers only: no replicated job waits for another.
    if let Some(specs) = job["spec"]["pytorchReplicaSpecs"].as_object_mut() {
        specs.remove("Master");
    }
    insta::assert_snapshot!(compiled(&job, &GangScheduler::Native));
}

#[test]
fn given_min_resources_are_kept_in_canonical_form() {
    let policy = json!({"minResources": {"cpu": "1500m", "memory": "2048Mi"}});
    let compiled = compile_with_gang(&pytorchjob(policy), None, Some(&scheduler_plugins()))
        .unwrap_or_else(|e| panic!("compiles: {e}"));
    assert_eq!(
        compiled.gang[0].data["spec"]["minResources"],
        json!({"cpu": "1500m", "memory": "2Gi"})
    );
}

#[test]
fn a_gang_that_cannot_be_placed_is_refused_naming_the_field() {
    let min_available = "spec.runPolicy.schedulingPolicy.minAvailable";
    for (policy, scheduler, field) in [
        // The Workload API's gangs cannot change: one larger than the job never is placed.
        (
            json!({"minAvailable": 5}),
            GangScheduler::Native,
            min_available,
        ),
        (
            json!({"minAvailable": 0}),
            GangScheduler::Volcano,
            min_available,
        ),
        (
            json!({"minAvailable": 0}),
            scheduler_plugins(),
            min_available,
        ),
        (
            json!({"minResources": {"cpu": "lots"}}),
            GangScheduler::Volcano,
            "spec.runPolicy.schedulingPolicy.minResources[cpu]",
        ),
    ] {
        let error = compile_with_gang(&pytorchjob(policy.clone()), None, Some(&scheduler))
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            matches!(&error, Err(m) if m.starts_with(field)),
            "{policy} under {scheduler:?}: {error:?}"
        );
    }
}

#[test]
fn a_pod_group_larger_than_its_job_is_made_and_waits_for_the_spec_to_change() {
    // As training-operator v1.9.4: the PodGroup asks for 5 of the 4 pods, no pod is placed, and
    // a change of minAvailable (or of the replicas) is written into it while the job runs.
    for scheduler in [scheduler_plugins(), GangScheduler::Volcano] {
        let compiled = compile_with_gang(
            &pytorchjob(json!({"minAvailable": 5})),
            None,
            Some(&scheduler),
        )
        .unwrap_or_else(|e| panic!("compiles under {scheduler:?}: {e}"));
        assert_eq!(compiled.gang.len(), 1, "{scheduler:?}");
        assert_eq!(
            compiled.gang[0].data["spec"]["minMember"],
            json!(5),
            "{scheduler:?}"
        );
    }
}

#[test]
fn without_a_gang_scheduler_nothing_changes() {
    let job = pytorchjob(json!({"minAvailable": 2}));
    let objects = |scheduler| -> Result<Vec<Value>, String> {
        let compiled = compile_with_gang(&job, None, scheduler).map_err(|e| e.to_string())?;
        compiled.objects().map_err(|e| e.to_string())
    };
    let (Ok(plain), Ok(none)) = (objects(None), objects(Some(&GangScheduler::None))) else {
        panic!("compiles");
    };
    assert_eq!(plain.len(), 1, "the JobSet alone");
    assert_eq!(plain, none);
}

fn mpijob(scheduling_policy: Value) -> Value {
    let pod = |cpu: &str, priority: Option<&str>| {
        let mut spec = json!({"containers": [{
            "name": "mpi", "image": "mpi:1",
            "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu, "nvidia.com/gpu": "2"}}
        }]});
        if let Some(class) = priority {
            spec["priorityClassName"] = json!(class);
        }
        json!({"spec": spec})
    };
    json!({
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "mpi", "namespace": "team-a", "uid": "uid-2",
                     "annotations": {"scheduling.volcano.sh/queue-name": "from-annotation"}},
        "spec": {
            "runPolicy": {"schedulingPolicy": scheduling_policy},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod("1", Some("launcher-class"))},
                "Worker": {"replicas": 4, "template": {"spec": {
                    "schedulerName": "someone-else",
                    "containers": pod("2", None)["spec"]["containers"].clone()
                }}}
            }
        }
    })
}

#[test]
fn mpijob_gang_follows_mpi_operator() {
    // minAvailable 3: the launcher and two workers are counted; the queue comes from the
    // annotation, the priority class from the launcher, and the scheduler replaces the pods' own.
    let job = mpijob(json!({"minAvailable": 3}));
    insta::assert_snapshot!(compiled(&job, &GangScheduler::Volcano));
}

#[test]
fn mpijob_scheduler_plugins_timeout_defaults_to_zero() {
    let compiled = compile_with_gang(&mpijob(json!({})), None, Some(&scheduler_plugins()))
        .unwrap_or_else(|e| panic!("compiles: {e}"));
    let spec = &compiled.gang[0].data["spec"];
    assert_eq!(spec["minMember"], 5, "the workers and the launcher");
    assert_eq!(spec["scheduleTimeoutSeconds"], 0);
    assert_eq!(
        spec["minResources"],
        json!({"cpu": "9", "nvidia.com/gpu": "10"})
    );
}
