//! `e2e/differential [FILE...]`: applies each manifest (default: `e2e/testdata/differential/`)
//! unchanged under the upstream operators (training-operator v1.9.4 for the v1 kinds and for
//! MPIJob v1, mpi-operator v0.8.2 for MPIJob v2beta1) and then under trainset, each in a fresh namespace,
//! lets KWOK run the pods to the end, compares what each did pod by pod
//! (`trainset_e2e::differential`), and fails when a difference is not in docs/compatibility.md's
//! "Deviations from v1" table. With `TRAINSET_E2E_GANG_SCHEDULER_NAME` set (`e2e/differential
//! --gang NAME`): the gang corpus (`e2e/testdata/differential-gang/`), both sides started with
//! that gang scheduler, and the PodGroups each made compared too.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::Value;
use trainset_e2e::differential::{self, Run};
use trainset_e2e::gang::Route;
use trainset_e2e::{
    Peer, TestNamespace, client, dynamic_api, loopback, operator, repo_root, wait_leading,
};

/// How long one case may take to reach its end under one operator.
const CASE_LIMIT: Duration = Duration::from_secs(240);
/// How long a finished job's status may keep changing (counts catching up with the condition).
const SETTLE_LIMIT: Duration = Duration::from_secs(20);
const MPI_CONFIG_VOLUME: &str = "mpi-job-config";
/// Kinds a case may carry besides its job that are not namespaced.
const CLUSTER_SCOPED: &[&str] = &["PriorityClass", "ClusterTrainingRuntime"];

struct Case {
    name: String,
    kind: String,
    documents: Vec<Value>,
}

impl Case {
    fn job(&self) -> &Value {
        self.documents
            .iter()
            .find(|d| {
                d["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("kubeflow.org/"))
            })
            .unwrap_or(&Value::Null)
    }

    fn suspended(&self) -> bool {
        let spec = &self.job()["spec"];
        spec["runPolicy"]["suspend"] == true
    }
}

fn load(path: &PathBuf) -> Result<Case, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let documents = trainset_e2e::yaml_documents(&text);
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let case = Case {
        name,
        kind: String::new(),
        documents,
    };
    let mut kind = case.job()["kind"].as_str().unwrap_or_default().to_owned();
    // training-operator's MPIJob: another API than mpi-operator's, with deviations of its own.
    if kind == "MPIJob" && case.job()["apiVersion"] == "kubeflow.org/v1" {
        kind = MPIJOB_V1.to_owned();
    }
    if kind.is_empty() {
        return Err(format!(
            "{}: no kubeflow.org training job in it",
            path.display()
        ));
    }
    Ok(Case { kind, ..case })
}

/// The gang scheduler both sides run with, as training-operator's `--gang-scheduler-name`
/// names it; set by `e2e/differential --gang NAME` (and read by `e2e/peers`).
const GANG_ENV: &str = "TRAINSET_E2E_GANG_SCHEDULER_NAME";

fn corpus(args: &[String], gang: bool) -> Result<Vec<Case>, String> {
    let mut paths: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
    if paths.is_empty() {
        let corpus = if gang {
            "differential-gang"
        } else {
            "differential"
        };
        let dir = repo_root().join("e2e/testdata").join(corpus);
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        paths = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        paths.sort();
    }
    paths.iter().map(load).collect()
}

/// A case's kind when it is an MPIJob at `kubeflow.org/v1`, as docs/compatibility.md's table
/// names it.
const MPIJOB_V1: &str = "MPIJob v1";

/// Set for `e2e/peers` when training-operator is to serve its own MPIJob too.
const MPIJOB_V1_ENV: &str = "TRAINSET_E2E_MPIJOB_V1";

/// The peer that serves a kind, as `e2e/peers` names it.
fn peer_of(kind: &str) -> &'static str {
    if kind == "MPIJob" {
        "mpi-operator"
    } else {
        "training-operator"
    }
}

/// The two MPIJob peers each serve `mpijobs` on a CRD of their own, so they cannot run at once.
fn one_mpijob_api(cases: &[Case]) -> Result<(), String> {
    let has = |kind: &str| cases.iter().any(|c| c.kind == kind);
    if has("MPIJob") && has(MPIJOB_V1) {
        return Err(
            "MPIJob v2beta1 (mpi-operator) and v1 (training-operator) cases cannot run \
                    together: each peer serves mpijobs on its own CRD; run them apart"
                .to_owned(),
        );
    }
    Ok(())
}

/// Every pod with a v1 job-name label, by uid, in its last version: a watch sees pods that an
/// operator deletes the moment the job ends (cleanPodPolicy), which a final list would miss.
fn watch_pods(
    client: &Client,
) -> (
    Arc<Mutex<HashMap<String, Pod>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen: Arc<Mutex<HashMap<String, Pod>>> = Arc::default();
    let api: Api<Pod> = Api::all(client.clone());
    let config = watcher::Config::default().labels("training.kubeflow.org/job-name");
    let store = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                Ok(watcher::Event::Delete(pod)) => pod,
                _ => continue,
            };
            if let (Some(uid), Ok(mut map)) = (pod.uid(), store.lock()) {
                map.insert(uid, pod);
            }
        }
    });
    (seen, task)
}

/// Objects by uid, each in its last version and whether it was deleted.
type SeenObjects = Arc<Mutex<HashMap<String, (Value, bool)>>>;

/// Every object of `resource` (the gang's PodGroups, the autoscalers): an operator may delete a
/// job's object when the job ends, which a final list would miss.
fn watch_objects(
    client: &Client,
    resource: &ApiResource,
) -> (SeenObjects, tokio::task::JoinHandle<()>) {
    let seen: SeenObjects = Arc::default();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let store = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let (group, deleted) = match event {
                Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) => (g, false),
                Ok(watcher::Event::Delete(g)) => (g, true),
                _ => continue,
            };
            if let (Some(uid), Ok(mut map)) = (group.uid(), store.lock()) {
                map.insert(
                    uid,
                    (serde_json::to_value(group).unwrap_or_default(), deleted),
                );
            }
        }
    });
    (seen, task)
}

/// What a finished [`watch_objects`] saw, by namespace.
fn by_namespace(
    (seen, task): (SeenObjects, tokio::task::JoinHandle<()>),
) -> BTreeMap<String, Vec<(Value, bool)>> {
    task.abort();
    let all: Vec<(Value, bool)> = seen
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    let mut grouped: BTreeMap<String, Vec<(Value, bool)>> = BTreeMap::new();
    for (object, deleted) in all {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        grouped.entry(ns).or_default().push((object, deleted));
    }
    grouped
}

fn condition_true(job: &Value, type_: &str) -> bool {
    trainset_e2e::condition(&job["status"], type_)["status"] == "True"
}

/// Waits until the job ends (Succeeded or Failed; Suspended for a suspended one) and its status
/// stops changing, and returns it.
async fn settle(client: &Client, case: &Case, namespace: &str) -> Result<Value, String> {
    let api = dynamic_api(client, case.job(), Some(namespace));
    let name = case.job()["metadata"]["name"].as_str().unwrap_or_default();
    let deadline = Instant::now() + CASE_LIMIT;
    let ended = |job: &Value| {
        condition_true(job, "Succeeded")
            || condition_true(job, "Failed")
            || (case.suspended() && condition_true(job, "Suspended"))
    };
    let mut job = Value::Null;
    while !ended(&job) {
        if Instant::now() > deadline {
            return Err(format!(
                "did not end within {CASE_LIMIT:?}; status: {}",
                job["status"]
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(object) = api.get(name).await {
            job = serde_json::to_value(object).unwrap_or_default();
        }
    }
    // Counts follow the condition within a few reconciles: stop once two reads a second
    // apart agree.
    let settle_deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok(object) = api.get(name).await else {
            break;
        };
        let next = serde_json::to_value(object).unwrap_or_default();
        let same = next["status"] == job["status"];
        job = next;
        if same || Instant::now() > settle_deadline {
            break;
        }
    }
    Ok(job)
}

/// The hostfile in the ConfigMap a launcher pod mounts as `mpi-job-config`.
async fn hostfile(client: &Client, namespace: &str, pods: &[Value]) -> Option<String> {
    let config_map = pods.iter().find_map(|pod| {
        pod["spec"]["volumes"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == MPI_CONFIG_VOLUME)?["configMap"]["name"]
            .as_str()
            .map(str::to_owned)
    })?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    api.get(&config_map).await.ok()?.data?.remove("hostfile")
}

async fn run_case(
    client: &Client,
    case: &Case,
    who: &str,
) -> (TestNamespace, Result<Value, String>) {
    let namespace = TestNamespace::create(client, &format!("diff-{who}")).await;
    for document in &case.documents {
        let cluster_scoped = CLUSTER_SCOPED.iter().any(|k| document["kind"] == *k);
        // Each run has a namespace of its own, whatever the manifest names.
        let mut document = document.clone();
        if let Some(meta) = document["metadata"].as_object_mut() {
            meta.remove("namespace");
        }
        let object: kube::api::DynamicObject = match serde_json::from_value(document.clone()) {
            Ok(o) => o,
            Err(e) => return (namespace, Err(format!("manifest: {e}"))),
        };
        let document = &document;
        let api = dynamic_api(
            client,
            document,
            (!cluster_scoped).then_some(namespace.name.as_str()),
        );
        match api.create(&Default::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 && cluster_scoped => {}
            Err(e) => {
                return (
                    namespace,
                    Err(format!("creating {}: {e}", document["kind"])),
                );
            }
        }
    }
    let result = settle(client, case, &namespace.name).await;
    (namespace, result)
}

/// Runs every case at once under whichever operator serves now; returns each case's run, with
/// the PodGroups of `gang` when given.
async fn run_all(
    client: &Client,
    cases: &[Case],
    who: &str,
    gang: Option<&ApiResource>,
) -> Vec<Result<Run, String>> {
    let (seen, watch) = watch_pods(client);
    let groups = gang.map(|resource| watch_objects(client, resource));
    let autoscalers = watch_objects(client, &ApiResource::erase::<HorizontalPodAutoscaler>(&()));
    let outcomes =
        futures::future::join_all(cases.iter().map(|case| run_case(client, case, who))).await;
    watch.abort();
    let mut groups_by_namespace = groups.map(by_namespace).unwrap_or_default();
    let mut autoscalers_by_namespace = by_namespace(autoscalers);
    let pods: Vec<Pod> = seen
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    let mut by_namespace: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for pod in pods {
        let ns = pod.namespace().unwrap_or_default();
        by_namespace
            .entry(ns)
            .or_default()
            .push(serde_json::to_value(pod).unwrap_or_default());
    }
    let mut runs = Vec::new();
    for (namespace, outcome) in outcomes {
        let pods = by_namespace.remove(&namespace.name).unwrap_or_default();
        let pod_groups = groups_by_namespace
            .remove(&namespace.name)
            .unwrap_or_default();
        let autoscalers = autoscalers_by_namespace
            .remove(&namespace.name)
            .unwrap_or_default();
        let run = match outcome {
            Ok(job) => Ok(Run {
                hostfile: hostfile(client, &namespace.name, &pods).await,
                events: events_of(client, &namespace.name, &job).await,
                namespace: namespace.name.clone(),
                job,
                pods,
                pod_groups,
                autoscalers,
            }),
            Err(e) => Err(e),
        };
        namespace.delete().await;
        runs.push(run);
    }
    runs
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "usage: e2e/differential [--gang NAME] [FILE...]   (default: e2e/testdata/differential/*.yaml, with --gang e2e/testdata/differential-gang/*.yaml)"
        );
        return ExitCode::SUCCESS;
    }
    let gang = std::env::var(GANG_ENV).ok().filter(|n| !n.is_empty());
    let cases = match corpus(&args, gang.is_some()) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("differential: no cases");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("differential: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = one_mpijob_api(&cases) {
        eprintln!("differential: {e}");
        return ExitCode::FAILURE;
    }
    let known = match differential::documented_deviations(differential::DEVIATIONS_HEADING) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("differential: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = client().await;

    let groups = gang
        .as_deref()
        .map(|name| Route::from_v1_name(name).pod_group_resource());
    let started = Instant::now();
    let upstream = {
        // The peers read the gang scheduler from the environment (e2e/peers), and whether
        // training-operator serves its MPIJob too.
        let mpijob_v1 = cases.iter().any(|c| c.kind == MPIJOB_V1);
        let env: &[(&str, &str)] = if mpijob_v1 {
            &[(MPIJOB_V1_ENV, "1")]
        } else {
            &[]
        };
        let peers: BTreeSet<&'static str> = cases.iter().map(|c| peer_of(&c.kind)).collect();
        let _started: Vec<Peer> = peers
            .into_iter()
            .map(|peer| Peer::start_with(peer, env))
            .collect();
        run_all(&client, &cases, "upstream", groups.as_ref()).await
    };
    let upstream_time = started.elapsed();
    let started = Instant::now();
    let ours = match gang.as_deref() {
        None => {
            operator::ensure(&client).await;
            run_all(&client, &cases, "trainset", None).await
        }
        Some(name) => {
            // An operator of its own with the gang scheduler, as the gang tests start theirs.
            let address = loopback("gang_operator");
            let args = ["--gang-scheduler-name", name];
            let gang_operator = operator::spawn_extra_with(&client, &address, &args).await;
            wait_leading(&address, Duration::from_secs(60)).await;
            let runs = run_all(&client, &cases, "trainset", groups.as_ref()).await;
            gang_operator.stop().await;
            runs
        }
    };
    let trainset_time = started.elapsed();

    let outcomes = cases
        .iter()
        .zip(upstream)
        .zip(ours)
        .map(|((case, upstream), trainset)| differential::Outcome {
            name: case.name.clone(),
            kind: case.kind.clone(),
            upstream,
            trainset,
        })
        .collect();
    let times = (upstream_time, trainset_time);
    if differential::conclude("differential", outcomes, differential::facts, &known, times) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The (type, reason) of each event on the case's job.
async fn events_of(client: &Client, namespace: &str, job: &Value) -> Vec<(String, String)> {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    trainset_e2e::events_for(client, namespace, name).await
}
