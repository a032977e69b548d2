//! Side by side on the local control plane: the same N PyTorchJobs submitted through trainset,
//! and their compiled JobSets created directly, which is the floor trainset can approach. Prints
//! how long submitting took, when the JobSets existed and when every job had finished.
//!
//! Needs `e2e/cluster up`; `e2e/bench` builds trainset in release mode and runs this.
//! Usage: `throughput [JOBS]` (default 40).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use jobset_types::JobSet;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use trainset::compile::{Options, compile_manifest};
use trainset_e2e::{
    TestNamespace, client, condition, dynamic_api, http_get, install_crds, operator, status,
};

/// Creations in flight at once, for both runs.
const IN_FLIGHT: usize = 8;
const LIMIT: Duration = Duration::from_secs(600);

fn pytorchjob(index: usize) -> Value {
    let template = json!({
        "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1s",
                                     "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "1s"}},
        "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}});
    json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": format!("bench-{index}")},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": template},
               "Worker": {"replicas": 1, "template": template}}}})
}

/// Seconds since `start`, for each name, when `done` first held for it.
struct Timeline {
    start: Instant,
    seen: HashMap<String, f64>,
}

impl Timeline {
    fn new(start: Instant) -> Self {
        Self {
            start,
            seen: HashMap::new(),
        }
    }

    fn mark(&mut self, name: &str) {
        let at = self.start.elapsed().as_secs_f64();
        self.seen.entry(name.to_owned()).or_insert(at);
    }

    /// (median, 99th percentile, last) in seconds.
    fn summary(&self) -> (f64, f64, f64) {
        let mut times: Vec<f64> = self.seen.values().copied().collect();
        times.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((times.len() as f64 * q).ceil() as usize).saturating_sub(1);
            times.get(index).copied().unwrap_or(f64::NAN)
        };
        (at(0.5), at(0.99), times.last().copied().unwrap_or(f64::NAN))
    }
}

/// Creates every object with `IN_FLIGHT` requests at once; returns the seconds it took.
async fn submit(api: &Api<DynamicObject>, objects: &[Value]) -> f64 {
    let start = Instant::now();
    stream::iter(objects)
        .for_each_concurrent(IN_FLIGHT, |object| async move {
            let object: DynamicObject =
                serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("object: {e}"));
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("creating: {e}"));
        })
        .await;
    start.elapsed().as_secs_f64()
}

/// When each JobSet existed and completed, and when each submitted object was finished.
struct Timelines {
    created: Timeline,
    completed: Timeline,
    finished: Timeline,
}

/// Polls, while the objects are being submitted, until `count` JobSets have completed and
/// `count` objects are finished, recording when each was first seen each way.
async fn watch(
    client: &Client,
    ns: &str,
    finished: impl Fn(&DynamicObject) -> bool,
    finished_api: &Api<DynamicObject>,
    count: usize,
    start: Instant,
) -> Timelines {
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), ns);
    let mut created = Timeline::new(start);
    let mut completed = Timeline::new(start);
    let mut done = Timeline::new(start);
    while (completed.seen.len() < count || done.seen.len() < count) && start.elapsed() < LIMIT {
        if let Ok(list) = jobsets.list(&ListParams::default()).await {
            for jobset in list.items {
                let name = jobset.metadata.name.as_deref().unwrap_or_default();
                created.mark(name);
                let conditions = jobset.status.iter().flat_map(|s| s.conditions.iter());
                if conditions
                    .into_iter()
                    .any(|c| c.type_ == "Completed" && c.status == "True")
                {
                    completed.mark(name);
                }
            }
        }
        if let Ok(list) = finished_api.list(&ListParams::default()).await {
            for object in list.items.iter().filter(|o| finished(o)) {
                done.mark(object.metadata.name.as_deref().unwrap_or_default());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        completed.seen.len() == count && done.seen.len() == count,
        "only {} completed JobSets and {} finished jobs of {count} within {LIMIT:?}",
        completed.seen.len(),
        done.seen.len()
    );
    Timelines {
        created,
        completed,
        finished: done,
    }
}

fn condition_true(object: &DynamicObject, type_: &str) -> bool {
    condition(&status(object), type_)["status"] == "True"
}

/// Mean of a Prometheus histogram from trainset's `/metrics`, in seconds.
async fn histogram_mean(name: &str) -> Option<f64> {
    let (_, body) = http_get(&operator::metrics_address(), "/metrics").await?;
    let total = |suffix: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(&format!("{name}_{suffix}")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let count = total("count");
    (count > 0.0).then(|| total("sum") / count)
}

#[tokio::main]
async fn main() {
    let jobs: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().unwrap_or_else(|e| panic!("JOBS {n:?}: {e}")))
        .unwrap_or(40);
    let client = client().await;
    install_crds(&client).await;
    operator::ensure(&client).await;
    let manifests: Vec<Value> = (0..jobs).map(pytorchjob).collect();

    // Direct: the compiled JobSets, created by the client itself.
    let direct_ns = TestNamespace::create(&client, "bench-direct").await;
    let options = Options {
        default_namespace: Some(&direct_ns.name),
        ssh_key: None,
        cluster_domain: None,
    };
    let jobsets: Vec<Value> = manifests
        .iter()
        .map(|m| {
            let compiled = compile_manifest(m.clone(), &options).expect("compiles");
            let mut jobset = serde_json::to_value(&compiled.jobset).expect("JSON");
            // No owner to point at: the JobSet stands alone.
            jobset["metadata"]["ownerReferences"] = Value::Null;
            jobset
        })
        .collect();
    let jobset_api = dynamic_api(&client, &jobsets[0], Some(&direct_ns.name));
    let start = Instant::now();
    let (direct_submit, direct) = tokio::join!(
        submit(&jobset_api, &jobsets),
        watch(
            &client,
            &direct_ns.name,
            |o| condition_true(o, "Completed"),
            &jobset_api,
            jobs,
            start,
        )
    );

    // Through trainset: the training jobs.
    let trainset_ns = TestNamespace::create(&client, "bench-trainset").await;
    let job_api = dynamic_api(&client, &manifests[0], Some(&trainset_ns.name));
    let start = Instant::now();
    let (trainset_submit, through) = tokio::join!(
        submit(&job_api, &manifests),
        watch(
            &client,
            &trainset_ns.name,
            |o| condition_true(o, "Succeeded"),
            &job_api,
            jobs,
            start,
        )
    );

    let row = |label: &str, direct: String, trainset: String| {
        println!("{label:<44} {direct:>22} {trainset:>22}");
    };
    let times = |(p50, p99, last): (f64, f64, f64)| format!("{p50:.2} / {p99:.2} / {last:.2}");
    println!(
        "{jobs} PyTorchJobs (1 master + 1 worker, pods run 1 s), {IN_FLIGHT} creations in flight"
    );
    row("", "direct JobSets".into(), "through trainset".into());
    row(
        "submit every object (s)",
        format!("{direct_submit:.2}"),
        format!("{trainset_submit:.2}"),
    );
    row(
        "JobSet exists, p50 / p99 / last (s)",
        times(direct.created.summary()),
        times(through.created.summary()),
    );
    row(
        "JobSet completed, p50 / p99 / last (s)",
        times(direct.completed.summary()),
        times(through.completed.summary()),
    );
    row(
        "job reported finished, p50 / p99 / last (s)",
        times(direct.finished.summary()),
        times(through.finished.summary()),
    );
    for (label, metric) in [
        (
            "trainset reconcile, mean",
            "trainset_reconcile_duration_seconds",
        ),
        (
            "trainset job-to-JobSet latency, mean",
            "trainset_jobset_creation_latency_seconds",
        ),
    ] {
        let mean = histogram_mean(metric)
            .await
            .map_or("-".to_owned(), |s| format!("{:.1} ms", s * 1000.0));
        row(label, "-".into(), mean);
    }
    direct_ns.delete().await;
    trainset_ns.delete().await;
}
