//! Gang scheduling on the local control plane through Kubernetes' own Workload API: trainset
//! started with `--gang-scheduler native`, the default scheduler with the `GangScheduling` gate,
//! and KWOK nodes of 8 GPUs each. Every test sizes its jobs from the GPUs the cluster has, so
//! they overflow it on purpose: run them alone and one at a time (`--test-threads=1`), with the
//! shared operator stopped (`e2e/cluster stop-extras`), as `run-tests` does.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::operator::{self, Extra};
use trainset_e2e::{
    TestNamespace, client, create, delay, dynamic_api, install_crds, loopback, pods_with, wait_for,
    wait_leading, wait_state, wait_until,
};

const PORT: &str = "gang_operator";
const GPU: &str = "nvidia.com/gpu";
/// GPUs each worker asks for: a whole KWOK node.
const GPUS_PER_POD: i64 = 8;
/// How long a gang that cannot be placed is watched for a pod that was placed anyway.
const HELD: Duration = Duration::from_secs(60);

/// The operator of these tests, started once per test binary and stopped by
/// `e2e/cluster stop-extras` (its pid is registered like every test operator's).
static OPERATOR: Mutex<Option<Extra>> = Mutex::new(None);

async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = client().await;
    install_crds(&client).await;
    let running = OPERATOR
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
        .is_some_and(Extra::running);
    if !running {
        let args = ["--gang-scheduler", "native"];
        let extra = operator::spawn_extra_with(&client, &loopback(PORT), &args).await;
        *OPERATOR.lock().unwrap_or_else(PoisonError::into_inner) = Some(extra);
    }
    // Another trainset holding the Lease keeps it waiting: e2e/cluster stop-extras.
    wait_leading(&loopback(PORT), Duration::from_secs(60)).await;
    let ns = TestNamespace::create(&client, prefix).await;
    (client, ns)
}

/// The GPUs of every node, so that a test knows how many whole-node pods fit.
async fn cluster_gpus(client: &Client) -> i64 {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing nodes: {e}"));
    list.items
        .iter()
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get(GPU))
        .filter_map(|q| q.0.parse::<i64>().ok())
        .sum()
}

/// A PyTorchJob of `workers` pods (no Master, so one gang), each asking for a whole node's GPUs
/// and running `seconds`.
fn workers_job(name: &str, workers: i64, seconds: u32, policy: Value) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"schedulingPolicy": policy},
            "pytorchReplicaSpecs": {"Worker": {
                "replicas": workers,
                "restartPolicy": "Never",
                "template": {
                    "metadata": delay(seconds),
                    "spec": {"containers": [{
                        "name": "pytorch", "image": "trainer:1",
                        "resources": {"limits": {GPU: GPUS_PER_POD.to_string()}}
                    }]}
                }
            }}
        }
    })
}

/// The job's pods: how many exist, and how many a node was chosen for.
async fn placed(client: &Client, ns: &str, job: &str) -> (usize, usize) {
    let pods = pods_with(client, ns, &format!("training.kubeflow.org/job-name={job}")).await;
    let bound = pods.iter().filter(|p| is_bound(p)).count();
    (pods.len(), bound)
}

fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
}

fn pod_groups(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "scheduling.k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "scheduling.k8s.io/v1alpha2".into(),
        kind: "PodGroup".into(),
        plural: "podgroups".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Waits until all `count` pods of `job` exist, then watches for [`HELD`]: none may be placed.
async fn placed_none_while_held(client: &Client, ns: &str, job: &str, count: usize) {
    wait_for(
        Duration::from_secs(60),
        &format!("{count} pods of {job}"),
        || async { (placed(client, ns, job).await.0 == count).then_some(()) },
    )
    .await;
    let any = wait_until(HELD, || async {
        let (_, bound) = placed(client, ns, job).await;
        (bound > 0).then_some(bound)
    })
    .await;
    assert_eq!(
        any, None,
        "{job}: pods were placed though its gang does not fit"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
async fn gang_native_a_job_larger_than_the_cluster_places_no_pod() {
    let (client, ns) = setup("gang-large").await;
    let fit = cluster_gpus(&client).await / GPUS_PER_POD;
    assert!(
        fit >= 2,
        "the cluster has {fit} nodes of {GPUS_PER_POD} GPUs"
    );
    let workers = fit + 1;
    let job = workers_job("large", workers, 600, json!({}));
    create(&client, &ns.name, &job).await;

    let count = usize::try_from(workers).unwrap_or_default();
    placed_none_while_held(&client, &ns.name, "large", count).await;
    let group = pod_groups(&client, &ns.name)
        .get("large")
        .await
        .unwrap_or_else(|e| panic!("PodGroup large: {e}"));
    assert_eq!(
        group.data["spec"]["schedulingPolicy"]["gang"]["minCount"],
        workers
    );

    // The same pods without a gang: as many as fit are placed, so the gang above is what held
    // them back, not a lack of room or a scheduler at rest.
    let jobs = dynamic_api(&client, &job, Some(&ns.name));
    jobs.delete("large", &DeleteParams::foreground())
        .await
        .unwrap_or_else(|e| panic!("deleting large: {e}"));
    wait_for(Duration::from_secs(60), "large's pods to go", || async {
        (placed(&client, &ns.name, "large").await.0 == 0).then_some(())
    })
    .await;
    let plain = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "plain"},
        "spec": {
            "completionMode": "Indexed", "completions": workers, "parallelism": workers,
            "template": {
                "metadata": delay(600),
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "trainer:1",
                    "resources": {"limits": {GPU: GPUS_PER_POD.to_string()}}
                }]}
            }
        }
    });
    create(&client, &ns.name, &plain).await;
    let fitting = usize::try_from(fit).unwrap_or_default();
    wait_for(
        Duration::from_secs(60),
        "the plain Job's pods that fit",
        || async {
            let pods = pods_with(&client, &ns.name, "batch.kubernetes.io/job-name=plain").await;
            (pods.iter().filter(|p| is_bound(p)).count() == fitting).then_some(())
        },
    )
    .await;
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
async fn gang_native_a_job_that_fits_is_placed_whole_and_succeeds() {
    let (client, ns) = setup("gang-fits").await;
    let workers = cluster_gpus(&client).await / GPUS_PER_POD;
    let jobs = create(
        &client,
        &ns.name,
        &workers_job("fits", workers, 2, json!({})),
    )
    .await;
    let count = usize::try_from(workers).unwrap_or_default();
    wait_for(
        Duration::from_secs(60),
        "all of fits' pods placed",
        || async { (placed(&client, &ns.name, "fits").await == (count, count)).then_some(()) },
    )
    .await;
    wait_state(&jobs, "fits", "Succeeded", Duration::from_secs(120)).await;
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
async fn gang_native_two_jobs_that_fit_only_alone_run_one_after_the_other() {
    let (client, ns) = setup("gang-two").await;
    let fit = cluster_gpus(&client).await / GPUS_PER_POD;
    // More than half the cluster each: never both at once.
    let workers = fit / 2 + 1;
    let count = usize::try_from(workers).unwrap_or_default();
    let first = create(
        &client,
        &ns.name,
        &workers_job("first", workers, 20, json!({})),
    )
    .await;
    let second = create(
        &client,
        &ns.name,
        &workers_job("second", workers, 2, json!({})),
    )
    .await;

    // One is placed whole; the other, whole or not at all, waits.
    let (running, waiting) = wait_for(Duration::from_secs(60), "one job placed whole", || async {
        let a = placed(&client, &ns.name, "first").await;
        let b = placed(&client, &ns.name, "second").await;
        match (a.1 == count, b.1 == count) {
            (true, false) => Some(("first", "second")),
            (false, true) => Some(("second", "first")),
            _ => None,
        }
    })
    .await;
    let (_, bound) = placed(&client, &ns.name, waiting).await;
    assert_eq!(bound, 0, "{waiting} was placed in part beside {running}");

    // No deadlock: both finish, the waiting one after the other.
    wait_state(&first, "first", "Succeeded", Duration::from_secs(180)).await;
    wait_state(&second, "second", "Succeeded", Duration::from_secs(180)).await;
    ns.delete().await;
}

#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
async fn gang_native_min_available_places_that_many_and_suspend_resume_keeps_the_gang() {
    let (client, ns) = setup("gang-min").await;
    let fit = cluster_gpus(&client).await / GPUS_PER_POD;
    // One pod more than fits, of which the gang needs only what fits.
    let policy = json!({"minAvailable": fit});
    let jobs = create(&client, &ns.name, &workers_job("min", fit + 1, 600, policy)).await;
    let fitting = usize::try_from(fit).unwrap_or_default();
    wait_for(
        Duration::from_secs(60),
        "minAvailable pods placed",
        || async {
            (placed(&client, &ns.name, "min").await == (fitting + 1, fitting)).then_some(())
        },
    )
    .await;
    let groups = pod_groups(&client, &ns.name);
    let before = groups
        .get("min")
        .await
        .unwrap_or_else(|e| panic!("PodGroup min: {e}"));
    assert_eq!(
        before.data["spec"]["schedulingPolicy"]["gang"]["minCount"],
        fit
    );

    let suspend = |value: bool| json!({"spec": {"runPolicy": {"suspend": value}}});
    let params = PatchParams::default();
    jobs.patch("min", &params, &Patch::Merge(&suspend(true)))
        .await
        .unwrap_or_else(|e| panic!("suspending: {e}"));
    wait_state(&jobs, "min", "Suspended", Duration::from_secs(60)).await;
    wait_for(Duration::from_secs(60), "min's pods to go", || async {
        (placed(&client, &ns.name, "min").await.0 == 0).then_some(())
    })
    .await;
    jobs.patch("min", &params, &Patch::Merge(&suspend(false)))
        .await
        .unwrap_or_else(|e| panic!("resuming: {e}"));
    wait_for(
        Duration::from_secs(60),
        "minAvailable pods placed again",
        || async {
            (placed(&client, &ns.name, "min").await == (fitting + 1, fitting)).then_some(())
        },
    )
    .await;
    let after = groups
        .get("min")
        .await
        .unwrap_or_else(|e| panic!("PodGroup min: {e}"));
    assert_eq!(
        after.uid(),
        before.uid(),
        "the gang is the one made at creation"
    );
    ns.delete().await;
}
