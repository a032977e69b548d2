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

/// What each job is waited for under the old operator, and what trainset is to say of it.
const EXPECTED: [(&str, &str, &str); 9] = [
    ("pt-running", "Running", "follow"),
    ("tf-running", "Running", "follow"),
    ("xgb-clean", "Running", "follow"),
    ("paddle-running", "Running", "follow"),
    ("jax-running", "Running", "follow"),
    ("pt-replaced", "Running", "follow"),
    ("pt-done", "Succeeded", "finished"),
    ("tf-failed", "Failed", "finished"),
    ("pt-held", "Suspended", "held"),
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
    for manifest in &manifests {
        let name = manifest["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_owned();
        apis.insert(name, create(&client, &ns.name, manifest).await);
    }
    for (name, state, _) in EXPECTED {
        wait_condition(&apis[name], name, state, Duration::from_secs(120)).await;
    }
    let running: Vec<&str> = EXPECTED
        .iter()
        .filter(|(_, state, _)| *state == "Running")
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
    assert!(ok, "no job is refused: {verdicts:?}");

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
    drop(peer);
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
    for (name, state) in [("pt-done", "Succeeded"), ("tf-failed", "Failed")] {
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

    // The followed jobs end as their own rules say, with their pods' counts.
    for name in [
        "pt-running",
        "tf-running",
        "xgb-clean",
        "paddle-running",
        "jax-running",
    ] {
        end_pods(&client, &ns.name, name).await;
    }
    for name in ["pt-running", "tf-running", "paddle-running", "jax-running"] {
        let done = wait_condition(&apis[name], name, "Succeeded", Duration::from_secs(60)).await;
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
    // once it succeeded, the job itself its TTL later.
    wait_condition(
        &apis["xgb-clean"],
        "xgb-clean",
        "Succeeded",
        Duration::from_secs(60),
    )
    .await;
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
