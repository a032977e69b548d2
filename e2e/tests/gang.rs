//! Gang scheduling on the local control plane, one set of tests per route: Kubernetes' own
//! Workload API (`--gang-scheduler native`, the default scheduler with the `GangScheduling`
//! gate), scheduler-plugins' coscheduling (`--gang-scheduler scheduler-plugins`, its scheduler
//! started by `e2e/cluster gang scheduler-plugins start`) and Volcano (`--gang-scheduler
//! volcano`, `e2e/cluster gang volcano start`), on KWOK nodes of 8 GPUs each. Every test sizes
//! its jobs from the GPUs the cluster has, so they overflow it on purpose: run them alone and one
//! at a time (`--test-threads=1`), with the shared operator stopped
//! (`e2e/cluster stop-extras`), as `run-tests` does. A route's operator is started for its first
//! test and replaced when a test of another route comes.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset_e2e::gang::Route;
use trainset_e2e::kueue::{LOW, Queues, queued};
use trainset_e2e::operator::{self, Extra};
use trainset_e2e::{
    TestNamespace, client, create, delay, dynamic_api, install_crds, loopback, pods_with, wait_for,
    wait_leading, wait_state, wait_until,
};

const PORT: &str = "gang_operator";
const GPU: &str = "nvidia.com/gpu";
/// GPUs each worker asks for: a whole KWOK node.
const GPUS_PER_POD: i64 = 8;
/// How long a gang that cannot be placed is watched for a pod that was placed anyway. A scheduler
/// tries a pod when it arrives and again after backoffs of at most 10 s (Volcano: a session each
/// second), so a gang let through in part shows within the first attempts; the plain Job after it
/// shows the scheduler was placing pods meanwhile.
const HELD: Duration = Duration::from_secs(20);

/// The operator of these tests and the route it was started for, replaced when a test of another
/// route comes, and stopped by `e2e/cluster stop-extras` (its pid is registered like every test
/// operator's).
static OPERATOR: Mutex<Option<(Route, Extra)>> = Mutex::new(None);

async fn setup(route: Route, prefix: &str) -> (Client, TestNamespace) {
    let client = client().await;
    serve(route, &client).await;
    wait_for_free_gpus(&client).await;
    let ns = TestNamespace::create(&client, prefix).await;
    (client, ns)
}

/// Waits until no pod holds a GPU: the namespace of the test before is deleted in the background,
/// and a scheduler that found too little room for a gang may not look again for minutes.
async fn wait_for_free_gpus(client: &Client) {
    let pods: Api<Pod> = Api::all(client.clone());
    wait_for(Duration::from_secs(120), "no pod holding a GPU", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|pod| !(is_bound(pod) && holds_gpu(pod)))
            .then_some(())
    })
    .await;
}

/// The pod asks for a GPU and is neither finished nor gone.
fn holds_gpu(pod: &Pod) -> bool {
    let finished = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let asks = pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|r| r.contains_key(GPU))
    });
    asks && !matches!(finished, Some("Succeeded" | "Failed"))
}

/// Makes the leading operator the route's.
async fn serve(route: Route, client: &Client) {
    install_crds(client).await;
    assert!(
        route.served(client).await,
        "{route:?}: the cluster serves no PodGroups of this route (scheduler-plugins: e2e/cluster gang scheduler-plugins start)"
    );
    let previous = OPERATOR
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let kept = match previous {
        Some((running, mut extra)) => {
            if !extra.running() {
                None
            } else if running == route {
                Some(extra)
            } else {
                extra.stop().await;
                None
            }
        }
        None => None,
    };
    let operator = match kept {
        Some(extra) => extra,
        None => {
            let args = ["--gang-scheduler", route.flag()];
            operator::spawn_extra_with(client, &loopback(PORT), &args).await
        }
    };
    *OPERATOR.lock().unwrap_or_else(PoisonError::into_inner) = Some((route, operator));
    // Another trainset holding the Lease keeps it waiting: e2e/cluster stop-extras.
    wait_leading(&loopback(PORT), Duration::from_secs(60)).await;
}

/// The GPUs of every node, so that a test knows how many whole-node pods fit.
async fn cluster_gpus(client: &Client) -> i64 {
    allocatable_milli(client, GPU).await.iter().sum::<i64>() / 1000
}

/// Each node's allocatable `resource` in thousandths (`8` is 8000, `500m` is 500).
async fn allocatable_milli(client: &Client, resource: &str) -> Vec<i64> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing nodes: {e}"));
    list.items
        .iter()
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get(resource))
        .filter_map(|q| match q.0.strip_suffix('m') {
            Some(milli) => milli.parse::<i64>().ok(),
            None => q.0.parse::<i64>().ok().map(|units| units * 1000),
        })
        .collect()
}

/// A PyTorchJob of `workers` pods (no Master, so one gang), each asking for a whole node's GPUs
/// and running `seconds`.
fn workers_job(name: &str, workers: i64, seconds: u32, policy: Value) -> Value {
    let whole_node = json!({"limits": {GPU: GPUS_PER_POD.to_string()}});
    job_of(name, workers, seconds, policy, whole_node)
}

/// A PyTorchJob of `workers` pods, each asking for `resources`.
fn job_of(name: &str, workers: i64, seconds: u32, policy: Value, resources: Value) -> Value {
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
                        "name": "pytorch", "image": "trainer:1", "resources": resources
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

async fn a_job_larger_than_the_cluster_places_no_pod(route: Route) {
    let (client, ns) = setup(route, "gang-large").await;
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
    let group = route
        .pod_groups(&client, &ns.name)
        .get("large")
        .await
        .unwrap_or_else(|e| panic!("PodGroup large: {e}"));
    assert_eq!(*route.min_count(&group), workers);
    // Nothing runs: the job says Created, not Running, as v1 says of pods not yet placed.
    let held = dynamic_api(&client, &job, Some(&ns.name))
        .get("large")
        .await
        .unwrap_or_else(|e| panic!("getting large: {e}"));
    assert_eq!(
        held.data["status"]["state"], "Created",
        "{:?}",
        held.data["status"]
    );

    // The same pods without a gang, sent to the same scheduler where it places such pods: as
    // many as fit are placed, so the gang above is what held them back, not a lack of room or a
    // scheduler at rest.
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
                "spec": {"restartPolicy": "Never", "schedulerName": route.plain_scheduler(), "containers": [{
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

async fn a_job_that_fits_is_placed_whole_and_succeeds(route: Route) {
    let (client, ns) = setup(route, "gang-fits").await;
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
    let pods = pods_with(&client, &ns.name, "training.kubeflow.org/job-name=fits").await;
    for pod in &pods {
        let scheduler = pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref());
        assert_eq!(scheduler, Some(route.scheduler()), "{}", pod.name_any());
    }
    wait_state(&jobs, "fits", "Succeeded", Duration::from_secs(120)).await;
    ns.delete().await;
}

async fn two_jobs_that_fit_only_alone_run_one_after_the_other(route: Route) {
    let (client, ns) = setup(route, "gang-two").await;
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

async fn min_available_places_that_many_and_suspend_resume_keeps_the_gang(route: Route) {
    let (client, ns) = setup(route, "gang-min").await;
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
    let groups = route.pod_groups(&client, &ns.name);
    let before = groups
        .get("min")
        .await
        .unwrap_or_else(|e| panic!("PodGroup min: {e}"));
    assert_eq!(*route.min_count(&before), fit);

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

/// Kueue and a gang together: the job waits, suspended, while its queue has no quota; once Kueue
/// admits it, the gang scheduler places every pod at once, and it succeeds.
async fn a_queued_job_is_admitted_then_placed_whole(route: Route) {
    let client = client().await;
    serve(route, &client).await;
    let gpus = cluster_gpus(&client).await;
    let mut queues = Queues::new(&client, "gang-kueue", GPU, "0").await;
    let ns = queues.ns.name.clone();
    let workers = gpus / GPUS_PER_POD;
    let mut job = workers_job("queued", workers, 3, json!({}));
    job["metadata"]["labels"] = queued(LOW);
    let jobs = create(&client, &ns, &job).await;
    wait_state(&jobs, "queued", "Suspended", Duration::from_secs(30)).await;
    assert_eq!(
        placed(&client, &ns, "queued").await,
        (0, 0),
        "pods before admission"
    );
    let group = route
        .pod_groups(&client, &ns)
        .get("queued")
        .await
        .unwrap_or_else(|e| panic!("PodGroup queued: {e}"));
    assert_eq!(*route.min_count(&group), workers);

    queues.set_quota(&gpus.to_string()).await;
    let count = usize::try_from(workers).unwrap_or_default();
    wait_for(
        Duration::from_secs(60),
        "every pod of the admitted job placed",
        || async { (placed(&client, &ns, "queued").await == (count, count)).then_some(()) },
    )
    .await;
    wait_state(&jobs, "queued", "Succeeded", Duration::from_secs(120)).await;
    queues.delete().await;
}

/// scheduler-plugins holds a group's placed pods at most `scheduleTimeoutSeconds` while they wait
/// for the rest, then turns them back and says so. Here the gang's CPUs fit the cluster in sum
/// but one pod more than fits on the nodes, so every other pod waits; one pod short is within
/// the plugin's default 10% that does not reject the group at once, so the wait runs out.
#[tokio::test]
#[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
async fn gang_scheduler_plugins_schedule_timeout_seconds_bounds_the_wait() {
    const POD_MILLICPU: i64 = 900;
    const TIMEOUT_SECONDS: i64 = 7;
    let route = Route::SchedulerPlugins;
    let (client, ns) = setup(route, "gang-timeout").await;
    let node_millicpu = allocatable_milli(&client, "cpu").await;
    let fit: i64 = node_millicpu.iter().map(|m| m / POD_MILLICPU).sum();
    let workers = fit + 1;
    let total: i64 = node_millicpu.iter().sum();
    assert!(
        workers * POD_MILLICPU <= total && workers >= 10,
        "{workers} pods of {POD_MILLICPU}m on nodes of {node_millicpu:?}m"
    );
    let policy = json!({"scheduleTimeoutSeconds": TIMEOUT_SECONDS});
    let cpu = json!({"requests": {"cpu": format!("{POD_MILLICPU}m")}});
    create(
        &client,
        &ns.name,
        &job_of("timeout", workers, 600, policy, cpu),
    )
    .await;
    let groups = route.pod_groups(&client, &ns.name);
    let group = wait_for(Duration::from_secs(30), "PodGroup timeout", || async {
        groups.get_opt("timeout").await.ok().flatten()
    })
    .await;
    assert_eq!(
        group.data["spec"]["scheduleTimeoutSeconds"],
        TIMEOUT_SECONDS
    );

    // The plugin's own default is 60 s: a wait of the job's length is the job's field at work.
    let expected =
        format!("rejected due to timeout after waiting {TIMEOUT_SECONDS}s at plugin Coscheduling");
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    wait_for(Duration::from_secs(90), &expected, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.message.as_deref().is_some_and(|m| m.contains(&expected)))
            .then_some(())
    })
    .await;
    let (_, bound) = placed(&client, &ns.name, "timeout").await;
    assert_eq!(bound, 0, "pods of a gang that never completes were bound");
    ns.delete().await;
}

/// Each route's tests, in a module named after it (`gang_native::...`).
macro_rules! route_tests {
    ($module:ident, $route:expr) => {
        mod $module {
            use super::Route;

            #[tokio::test]
            #[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
            async fn a_queued_job_is_admitted_then_placed_whole() {
                super::a_queued_job_is_admitted_then_placed_whole($route).await;
            }

            #[tokio::test]
            #[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
            async fn a_job_larger_than_the_cluster_places_no_pod() {
                super::a_job_larger_than_the_cluster_places_no_pod($route).await;
            }

            #[tokio::test]
            #[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
            async fn a_job_that_fits_is_placed_whole_and_succeeds() {
                super::a_job_that_fits_is_placed_whole_and_succeeds($route).await;
            }

            #[tokio::test]
            #[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
            async fn two_jobs_that_fit_only_alone_run_one_after_the_other() {
                super::two_jobs_that_fit_only_alone_run_one_after_the_other($route).await;
            }

            #[tokio::test]
            #[ignore = "needs the local control plane (e2e/cluster up) and no other trainset leading"]
            async fn min_available_places_that_many_and_suspend_resume_keeps_the_gang() {
                super::min_available_places_that_many_and_suspend_resume_keeps_the_gang($route).await;
            }
        }
    };
}

route_tests!(gang_native, Route::Native);
route_tests!(gang_scheduler_plugins, Route::SchedulerPlugins);
route_tests!(gang_volcano, Route::Volcano);
