//! `e2e/differential-trainjob [FILE...]`: creates each TrainJob (default: every runtime in
//! `deploy/runtimes/` with an SDK-shaped TrainJob, then `e2e/testdata/trainjob-differential/`)
//! under Kubeflow Trainer v2.3.0 and then under trainset, each in a fresh namespace with the
//! case's runtimes as TrainingRuntimes there, and compares what each created field by field: the
//! JobSet (labels, annotations, owner, the whole spec as the apiserver stored it), and for MPI
//! runtimes the hostfile and the SSH Secret's shape, and for a runtime with a `podGroupPolicy`
//! the PodGroup (the CRDs: `e2e/cluster gang scheduler-plugins start`, `e2e/cluster gang volcano
//! crds`); or, where either refuses the TrainJob
//! (Trainer's webhook at creation, trainset's `InvalidSpec` at reconcile), the first field the
//! refusal names. Fails when a difference is not in docs/compatibility.md's "Deviations from Trainer
//! v2.3.0" table.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Client;
use kube::api::Api;
use serde_json::{Value, json};
use trainset_e2e::differential::{self, Fact, Facts, compared, flatten};
use trainset_e2e::gang::Route;
use trainset_e2e::{
    Peer, TestNamespace, apply, client, condition, create_when_admitted_unless, dynamic_api,
    operator, repo_root, wait_for,
};

/// How long an operator may take to create a case's JobSet.
const CREATE_LIMIT: Duration = Duration::from_secs(60);

struct Case {
    name: String,
    /// The ML policy of its runtime (`torch`, `mpi`, ...), the table's "kinds".
    policy: String,
    runtimes: Vec<Value>,
    trainjob: Value,
}

fn policy_of(runtime: &Value) -> String {
    let ml = &runtime["spec"]["mlPolicy"];
    ["torch", "mpi", "jax", "xgboost", "flux"]
        .into_iter()
        .find(|p| !ml[p].is_null())
        .unwrap_or("plain")
        .to_owned()
}

/// A runtime of the case as a TrainingRuntime of the test namespace, so each operator's own
/// ClusterTrainingRuntimes (Trainer installs its shipped ones) play no part.
fn namespaced(mut runtime: Value) -> Value {
    runtime["kind"] = json!("TrainingRuntime");
    if let Some(metadata) = runtime["metadata"].as_object_mut() {
        metadata.remove("namespace");
    }
    runtime
}

fn from_documents(name: String, documents: Vec<Value>) -> Result<Case, String> {
    let (trainjobs, runtimes): (Vec<Value>, Vec<Value>) =
        documents.into_iter().partition(|d| d["kind"] == "TrainJob");
    let [trainjob] = <[Value; 1]>::try_from(trainjobs)
        .map_err(|found| format!("{name}: {} TrainJobs, not one", found.len()))?;
    let runtimes: Vec<Value> = runtimes.into_iter().map(namespaced).collect();
    let wanted = trainjob["spec"]["runtimeRef"]["name"]
        .as_str()
        .unwrap_or_default();
    let runtime = runtimes
        .iter()
        .find(|r| r["metadata"]["name"] == wanted)
        .ok_or_else(|| format!("{name}: no runtime {wanted:?} in the case"))?;
    Ok(Case {
        name,
        policy: policy_of(runtime),
        runtimes,
        trainjob,
    })
}

/// The TrainJob the SDK's `train()` makes for a `CustomTrainer` on two nodes of one CPU.
fn custom_trainer(runtime: &str) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "sdk"},
        "spec": {
            "runtimeRef": {"name": runtime, "kind": "TrainingRuntime"},
            "trainer": {"numNodes": 2, "command": ["bash", "-c", "python train.py"],
                        "resourcesPerNode": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
        }
    })
}

/// The TrainJob the SDK's `train()` makes for a `BuiltinTrainer` (a `TorchTuneConfig` with LoRA
/// and an instruct dataset, two GPUs) with Hugging Face initializers for the runtime's model.
fn builtin_trainer(runtime: &str, spec: &Value) -> Value {
    let model_uri = spec["spec"]["template"]["spec"]["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|job| job["name"] == "model-initializer")
        .and_then(|job| {
            job["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
                .as_array()?
                .iter()
                .find(|var| var["name"] == "STORAGE_URI")
        })
        .map_or(Value::Null, |var| var["value"].clone());
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "sdk"},
        "spec": {
            "runtimeRef": {"name": runtime, "kind": "TrainingRuntime"},
            "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"},
                            "model": {"storageUri": model_uri}},
            "trainer": {"command": ["tune", "run"],
                        "args": ["epochs=1", "dataset.data_dir=/workspace/dataset/data",
                                 "model.lora_rank=8", "model.lora_attn_modules=[q_proj,v_proj]",
                                 "dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet"],
                        "resourcesPerNode": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}
        }
    })
}

/// Each shipped runtime with the TrainJob the SDK's `train()` makes for it.
fn shipped() -> Result<Vec<Case>, String> {
    let dir = repo_root().join("deploy/runtimes");
    let mut cases = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    paths.sort();
    for path in paths {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for runtime in trainset_e2e::yaml_documents(&text) {
            if runtime["kind"] != "ClusterTrainingRuntime" {
                continue;
            }
            let name = runtime["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let torchtune =
                runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "torchtune";
            let trainjob = if torchtune {
                builtin_trainer(&name, &runtime)
            } else {
                custom_trainer(&name)
            };
            cases.push(from_documents(
                format!("shipped-{name}"),
                vec![runtime, trainjob],
            )?);
        }
    }
    Ok(cases)
}

fn corpus(args: &[String]) -> Result<Vec<Case>, String> {
    let mut paths: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
    let mut cases = Vec::new();
    if paths.is_empty() {
        cases = shipped()?;
        let dir = repo_root().join("e2e/testdata/trainjob-differential");
        paths = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        paths.sort();
    }
    for path in paths {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        cases.push(from_documents(name, trainset_e2e::yaml_documents(&text))?);
    }
    Ok(cases)
}

/// What one operator created for a case, or the field it refused the TrainJob at.
#[derive(Default)]
struct Created {
    jobset: Value,
    hostfile: Option<String>,
    secret: Option<Value>,
    /// The PodGroup, for a runtime with a `podGroupPolicy`.
    pod_group: Option<Value>,
    refused_at: Option<String>,
}

impl Created {
    fn refused_at(field: String) -> Self {
        Self {
            refused_at: Some(field),
            ..Self::default()
        }
    }
}

/// What Trainer's TrainJob webhook says when it refuses, before the errors.
const TRAINER_DENIAL: &str =
    "admission webhook \"validator.trainjob.trainer.kubeflow.org\" denied the request: ";
/// What trainset's `InvalidSpec` condition says, before the error.
const TRAINSET_REFUSAL: &str = " has an invalid spec: ";

/// The first field an error list names (`spec.x: Invalid value: ...`, or `[spec.x: ..., ...]`).
fn first_field(errors: &str) -> String {
    let errors = errors.trim_start_matches('[');
    errors.split(':').next().unwrap_or(errors).to_owned()
}

/// Creates the TrainJob; `Ok(Some(field))` when Trainer's webhook refuses it for good. Denials
/// that pass (a webhook whose cache has not seen the runtime yet, Trainer's or Kueue's) are
/// retried up to [`CREATE_LIMIT`].
async fn create_unless_refused(
    client: &Client,
    ns: &str,
    trainjob: &Value,
) -> Result<Option<String>, String> {
    let refusal = |message: &str| {
        message
            .strip_prefix(TRAINER_DENIAL)
            .filter(|_| !message.contains("must be created before the TrainJob is created"))
            .map(first_field)
    };
    match create_when_admitted_unless(client, ns, trainjob, CREATE_LIMIT, |m| refusal(m).is_some())
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if refusal(&status.message).is_some() => {
            Ok(refusal(&status.message))
        }
        Err(error) => Err(format!("creating the TrainJob: {error}")),
    }
}

async fn run_case(
    client: &Client,
    case: &Case,
    who: &str,
) -> (TestNamespace, Result<Created, String>) {
    let ns = TestNamespace::create(client, &format!("tjdiff-{who}")).await;
    for runtime in &case.runtimes {
        if let Err(e) = apply(client, runtime, Some(&ns.name)).await {
            return (ns, Err(format!("applying runtime: {e}")));
        }
    }
    match create_unless_refused(client, &ns.name, &case.trainjob).await {
        Err(e) => return (ns, Err(e)),
        Ok(Some(field)) => {
            return (ns, Ok(Created::refused_at(field)));
        }
        Ok(None) => {}
    }
    let name = case.trainjob["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
    let trainjobs = dynamic_api(client, &case.trainjob, Some(&ns.name));
    let deadline = Instant::now() + CREATE_LIMIT;
    // The JobSet, or the operator's refusal at reconcile time.
    let jobset = loop {
        if let Ok(Some(jobset)) = jobsets.get_opt(&name).await {
            break jobset;
        }
        if let Ok(trainjob) = trainjobs.get(&name).await {
            let failed = condition(&trainjob.data["status"], "Failed");
            if failed["status"] == "True" {
                let message = failed["message"].as_str().unwrap_or_default();
                let field = match message.split_once(TRAINSET_REFUSAL) {
                    Some((_, error)) => first_field(error),
                    None => format!("{}: {message}", failed["reason"]),
                };
                return (ns, Ok(Created::refused_at(field)));
            }
        }
        if Instant::now() >= deadline {
            return (ns, Err(format!("no JobSet {name} after {CREATE_LIMIT:?}")));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let mpi = case.policy == "mpi";
    let hostfile = if mpi {
        let hostfile_name = format!("{name}-mpi-hostfile");
        let found = wait_for(CREATE_LIMIT, &hostfile_name, || async {
            config_maps.get_opt(&hostfile_name).await.ok().flatten()
        })
        .await;
        found.data.and_then(|mut d| d.remove("hostfile"))
    } else {
        None
    };
    let secret = if mpi {
        let secret_name = format!("{name}-mpi-ssh-auth");
        let found = wait_for(CREATE_LIMIT, &secret_name, || async {
            secrets.get_opt(&secret_name).await.ok().flatten()
        })
        .await;
        let keys: Vec<String> = found.data.unwrap_or_default().into_keys().collect();
        Some(json!({"type": found.type_, "immutable": found.immutable, "keys": keys}))
    } else {
        None
    };
    let pod_group = if let Some(route) = gang_route(case) {
        let pod_groups = route.pod_groups(client, &ns.name);
        let found = wait_for(CREATE_LIMIT, &format!("PodGroup {name}"), || async {
            pod_groups.get_opt(&name).await.ok().flatten()
        })
        .await;
        Some(serde_json::to_value(found).unwrap_or_default())
    } else {
        None
    };
    let jobset = serde_json::to_value(&jobset).unwrap_or_default();
    (
        ns,
        Ok(Created {
            jobset,
            hostfile,
            secret,
            pod_group,
            refused_at: None,
        }),
    )
}

async fn run_all(client: &Client, cases: &[Case], who: &str) -> Vec<Result<Created, String>> {
    let mut runs = Vec::new();
    for case in cases {
        let (ns, created) = run_case(client, case, who).await;
        ns.delete().await;
        runs.push(created);
    }
    runs
}

/// The gang the case's runtime asks for: scheduler-plugins' coscheduling (its CRD: `e2e/cluster
/// gang scheduler-plugins start`) or Volcano (`e2e/cluster gang volcano crds`).
fn gang_route(case: &Case) -> Option<Route> {
    case.runtimes.iter().find_map(|runtime| {
        let policy = &runtime["spec"]["podGroupPolicy"];
        if !policy["coscheduling"].is_null() {
            Some(Route::SchedulerPlugins)
        } else if !policy["volcano"].is_null() {
            Some(Route::Volcano)
        } else {
            None
        }
    })
}

fn facts(created: &Created) -> Facts {
    if let Some(field) = &created.refused_at {
        let fact = Fact {
            location: String::new(),
            aspect: "refused at".to_owned(),
        };
        return Facts::from([(fact, field.clone())]);
    }
    let mut leaves = BTreeMap::new();
    flatten("jobset", &compared(&created.jobset), &mut leaves);
    if let Some(pod_group) = &created.pod_group {
        flatten("podgroup", &compared(pod_group), &mut leaves);
    }
    if let Some(hostfile) = &created.hostfile {
        leaves.insert("hostfile".to_owned(), hostfile.clone());
    }
    if let Some(secret) = &created.secret {
        flatten("secret", secret, &mut leaves);
    }
    leaves
        .into_iter()
        .filter(|(_, value)| value != "null")
        .map(|(aspect, value)| {
            let fact = Fact {
                location: String::new(),
                aspect,
            };
            (fact, value)
        })
        .collect()
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!(
            "usage: e2e/differential-trainjob [FILE...]   (default: the shipped runtimes and e2e/testdata/trainjob-differential/*.yaml)"
        );
        return ExitCode::SUCCESS;
    }
    let cases = match corpus(&args) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("differential-trainjob: no cases");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("differential-trainjob: {e}");
            return ExitCode::FAILURE;
        }
    };
    let known = match differential::documented_deviations(differential::TRAINER_DEVIATIONS_HEADING)
    {
        Ok(k) => k,
        Err(e) => {
            eprintln!("differential-trainjob: {e}");
            return ExitCode::FAILURE;
        }
    };
    let client = client().await;
    let started = Instant::now();
    let upstream = {
        let _trainer = Peer::start("trainer");
        run_all(&client, &cases, "upstream").await
    };
    let upstream_time = started.elapsed();
    let started = Instant::now();
    operator::ensure(&client).await;
    let ours = run_all(&client, &cases, "trainset").await;
    let trainset_time = started.elapsed();

    let outcomes = cases
        .iter()
        .zip(upstream)
        .zip(ours)
        .map(|((case, upstream), trainset)| differential::Outcome {
            name: case.name.clone(),
            kind: case.policy.clone(),
            upstream,
            trainset,
        })
        .collect();
    let times = (upstream_time, trainset_time);
    if differential::conclude("differential-trainjob", outcomes, facts, &known, times) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
