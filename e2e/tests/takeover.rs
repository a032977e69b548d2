//! Switching to trainset with jobs in flight (docs/migration.md): jobs in every state are made
//! under an upstream operator, the operator is stopped, trainset's CRDs go over its own and
//! trainset starts. No running job is started a second time, every pod keeps its uid, finished
//! jobs stay finished and look it, and held ones run later as trainset's own JobSets. Like the
//! peers tests, these swap CRDs: `run-tests` runs this file alone, one test at a time.

use std::collections::BTreeMap;
use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::{
    Peer, TestNamespace, client, condition, create, delay, events_for, operator, status,
    wait_condition, wait_event, wait_for,
};

/// Long enough that a pod runs until the test ends it.
const UNTIL_ENDED: u32 = 3600;

/// A replica spec of `replicas` pods of container `container` that KWOK runs `seconds` (then
/// they succeed).
fn replicas(container: &str, replicas: i32, seconds: u32, restart: &str) -> Value {
    json!({
        "replicas": replicas,
        "restartPolicy": restart,
        "template": {
            "metadata": delay(seconds),
            "spec": {"containers": [{"name": container, "image": "busybox"}]}
        }
    })
}

fn job(kind: &str, name: &str, specs: (&str, Value), run_policy: Value) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": kind,
        "metadata": {"name": name},
        "spec": {specs.0: specs.1, "runPolicy": run_policy}
    })
}

/// One job of every kind training-operator v1.9.4 serves, running until ended, and jobs that
/// finished, failed, are held, or will lose a pod.
fn jobs() -> Vec<Value> {
    let running = |seconds| json!({"cleanPodPolicy": "None", "activeDeadlineSeconds": seconds});
    vec![
        job(
            "PyTorchJob",
            "pt-running",
            (
                "pytorchReplicaSpecs",
                json!({"Master": replicas("pytorch", 1, UNTIL_ENDED, "OnFailure"),
                       "Worker": replicas("pytorch", 2, UNTIL_ENDED, "OnFailure")}),
            ),
            running(3600),
        ),
        job(
            "TFJob",
            "tf-running",
            (
                "tfReplicaSpecs",
                json!({"Worker": replicas("tensorflow", 2, UNTIL_ENDED, "OnFailure")}),
            ),
            json!({}),
        ),
        job(
            "XGBoostJob",
            "xgb-clean",
            (
                "xgbReplicaSpecs",
                json!({"Master": replicas("xgboost", 1, UNTIL_ENDED, "OnFailure"),
                       "Worker": replicas("xgboost", 1, UNTIL_ENDED, "OnFailure")}),
            ),
            json!({"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 20}),
        ),
        job(
            "PaddleJob",
            "paddle-running",
            (
                "paddleReplicaSpecs",
                json!({"Master": replicas("paddle", 1, UNTIL_ENDED, "OnFailure"),
                       "Worker": replicas("paddle", 1, UNTIL_ENDED, "OnFailure")}),
            ),
            json!({}),
        ),
        job(
            "JAXJob",
            "jax-running",
            (
                "jaxReplicaSpecs",
                json!({"Worker": replicas("jax", 2, UNTIL_ENDED, "OnFailure")}),
            ),
            json!({}),
        ),
        job(
            "PyTorchJob",
            "pt-replaced",
            (
                "pytorchReplicaSpecs",
                json!({"Master": replicas("pytorch", 1, UNTIL_ENDED, "OnFailure"),
                       "Worker": replicas("pytorch", 2, UNTIL_ENDED, "OnFailure")}),
            ),
            json!({}),
        ),
        job(
            "PyTorchJob",
            "pt-done",
            (
                "pytorchReplicaSpecs",
                json!({"Master": replicas("pytorch", 1, 0, "OnFailure")}),
            ),
            json!({}),
        ),
        failing_tfjob(),
        // What trainset's CRD refuses at creation and training-operator took: a negative
        // backoffLimit (v1.9.4 fails the job at once for it).
        job(
            "JAXJob",
            "jax-backoff",
            (
                "jaxReplicaSpecs",
                json!({"Worker": replicas("jax", 1, UNTIL_ENDED, "OnFailure")}),
            ),
            json!({"backoffLimit": -3}),
        ),
        // A queue name Kueue cannot hold, which trainset refuses and training-operator ignores.
        {
            let mut queued = job(
                "PyTorchJob",
                "pt-bad-queue",
                (
                    "pytorchReplicaSpecs",
                    json!({"Master": replicas("pytorch", 1, UNTIL_ENDED, "OnFailure")}),
                ),
                json!({}),
            );
            queued["metadata"]["labels"] = json!({"kueue.x-k8s.io/queue-name": "team_a"});
            queued
        },
        job(
            "PyTorchJob",
            "pt-held",
            (
                "pytorchReplicaSpecs",
                json!({"Master": replicas("pytorch", 1, 1, "OnFailure"),
                       "Worker": replicas("pytorch", 1, 1, "OnFailure")}),
            ),
            json!({"suspend": true}),
        ),
    ]
}

/// A TFJob whose one worker exits 1 under `Never`: training-operator fails it.
fn failing_tfjob() -> Value {
    let mut failing = replicas("tensorflow", 1, 0, "Never");
    failing["template"]["metadata"] = json!({
        "labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
        "annotations": {"pod-container-running-failed.stage.kwok.x-k8s.io/exit-code": "1"}
    });
    job(
        "TFJob",
        "tf-failed",
        ("tfReplicaSpecs", json!({"Worker": failing})),
        json!({}),
    )
}

/// The followed jobs, each beside a twin that runs to its end under the old operator: how it
/// ends under trainset is compared with how the twin ended.
const FOLLOWED: [&str; 5] = [
    "pt-running",
    "tf-running",
    "xgb-clean",
    "paddle-running",
    "jax-running",
];

/// A followed job's twin: the same spec, its pods ending after a few seconds, no TTL.
fn twin(manifest: &Value) -> Value {
    let mut twin = manifest.clone();
    let name = format!(
        "{}-twin",
        manifest["metadata"]["name"].as_str().unwrap_or_default()
    );
    twin["metadata"]["name"] = json!(name);
    let spec = twin["spec"].as_object_mut().expect("spec");
    if let Some(policy) = spec.get_mut("runPolicy").and_then(Value::as_object_mut) {
        policy.remove("ttlSecondsAfterFinished");
    }
    for (_, replicas) in spec
        .iter_mut()
        .filter(|(field, _)| field.ends_with("ReplicaSpecs"))
    {
        for replica in replicas
            .as_object_mut()
            .expect("replica specs")
            .values_mut()
        {
            replica["template"]["metadata"] = delay(15);
        }
    }
    twin
}

/// How a job ended, as compared with its twin: each condition's type, status and reason, each
/// replica type's counts, and the events that tell of the end.
async fn outcome(client: &Client, ns: &str, status: &Value, name: &str) -> Outcome {
    let mut conditions: Vec<String> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{} {} {}", c["type"], c["status"], c["reason"]))
        .collect();
    conditions.sort();
    let counts = status["replicaStatuses"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(t, r)| {
            let n = |f: &str| r[f].as_i64().unwrap_or(0);
            format!(
                "{t} active={} succeeded={} failed={}",
                n("active"),
                n("succeeded"),
                n("failed")
            )
        })
        .collect();
    let mut events: Vec<String> = events_for(client, ns, name)
        .await
        .into_iter()
        .filter(|(_, reason)| reason.ends_with("Succeeded") || reason.ends_with("Failed"))
        .map(|(type_, reason)| format!("{type_} {reason}"))
        .collect();
    events.sort();
    events.dedup();
    (conditions, counts, events)
}

/// Checks that `name` ended as its twin did; its end event follows its status write, so it is
/// waited for a moment.
async fn ends_as(client: &Client, ns: &str, status: &Value, name: &str, twin: &Outcome) {
    let matched = trainset_e2e::wait_until(Duration::from_secs(15), || async {
        let seen = outcome(client, ns, status, name).await;
        (seen == *twin).then_some(())
    })
    .await;
    if matched.is_none() {
        let seen = outcome(client, ns, status, name).await;
        assert_eq!(seen, *twin, "{name} against its twin: {status}");
    }
}

type Outcome = (Vec<String>, Vec<String>, Vec<String>);

/// What each job is waited for under the old operator, and what trainset is to say of it.
const EXPECTED: [(&str, &str, &str); 11] = [
    ("pt-running", "Running", "follow"),
    ("tf-running", "Running", "follow"),
    ("xgb-clean", "Running", "follow"),
    ("paddle-running", "Running", "follow"),
    ("jax-running", "Running", "follow"),
    ("pt-replaced", "Running", "follow"),
    ("pt-done", "Succeeded", "finished"),
    ("tf-failed", "Failed", "finished"),
    ("pt-held", "Suspended", "held"),
    ("jax-backoff", "Failed", "finished"),
    ("pt-bad-queue", "Running", "refuse"),
];

async fn pods_of(client: &Client, ns: &str, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("training.kubeflow.org/job-name={job}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .expect("pods")
        .items
}

async fn pod_uids(client: &Client, ns: &str, job: &str) -> Vec<String> {
    let mut uids: Vec<String> = pods_of(client, ns, job)
        .await
        .iter()
        .filter_map(ResourceExt::uid)
        .collect();
    uids.sort();
    uids
}

/// `trainset takeover --dry-run -n <ns>`: its verdict on each job, and its exit status.
fn dry_run(ns: &str) -> (BTreeMap<String, String>, bool) {
    let output = std::process::Command::new(operator::binary())
        .args(["takeover", "--dry-run", "-n", ns])
        .output()
        .expect("trainset takeover --dry-run");
    let text = String::from_utf8_lossy(&output.stdout);
    let verdicts = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (_ns, _kind, name, verdict) =
                (words.next()?, words.next()?, words.next()?, words.next()?);
            Some((name.to_owned(), verdict.to_owned()))
        })
        .collect();
    (verdicts, output.status.success())
}

/// Every pod's program ends now (KWOK completes a pod its delay after its last change).
async fn end_pods(client: &Client, ns: &str, job: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for pod in pods_of(client, ns, job).await {
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": delay(0)})),
        )
        .await
        .unwrap_or_else(|e| panic!("ending pod {}: {e}", pod.name_any()));
    }
}

async fn jobset_names(client: &Client, ns: &str) -> Vec<String> {
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), ns);
    let mut names: Vec<String> = jobsets
        .list(&ListParams::default())
        .await
        .expect("JobSets")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and builds training-operator v1.9.4"]
async fn peer_takeover_from_training_operator_runs_nothing_twice() {
    let client = client().await;
    let peer = Peer::start("training-operator");
    let ns = TestNamespace::create(&client, "takeover-v1").await;
    let manifests = jobs();
    let mut apis = BTreeMap::new();
    let twins: Vec<Value> = manifests
        .iter()
        .filter(|m| FOLLOWED.contains(&m["metadata"]["name"].as_str().unwrap_or_default()))
        .map(twin)
        .collect();
    for manifest in manifests.iter().chain(&twins) {
        let name = manifest["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        apis.insert(name, create(&client, &ns.name, manifest).await);
    }
    for (name, state, _) in EXPECTED {
        wait_condition(&apis[name], name, state, Duration::from_secs(120)).await;
    }
    let mut twins_ended = BTreeMap::new();
    for name in FOLLOWED {
        let twin = format!("{name}-twin");
        let ended =
            wait_condition(&apis[&twin], &twin, "Succeeded", Duration::from_secs(120)).await;
        twins_ended.insert(name, outcome(&client, &ns.name, &ended, &twin).await);
    }
    let running: Vec<&str> = EXPECTED
        .iter()
        .filter(|(_, state, verdict)| *state == "Running" && *verdict == "follow")
        .map(|(name, _, _)| *name)
        .collect();
    // Running means every pod runs: the old operator made them all.
    for name in &running {
        wait_for(
            Duration::from_secs(60),
            &format!("{name}'s pods running"),
            || async {
                let pods = pods_of(&client, &ns.name, name).await;
                let phases = pods.iter().filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                });
                (phases.count() >= 2).then_some(())
            },
        )
        .await;
    }

    // The dry run, before the switch, against the old operator's CRDs.
    let (verdicts, ok) = dry_run(&ns.name);
    for (name, _, verdict) in EXPECTED {
        assert_eq!(
            verdicts.get(name).map(String::as_str),
            Some(verdict),
            "{name}: {verdicts:?}"
        );
    }
    assert!(
        !ok,
        "one job is refused, and the dry run says so: {verdicts:?}"
    );

    let mut uids = BTreeMap::new();
    for name in &running {
        uids.insert(*name, pod_uids(&client, &ns.name, name).await);
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let v1_services = |name: &str| format!("{name}-master-0");
    assert!(
        services
            .get_opt(&v1_services("xgb-clean"))
            .await
            .expect("service")
            .is_some()
    );

    // The switch: the old operator stops, trainset's CRDs replace its own, trainset starts.
    peer.switch();
    let first = operator::spawn_extra(&client, &operator::metrics_address()).await;
    for name in &running {
        wait_event(
            &client,
            &ns.name,
            name,
            "Normal",
            "FollowingPreviousOperator",
        )
        .await;
    }
    // Finished jobs keep their status and show it; one whose spec trainset's CRD would refuse
    // now is as readable and writable as the others.
    for (name, state) in [
        ("pt-done", "Succeeded"),
        ("tf-failed", "Failed"),
        ("jax-backoff", "Failed"),
    ] {
        let shown = wait_for(
            Duration::from_secs(30),
            &format!("{name} to show {state}"),
            || async {
                let status = status(&apis[name].get(name).await.ok()?);
                (status["state"] == state).then_some(status)
            },
        )
        .await;
        assert_eq!(condition(&shown, state)["status"], "True", "{shown}");
    }
    // A running job trainset refuses fails, saying why, and its pods stop.
    let refused = wait_condition(
        &apis["pt-bad-queue"],
        "pt-bad-queue",
        "Failed",
        Duration::from_secs(30),
    )
    .await;
    let why = condition(&refused, "Failed");
    assert_eq!(why["reason"], "PyTorchJobInvalidSpec", "{refused}");
    assert!(
        why["message"]
            .as_str()
            .is_some_and(|m| m.contains("queue-name")),
        "{refused}"
    );
    wait_for(
        Duration::from_secs(30),
        "pt-bad-queue's pods to stop",
        || async {
            let pods = pods_of(&client, &ns.name, "pt-bad-queue").await;
            pods.iter()
                .all(|p| p.metadata.deletion_timestamp.is_some())
                .then_some(())
        },
    )
    .await;
    // A restart of trainset while it follows changes nothing.
    first.stop().await;
    let _second = operator::spawn_extra(&client, &operator::metrics_address()).await;
    wait_for(
        Duration::from_secs(30),
        "the restarted trainset to lead",
        || async {
            trainset_e2e::leads(&operator::metrics_address())
                .await
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        jobset_names(&client, &ns.name).await,
        Vec::<String>::new(),
        "no JobSet for a followed or held job"
    );
    for name in &running {
        assert_eq!(
            pod_uids(&client, &ns.name, name).await,
            uids[name],
            "{name}'s pods are the ones it ran in"
        );
        let status = status(&apis[*name].get(name).await.expect("job"));
        assert_eq!(status["takeover"]["following"], true, "{name}: {status}");
        assert_eq!(status["state"], "Running", "{name}: {status}");
    }

    // A pod training-operator would make anew: trainset runs that job again as its own.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.delete("pt-replaced-worker-1", &DeleteParams::default())
        .await
        .expect("deleting a worker");
    wait_event(
        &client,
        &ns.name,
        "pt-replaced",
        "Warning",
        "RestartingAsJobSet",
    )
    .await;
    wait_for(Duration::from_secs(60), "pt-replaced's JobSet", || async {
        jobset_names(&client, &ns.name)
            .await
            .contains(&"pt-replaced".to_owned())
            .then_some(())
    })
    .await;
    let old: Vec<String> = uids["pt-replaced"].clone();
    let now = pod_uids(&client, &ns.name, "pt-replaced").await;
    assert!(
        now.iter().all(|uid| !old.contains(uid)),
        "none of the old pods is left: {old:?} {now:?}"
    );

    // The followed jobs end as their own rules say, with their pods' counts, and as their twins
    // ended under training-operator: conditions, counts, events.
    for name in FOLLOWED {
        end_pods(&client, &ns.name, name).await;
    }
    for name in FOLLOWED {
        let done = wait_condition(&apis[name], name, "Succeeded", Duration::from_secs(60)).await;
        ends_as(&client, &ns.name, &done, name, &twins_ended[name]).await;
        assert_eq!(done["state"], "Succeeded", "{name}: {done}");
        assert_eq!(
            condition(&done, "Running")["status"],
            "False",
            "{name}: {done}"
        );
        let counted: i64 = done["replicaStatuses"]
            .as_object()
            .expect("replicaStatuses")
            .values()
            .map(|r| r["succeeded"].as_i64().unwrap_or(0))
            .sum();
        assert!(counted >= 2, "{name}: {done}");
    }
    let pt = status(&apis["pt-running"].get("pt-running").await.expect("job"));
    assert_eq!(pt["replicaStatuses"]["Master"]["succeeded"], 1, "{pt}");
    // cleanPodPolicy All and the TTL act on the followed XGBoostJob: its pods and Services go
    // once it succeeded (as its twin's did), the job itself its TTL later.
    assert!(
        pods_of(&client, &ns.name, "xgb-clean-twin")
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
    );
    wait_for(
        Duration::from_secs(30),
        "xgb-clean's pods and Services to go",
        || async {
            let pods = pods_of(&client, &ns.name, "xgb-clean").await;
            let left = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            let service = services.get_opt(&v1_services("xgb-clean")).await.ok()?;
            let job = apis["xgb-clean"].get_opt("xgb-clean").await.ok()?;
            (left == 0 && service.is_none() && job.is_some()).then_some(())
        },
    )
    .await;
    wait_for(
        Duration::from_secs(60),
        "xgb-clean to be deleted after its TTL",
        || async {
            apis["xgb-clean"]
                .get_opt("xgb-clean")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;

    // The held job runs when resumed, as trainset's own JobSet.
    apis["pt-held"]
        .patch(
            "pt-held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": false}}})),
        )
        .await
        .expect("resume");
    let held = wait_condition(
        &apis["pt-held"],
        "pt-held",
        "Succeeded",
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(held["jobSet"], "pt-held", "{held}");
    wait_condition(
        &apis["pt-replaced"],
        "pt-replaced",
        "Running",
        Duration::from_secs(60),
    )
    .await;

    // Nothing said a JobSet was lost: trainset made none of them before.
    let events: Vec<(String, String)> = {
        let mut all = Vec::new();
        for name in apis.keys() {
            all.extend(events_for(&client, &ns.name, name).await);
        }
        all
    };
    assert!(
        !events.iter().any(|(_, reason)| reason == "JobSetRecreated"),
        "{events:?}"
    );
    ns.delete().await;
}

/// An MPIJob of mpi-operator's `kubeflow.org/v2beta1`: a launcher and `workers` workers, whose
/// pods KWOK runs `launcher_seconds` (the launcher's) and for ever (the workers' sshd).
fn mpijob(
    name: &str,
    workers: i32,
    launcher_seconds: u32,
    run_policy: Value,
    labels: Value,
) -> Value {
    let pod = |seconds: u32| {
        json!({"metadata": delay(seconds), "spec": {"containers": [{"name": "mpi", "image": "mpi",
            "resources": {"requests": {"cpu": "1"}}}]}})
    };
    json!({
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": pod(launcher_seconds)},
                "Worker": {"replicas": workers, "template": pod(UNTIL_ENDED)}
            }
        }
    })
}

/// An MPIJob whose launcher exits 1 with no retry: mpi-operator fails it.
fn failing_mpijob() -> Value {
    let mut failing = mpijob("mpi-failed", 1, 0, json!({"backoffLimit": 0}), json!({}));
    failing["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["metadata"] = json!({
        "labels": {"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
        "annotations": {"pod-container-running-failed.stage.kwok.x-k8s.io/exit-code": "1"}
    });
    failing
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and builds mpi-operator v0.8.2"]
async fn peer_takeover_from_mpi_operator_runs_nothing_twice() {
    let client = client().await;
    let peer = Peer::start("mpi-operator");
    // No quota yet: the queued job waits in Kueue, which queues MPIJobs itself.
    let mut queues = trainset_e2e::kueue::Queues::new(&client, "takeover-mpi", "cpu", "0").await;
    let ns = queues.ns.name.clone();
    let queued = json!({"kueue.x-k8s.io/queue-name": trainset_e2e::kueue::QUEUE});
    let manifests = [
        mpijob("mpi-running", 2, UNTIL_ENDED, json!({}), json!({})),
        mpijob("mpi-done", 1, 0, json!({}), json!({})),
        mpijob("mpi-held", 1, 1, json!({"suspend": true}), json!({})),
        mpijob("mpi-queued", 1, 1, json!({}), queued),
        // mpi-running's twin, which ends under mpi-operator.
        mpijob("mpi-twin", 2, 15, json!({}), json!({})),
        failing_mpijob(),
    ];
    let mut apis = BTreeMap::new();
    for manifest in &manifests {
        let name = manifest["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        apis.insert(name, create(&client, &ns, manifest).await);
    }
    wait_condition(
        &apis["mpi-running"],
        "mpi-running",
        "Running",
        Duration::from_secs(120),
    )
    .await;
    wait_condition(
        &apis["mpi-done"],
        "mpi-done",
        "Succeeded",
        Duration::from_secs(120),
    )
    .await;
    wait_condition(
        &apis["mpi-failed"],
        "mpi-failed",
        "Failed",
        Duration::from_secs(120),
    )
    .await;
    let twin = wait_condition(
        &apis["mpi-twin"],
        "mpi-twin",
        "Succeeded",
        Duration::from_secs(120),
    )
    .await;
    let twin_ended = outcome(&client, &ns, &twin, "mpi-twin").await;
    wait_condition(
        &apis["mpi-held"],
        "mpi-held",
        "Suspended",
        Duration::from_secs(60),
    )
    .await;
    wait_condition(
        &apis["mpi-queued"],
        "mpi-queued",
        "Suspended",
        Duration::from_secs(60),
    )
    .await;

    let (verdicts, ok) = dry_run(&ns);
    let expected = [
        ("mpi-failed", "finished"),
        ("mpi-running", "follow"),
        ("mpi-done", "finished"),
        ("mpi-held", "held"),
        ("mpi-queued", "held"),
    ];
    for (name, verdict) in expected {
        assert_eq!(
            verdicts.get(name).map(String::as_str),
            Some(verdict),
            "{name}: {verdicts:?}"
        );
    }
    assert!(ok, "{verdicts:?}");
    let uids = pod_uids(&client, &ns, "mpi-running").await;
    assert_eq!(uids.len(), 3, "a launcher and two workers: {uids:?}");

    peer.switch();
    let _trainset = operator::spawn_extra(&client, &operator::metrics_address()).await;
    wait_event(
        &client,
        &ns,
        "mpi-running",
        "Normal",
        "FollowingPreviousOperator",
    )
    .await;
    let failed = wait_for(
        Duration::from_secs(30),
        "mpi-failed to show Failed",
        || async {
            let status = status(&apis["mpi-failed"].get("mpi-failed").await.ok()?);
            (status["state"] == "Failed").then_some(status)
        },
    )
    .await;
    assert_eq!(condition(&failed, "Failed")["status"], "True", "{failed}");
    let done = wait_for(
        Duration::from_secs(30),
        "mpi-done to show Succeeded",
        || async {
            let status = status(&apis["mpi-done"].get("mpi-done").await.ok()?);
            (status["state"] == "Succeeded").then_some(status)
        },
    )
    .await;
    assert_eq!(condition(&done, "Succeeded")["status"], "True", "{done}");
    assert_eq!(jobset_names(&client, &ns).await, Vec::<String>::new());
    assert_eq!(pod_uids(&client, &ns, "mpi-running").await, uids);

    // The launcher's program ends: mpi-operator's launcher Job completes, and so does the job.
    end_pods(&client, &ns, "mpi-running").await;
    let ended = wait_condition(
        &apis["mpi-running"],
        "mpi-running",
        "Succeeded",
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        ended["replicaStatuses"]["Launcher"]["succeeded"], 1,
        "{ended}"
    );
    // As its twin ended under mpi-operator: conditions, counts, end events.
    ends_as(&client, &ns, &ended, "mpi-running", &twin_ended).await;
    assert_eq!(
        ended["takeover"]["previousOperator"], "mpi-operator",
        "{ended}"
    );
    assert_eq!(
        jobset_names(&client, &ns).await,
        Vec::<String>::new(),
        "followed to its end"
    );

    // The held and the queued ones run as trainset's own JobSets once resumed and admitted.
    apis["mpi-held"]
        .patch(
            "mpi-held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runPolicy": {"suspend": false}}})),
        )
        .await
        .expect("resume");
    queues.set_quota("10").await;
    for name in ["mpi-held", "mpi-queued"] {
        let done = wait_condition(&apis[name], name, "Succeeded", Duration::from_secs(120)).await;
        assert_eq!(done["jobSet"], name, "{name}: {done}");
    }
    let events: Vec<(String, String)> = events_for(&client, &ns, "mpi-held").await;
    assert!(
        !events.iter().any(|(_, reason)| reason == "JobSetRecreated"),
        "{events:?}"
    );
    queues.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and builds Trainer v2.3.0"]
async fn peer_takeover_from_trainer_adopts_its_jobsets() {
    let client = client().await;
    let peer = Peer::start("trainer");
    // No quota yet: the queued TrainJob waits in Kueue, which queues TrainJobs itself.
    let mut queues = trainset_e2e::kueue::Queues::new(&client, "takeover-v2", "cpu", "0").await;
    let ns = &queues.ns;
    let trainjob = |name: &str, seconds: u32, labels: Value| {
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "1"}}},
                "runtimePatches": [{"manager": "trainset.io/e2e", "trainingRuntimeSpec": {"template": {"spec": {
                    "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": delay(seconds)}}}}]
                }}}}]
            }
        })
    };
    let mut apis = BTreeMap::new();
    let queued = json!({"kueue.x-k8s.io/queue-name": trainset_e2e::kueue::QUEUE});
    for (name, seconds, labels) in [
        ("running", UNTIL_ENDED, json!({})),
        ("done", 1, json!({})),
        ("queued", 1, queued),
    ] {
        let created = trainset_e2e::create_when_admitted(
            &client,
            &ns.name,
            &trainjob(name, seconds, labels),
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|e| panic!("creating TrainJob {name}: {e}"));
        apis.insert(name, created);
    }
    let api = apis["running"].clone();
    wait_condition(&apis["done"], "done", "Complete", Duration::from_secs(120)).await;
    wait_condition(
        &apis["queued"],
        "queued",
        "Suspended",
        Duration::from_secs(60),
    )
    .await;
    jobset_pods(&client, &ns.name, "running", 2, Duration::from_secs(120)).await;
    let (verdicts, ok) = dry_run(&ns.name);
    for (name, verdict) in [
        ("running", "adopt"),
        ("done", "finished"),
        ("queued", "held"),
    ] {
        assert_eq!(
            verdicts.get(name).map(String::as_str),
            Some(verdict),
            "{name}: {verdicts:?}"
        );
    }
    assert!(ok);
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    let jobset_uid = jobsets.get("running").await.expect("JobSet").uid();
    let uids = pod_uids_of_jobset(&client, &ns.name, "running").await;

    peer.switch();
    let _trainset = operator::spawn_extra(&client, &operator::metrics_address()).await;
    wait_for(Duration::from_secs(30), "trainset to lead", || async {
        trainset_e2e::leads(&operator::metrics_address())
            .await
            .then_some(())
    })
    .await;
    // The same JobSet and pods run on.
    wait_for(
        Duration::from_secs(30),
        "the TrainJob's status from trainset",
        || async {
            let status = status(&api.get("running").await.ok()?);
            status["startTime"].is_string().then_some(())
        },
    )
    .await;
    assert_eq!(
        jobsets.get("running").await.expect("JobSet").uid(),
        jobset_uid
    );
    assert_eq!(pod_uids_of_jobset(&client, &ns.name, "running").await, uids);

    // Suspend and resume still work on the adopted JobSet.
    let suspend = |on: bool| Patch::Merge(json!({"spec": {"suspend": on}}));
    api.patch("running", &PatchParams::default(), &suspend(true))
        .await
        .expect("suspend");
    wait_condition(&api, "running", "Suspended", Duration::from_secs(60)).await;
    jobset_pods(&client, &ns.name, "running", 0, Duration::from_secs(60)).await;
    api.patch("running", &PatchParams::default(), &suspend(false))
        .await
        .expect("resume");
    jobset_pods(&client, &ns.name, "running", 2, Duration::from_secs(60)).await;
    assert_eq!(
        jobsets.get("running").await.expect("JobSet").uid(),
        jobset_uid,
        "resumed, not made anew"
    );
    end_jobset_pods(&client, &ns.name, "running").await;
    wait_condition(&api, "running", "Complete", Duration::from_secs(120)).await;
    // The finished one stays as Trainer left it; the queued one runs once Kueue admits it, in
    // the suspended JobSet Trainer made for it, which trainset resumes.
    let done = status(&apis["done"].get("done").await.expect("TrainJob"));
    assert_eq!(condition(&done, "Complete")["status"], "True", "{done}");
    queues.set_quota("10").await;
    wait_condition(
        &apis["queued"],
        "queued",
        "Complete",
        Duration::from_secs(120),
    )
    .await;
    let made = jobsets.get("queued").await.expect("JobSet");
    assert_eq!(
        made.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("trainset")
    );
    queues.delete().await;
}

/// Waits until the JobSet `jobset` has `count` pods not being deleted.
async fn jobset_pods(client: &Client, ns: &str, jobset: &str, count: usize, limit: Duration) {
    let selector = format!("jobset.sigs.k8s.io/jobset-name={jobset}");
    wait_for(
        limit,
        &format!("{count} pods of JobSet {jobset}"),
        || async {
            let pods = trainset_e2e::pods_with(client, ns, &selector).await;
            (pods.len() == count).then_some(())
        },
    )
    .await;
}

async fn pod_uids_of_jobset(client: &Client, ns: &str, jobset: &str) -> Vec<String> {
    let selector = format!("jobset.sigs.k8s.io/jobset-name={jobset}");
    let mut uids: Vec<String> = trainset_e2e::pods_with(client, ns, &selector)
        .await
        .iter()
        .filter_map(ResourceExt::uid)
        .collect();
    uids.sort();
    uids
}

async fn end_jobset_pods(client: &Client, ns: &str, jobset: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("jobset.sigs.k8s.io/jobset-name={jobset}");
    for pod in trainset_e2e::pods_with(client, ns, &selector).await {
        pods.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": delay(0)})),
        )
        .await
        .unwrap_or_else(|e| panic!("ending pod {}: {e}", pod.name_any()));
    }
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and builds training-operator v1.9.4"]
async fn peer_takeover_of_training_operators_mpijob_waits_for_its_api_then_follows() {
    let client = client().await;
    let peer = Peer::start_with("training-operator", &[("TRAINSET_E2E_MPIJOB_V1", "1")]);
    // As on a cluster that never ran trainset: no admission policy records the API each MPIJob
    // was created through (it would keep the annotation through every update).
    let policy = WithoutApiVersionPolicy::new();
    let ns = TestNamespace::create(&client, "takeover-mpiv1").await;
    let pod = |seconds: u32| json!({"metadata": delay(seconds), "spec": {"containers": [{"name": "mpi", "image": "mpi"}]}});
    let manifest = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
        "metadata": {"name": "mpiv1"},
        "spec": {"cleanPodPolicy": "Running", "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": pod(UNTIL_ENDED)},
            "Worker": {"replicas": 2, "template": pod(UNTIL_ENDED)}
        }}
    });
    // The apiserver stops applying the policy a moment after its binding goes.
    wait_for(
        Duration::from_secs(30),
        "MPIJobs to be created unannotated",
        || async {
            let tried = trainset_e2e::dry_run_create(&client, &manifest, &ns.name)
                .await
                .ok()?;
            let annotations = tried.metadata.annotations.unwrap_or_default();
            (!annotations.contains_key("trainset.io/api-version")).then_some(())
        },
    )
    .await;
    let api = create(&client, &ns.name, &manifest).await;
    wait_condition(&api, "mpiv1", "Running", Duration::from_secs(120)).await;
    let uids = pod_uids(&client, &ns.name, "mpiv1").await;
    assert_eq!(uids.len(), 3, "a launcher and two workers: {uids:?}");
    let annotations = api.get("mpiv1").await.expect("job").metadata.annotations;
    assert!(
        annotations.is_none_or(|a| !a.contains_key("trainset.io/api-version")),
        "no policy recorded its API"
    );

    peer.switch();
    let _trainset = operator::spawn_extra(&client, &operator::metrics_address()).await;
    // Stored without the annotation trainset's admission policy writes, it reads as v2beta1:
    // its pods are training-operator's MPI controller's, so trainset waits to be told.
    wait_event(&client, &ns.name, "mpiv1", "Warning", "NotTakenOver").await;
    let (verdicts, _) = dry_run(&ns.name);
    assert_eq!(
        verdicts.get("mpiv1").map(String::as_str),
        Some("wait"),
        "{verdicts:?}"
    );
    assert_eq!(jobset_names(&client, &ns.name).await, Vec::<String>::new());
    api.patch(
        "mpiv1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"trainset.io/api-version": "v1"}}})),
    )
    .await
    .expect("annotating");
    let (verdicts, _) = dry_run(&ns.name);
    assert_eq!(
        verdicts.get("mpiv1").map(String::as_str),
        Some("follow"),
        "{verdicts:?}"
    );
    wait_event(
        &client,
        &ns.name,
        "mpiv1",
        "Normal",
        "FollowingPreviousOperator",
    )
    .await;
    assert_eq!(pod_uids(&client, &ns.name, "mpiv1").await, uids);
    end_pods(&client, &ns.name, "mpiv1").await;
    let done = wait_condition(&api, "mpiv1", "Succeeded", Duration::from_secs(90)).await;
    assert_eq!(
        done["replicaStatuses"]["Launcher"]["succeeded"], 1,
        "{done}"
    );
    assert_eq!(
        done["takeover"]["previousOperator"], "mpijob-controller",
        "{done}"
    );
    assert_eq!(
        jobset_names(&client, &ns.name).await,
        Vec::<String>::new(),
        "followed to its end"
    );
    ns.delete().await;
    drop(policy);
}

/// Deletes the binding of trainset's api-version admission policy, and applies it again
/// (`trainset api-version`) when dropped, pass or fail.
struct WithoutApiVersionPolicy;

impl WithoutApiVersionPolicy {
    fn new() -> Self {
        let deleted = std::process::Command::new("kubectl")
            .args([
                "delete",
                "mutatingadmissionpolicybinding",
                "trainset-api-version",
                "--ignore-not-found",
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(deleted, "deleting the api-version policy's binding");
        Self
    }
}

impl Drop for WithoutApiVersionPolicy {
    fn drop(&mut self) {
        let policy = std::process::Command::new(operator::binary())
            .arg("api-version")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        let applied = std::process::Command::new("kubectl")
            .args(["apply", "--server-side", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .map(|mut stdin| stdin.write_all(&policy))
                    .transpose()?;
                child.wait()
            });
        if !applied.is_ok_and(|s| s.success()) {
            eprintln!("could not apply trainset's api-version policy again");
        }
    }
}
