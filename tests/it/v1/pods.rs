//! Simulates every pod of each compiled JobSet — the labels and annotations the JobSet and Job
//! controllers add, the JOB_COMPLETION_INDEX variable the Job controller appends, the downward
//! API and the kubelet's `$(VAR)` expansion — and checks each container's environment against
//! v1's values with JobSet addresses, computed here independently of the compiler.

use std::collections::{BTreeMap, BTreeSet};

use crate::support as common;
use jobset_types::JobSet;
use k8s_openapi::api::core::v1::{Container, EnvVar};
use serde_json::{Value, json};

use common::compile_with_test_key;
use trainset::compile::Options;
use trainset::kinds::compile_manifest;

/// One simulated pod.
struct Pod {
    replicated_job: String,
    /// Index of the pod within its replica type, as v1 numbered replicas.
    replica_index: i64,
    hostname: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    containers: Vec<Container>,
}

/// Every pod the JobSet and Job controllers would create, with their metadata.
fn pods(jobset: &JobSet) -> Vec<Pod> {
    let name = jobset.metadata.name.clone().unwrap_or_default();
    let global_replicas: i32 = jobset
        .spec
        .replicated_jobs
        .iter()
        .map(|r| r.replicas.unwrap_or(1))
        .sum();
    let mut global_index = 0;
    let mut pods = Vec::new();
    for rjob in &jobset.spec.replicated_jobs {
        let job_spec = rjob.template.spec.as_ref().expect("job spec");
        let completions = job_spec.completions.expect("completions");
        assert_eq!(
            job_spec.completion_mode.as_deref(),
            Some("Indexed"),
            "{}",
            rjob.name
        );
        assert_eq!(job_spec.parallelism, Some(completions), "{}", rjob.name);
        let replicas = rjob.replicas.unwrap_or(1);
        for job_index in 0..replicas {
            for completion in 0..completions {
                let template = job_spec.template.clone();
                let mut labels = template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default();
                let mut annotations = template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.annotations.clone())
                    .unwrap_or_default();
                let jobset_keys = [
                    ("jobset.sigs.k8s.io/jobset-name", name.clone()),
                    ("jobset.sigs.k8s.io/replicatedjob-name", rjob.name.clone()),
                    ("jobset.sigs.k8s.io/restart-attempt", "0".to_owned()),
                    (
                        "jobset.sigs.k8s.io/replicatedjob-replicas",
                        replicas.to_string(),
                    ),
                    (
                        "jobset.sigs.k8s.io/global-replicas",
                        global_replicas.to_string(),
                    ),
                    ("jobset.sigs.k8s.io/job-index", job_index.to_string()),
                    (
                        "jobset.sigs.k8s.io/job-global-index",
                        (global_index + job_index).to_string(),
                    ),
                    (
                        "batch.kubernetes.io/job-completion-index",
                        completion.to_string(),
                    ),
                ];
                for (key, value) in jobset_keys {
                    labels.insert(key.to_owned(), value.clone());
                    annotations.insert(key.to_owned(), value);
                }
                let mut containers = template.spec.expect("pod spec").containers;
                // The Job controller appends the completion index to every container.
                for container in &mut containers {
                    container.env.get_or_insert_with(Vec::new).push(EnvVar {
                        name: "JOB_COMPLETION_INDEX".into(),
                        value: None,
                        value_from: Some(serde_json::from_value(json!({"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}})).expect("source")),
                    });
                }
                let replica_index = if completions == 1 && replicas > 1 {
                    job_index
                } else {
                    completion
                };
                pods.push(Pod {
                    replicated_job: rjob.name.clone(),
                    replica_index: i64::from(replica_index),
                    hostname: format!("{name}-{}-{job_index}-{completion}", rjob.name),
                    labels,
                    annotations,
                    containers,
                });
            }
        }
        global_index += replicas;
    }
    pods
}

/// The kubelet's expansion: `$(VAR)` of a variable defined earlier, `$$` for `$`, anything else
/// (undefined references included) left as written.
fn expand(input: &str, defined: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(close) = inner.find(')')
        {
            let name = &inner[..close];
            match defined.get(name) {
                Some(value) => out.push_str(value),
                None => out.push_str(&format!("$({name})")),
            }
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A container's environment as the process sees it.
fn resolve(pod: &Pod, container: &Container) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) => expand(value, &env),
            (None, Some(source)) => {
                let path = &source
                    .field_ref
                    .as_ref()
                    .expect("only fieldRef is used")
                    .field_path;
                field(pod, path)
            }
            (None, None) => String::new(),
        };
        env.insert(var.name.clone(), value);
    }
    env
}

fn field(pod: &Pod, path: &str) -> String {
    let key = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|k| k.strip_suffix("']"))
            .map(str::to_owned)
    };
    if let Some(k) = key("metadata.labels['") {
        return pod
            .labels
            .get(&k)
            .cloned()
            .unwrap_or_else(|| panic!("pod has no label {k}"));
    }
    if let Some(k) = key("metadata.annotations['") {
        return pod
            .annotations
            .get(&k)
            .cloned()
            .unwrap_or_else(|| panic!("pod has no annotation {k}"));
    }
    match path {
        "status.podIP" => "10.0.1.7".to_owned(),
        other => panic!("unexpected downward-API path {other}"),
    }
}

// ---- v1's values, with JobSet addresses ------------------------------------------------------

/// The kind's facts the oracle needs; written from the v1 reference, not taken from trainset.
struct Job {
    name: String,
    namespace: String,
    spec: Value,
}

impl Job {
    /// The replica spec of `replica_type`, whatever the case of its key (as v1 accepts).
    fn replica(&self, field: &str, replica_type: &str) -> &Value {
        self.spec[field]
            .as_object()
            .and_then(|specs| {
                specs
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(replica_type))
            })
            .map_or(&Value::Null, |(_, spec)| spec)
    }

    fn replicas(&self, field: &str, replica_type: &str, default: i64) -> i64 {
        self.replica(field, replica_type)["replicas"]
            .as_i64()
            .unwrap_or(default)
    }

    fn has(&self, field: &str, replica_type: &str) -> bool {
        !self.replica(field, replica_type).is_null()
    }

    fn port(
        &self,
        field: &str,
        replica_type: &str,
        container: &str,
        port_name: &str,
        default: i64,
    ) -> i64 {
        self.replica(field, replica_type)["template"]["spec"]["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == container))
            .and_then(|c| c["ports"].as_array())
            .and_then(|ps| ps.iter().find(|p| p["name"] == port_name))
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or(default)
    }

    /// v1's per-replica Service `<job>-<type>-<index>`, as the JobSet pod address: one Job per
    /// pod where v1's rank is an offset plus the index, else one Indexed Job.
    fn address(&self, replica_type: &str, index: i64, one_job_per_pod: bool) -> String {
        let t = replica_type.to_ascii_lowercase();
        let host = if one_job_per_pod {
            format!("{}-{t}-{index}-0", self.name)
        } else {
            format!("{}-{t}-0-{index}", self.name)
        };
        format!("{host}.{}", self.name)
    }
}

fn vars(pairs: &[(&str, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// v1's environment of container `container` in pod `index` of type `replica_type`; `None` means
/// the container gets nothing.
fn expected(
    kind: &str,
    job: &Job,
    replica_type: &str,
    index: i64,
    container: &str,
) -> BTreeMap<String, String> {
    match kind {
        "TFJob" => tf(job, replica_type, index, container),
        "PyTorchJob" => pytorch(job, replica_type, index),
        "XGBoostJob" => xgboost(job, replica_type, index),
        "PaddleJob" => paddle(job, replica_type),
        "JAXJob" => jax(job, index),
        "MPIJob" => mpi(job, replica_type),
        "MPIJob v1" => mpi_kubectl_exec(job, replica_type, container),
        other => panic!("no oracle for {other}"),
    }
}

fn tf(job: &Job, replica_type: &str, index: i64, container: &str) -> BTreeMap<String, String> {
    let f = "tfReplicaSpecs";
    let types = ["Chief", "Master", "PS", "Worker", "Evaluator"];
    let total: i64 = types
        .iter()
        .filter(|t| job.has(f, t))
        .map(|t| job.replicas(f, t, 1))
        .sum();
    if container != "tensorflow" || total == 1 {
        return BTreeMap::new();
    }
    let endpoint = |t: &str, i: i64| {
        format!(
            "{}.{}.svc:{}",
            job.address(t, i, false),
            job.namespace,
            job.port(f, t, "tensorflow", "tfjob-port", 2222)
        )
    };
    let task = json!({"type": replica_type.to_ascii_lowercase(), "index": index});
    let config = if job.spec["enableDynamicWorker"] == true {
        let ps: Vec<String> = (0..job.replicas(f, "PS", 1))
            .filter(|_| job.has(f, "PS"))
            .map(|i| endpoint("PS", i))
            .collect();
        let cluster = match replica_type {
            "Worker" => json!({"worker": {index.to_string(): endpoint("Worker", index)}, "ps": ps}),
            "PS" => json!({"worker": {}, "ps": [endpoint("PS", index)]}),
            _ => json!({"worker": {}, "ps": []}),
        };
        json!({"cluster": cluster, "task": task})
    } else {
        let mut cluster = serde_json::Map::new();
        for t in types.iter().filter(|t| job.has(f, t)) {
            let list: Vec<String> = (0..job.replicas(f, t, 1)).map(|i| endpoint(t, i)).collect();
            cluster.insert(t.to_ascii_lowercase(), json!(list));
        }
        json!({"cluster": cluster, "task": task, "environment": "cloud"})
    };
    vars(&[("TF_CONFIG", config.to_string())])
}

fn pytorch(job: &Job, replica_type: &str, index: i64) -> BTreeMap<String, String> {
    let f = "pytorchReplicaSpecs";
    let has_master = job.has(f, "Master");
    let total: i64 = ["Master", "Worker"]
        .iter()
        .filter(|t| job.has(f, t))
        .map(|t| job.replicas(f, t, 1))
        .sum();
    let nproc = job.spec["nprocPerNode"].as_str().map(str::to_owned);
    let elastic = &job.spec["elasticPolicy"];
    let mut env = vars(&[("PYTHONUNBUFFERED", "1".into())]);
    if has_master {
        let port = job
            .port(f, "Master", "pytorch", "pytorchjob-port", 23456)
            .to_string();
        let addr = job.address("Master", 0, false);
        let n = nproc
            .as_deref()
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(1);
        let rank = if replica_type == "Master" {
            index
        } else {
            index + 1
        };
        env.extend(vars(&[
            ("MASTER_PORT", port.clone()),
            ("PET_MASTER_PORT", port),
            ("MASTER_ADDR", addr.clone()),
            ("PET_MASTER_ADDR", addr),
            ("WORLD_SIZE", (total * n).to_string()),
            ("RANK", rank.to_string()),
            ("PET_NODE_RANK", rank.to_string()),
        ]));
    }
    let nproc = elastic["nProcPerNode"]
        .as_i64()
        .map(|n| n.to_string())
        .or(nproc)
        .unwrap_or_else(|| "auto".into());
    env.insert("PET_NPROC_PER_NODE".into(), nproc);
    if elastic.is_null() {
        env.insert("PET_NNODES".into(), total.to_string());
        return env;
    }
    let workers = job.replicas(f, "Worker", 1);
    let min = elastic["minReplicas"]
        .as_i64()
        .or(elastic["maxReplicas"].as_i64())
        .unwrap_or(workers);
    let max = elastic["maxReplicas"]
        .as_i64()
        .or(elastic["minReplicas"].as_i64())
        .unwrap_or(workers);
    let host = elastic["rdzvHost"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| job.address("Worker", 0, has_master));
    let port = elastic["rdzvPort"]
        .as_i64()
        .unwrap_or_else(|| job.port(f, "Worker", "pytorch", "pytorchjob-port", 23456));
    env.extend(vars(&[
        ("PET_RDZV_ENDPOINT", format!("{host}:{port}")),
        (
            "PET_RDZV_BACKEND",
            elastic["rdzvBackend"].as_str().unwrap_or("c10d").to_owned(),
        ),
        ("PET_NNODES", format!("{min}:{max}")),
    ]));
    if let Some(restarts) = elastic["maxRestarts"].as_i64() {
        env.insert("PET_MAX_RESTARTS".into(), restarts.to_string());
    }
    env
}

fn xgboost(job: &Job, replica_type: &str, index: i64) -> BTreeMap<String, String> {
    let f = "xgbReplicaSpecs";
    let masters = job.replicas(f, "Master", 1);
    let total = masters
        + if job.has(f, "Worker") {
            job.replicas(f, "Worker", 1)
        } else {
            0
        };
    let rank = if replica_type == "Master" {
        index
    } else {
        index + masters
    };
    let mut env = vars(&[
        (
            "MASTER_PORT",
            job.port(f, "Master", "xgboost", "xgboostjob-port", 9999)
                .to_string(),
        ),
        ("MASTER_ADDR", job.address("Master", 0, false)),
        ("WORLD_SIZE", total.to_string()),
        ("RANK", rank.to_string()),
        ("PYTHONUNBUFFERED", "1".into()),
    ]);
    if total > 1 {
        let addrs: Vec<String> = (0..total - 1)
            .map(|i| job.address("Worker", i, true))
            .collect();
        env.insert(
            "WORKER_PORT".into(),
            job.port(f, "Worker", "xgboost", "xgboostjob-port", 9999)
                .to_string(),
        );
        env.insert("WORKER_ADDRS".into(), addrs.join(","));
    }
    env
}

fn paddle(job: &Job, replica_type: &str) -> BTreeMap<String, String> {
    let f = "paddleReplicaSpecs";
    let ps_mode = job.has(f, "Master");
    let total: i64 = ["Master", "Worker"]
        .iter()
        .filter(|t| job.has(f, t))
        .map(|t| job.replicas(f, t, 1))
        .sum();
    let rank0 = if ps_mode { "Master" } else { "Worker" };
    let mut env = vars(&[
        ("PYTHONUNBUFFERED", "1".into()),
        ("PADDLE_JOB_ID", job.name.clone()),
        ("PADDLE_NNODES", total.to_string()),
        (
            "PADDLE_MASTER",
            format!(
                "{}:{}",
                job.address(rank0, 0, false),
                job.port(f, rank0, "paddle", "master", 36543)
            ),
        ),
    ]);
    if ps_mode {
        let key = if replica_type == "Master" {
            "PADDLE_SERVER_NUM"
        } else {
            "PADDLE_TRAINER_NUM"
        };
        env.insert(key.into(), "1".into());
    }
    env
}

fn jax(job: &Job, index: i64) -> BTreeMap<String, String> {
    let f = "jaxReplicaSpecs";
    vars(&[
        ("PYTHONUNBUFFERED", "1".into()),
        (
            "COORDINATOR_PORT",
            job.port(f, "Worker", "jax", "jaxjob-port", 6666)
                .to_string(),
        ),
        ("COORDINATOR_ADDRESS", job.address("Worker", 0, false)),
        ("NUM_PROCESSES", job.replicas(f, "Worker", 1).to_string()),
        ("PROCESS_ID", index.to_string()),
    ])
}

fn mpi(job: &Job, replica_type: &str) -> BTreeMap<String, String> {
    if replica_type != "Launcher" {
        return vars(&[("K_MPI_JOB_ROLE", "worker".into())]);
    }
    let slots = job.spec["slotsPerWorker"].as_i64().unwrap_or(1).to_string();
    let mut env = vars(&[("K_MPI_JOB_ROLE", "launcher".into())]);
    match job.spec["mpiImplementation"].as_str().unwrap_or("OpenMPI") {
        "Intel" => env.extend(vars(&[
            ("I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile".into()),
            (
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
                "-o ConnectionAttempts=10".into(),
            ),
            ("I_MPI_PERHOST", slots),
        ])),
        "MPICH" => env.extend(vars(&[
            ("HYDRA_HOST_FILE", "/etc/mpi/hostfile".into()),
            ("HYDRA_LAUNCH_EXTRA_ARGS", "-o ConnectionAttempts=10".into()),
        ])),
        _ => env.extend(vars(&[
            ("OMPI_MCA_orte_keep_fqdn_hostnames", "true".into()),
            ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile".into()),
            ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10".into()),
            ("OMPI_MCA_orte_set_default_slots", slots),
        ])),
    }
    if job.spec["runLauncherAsWorker"] != true {
        env.extend(vars(&[
            ("NVIDIA_VISIBLE_DEVICES", String::new()),
            ("NVIDIA_DRIVER_CAPABILITIES", String::new()),
        ]));
    }
    env
}

/// training-operator v1.9.4's MPIJob: the launcher's first container alone gets variables.
fn mpi_kubectl_exec(job: &Job, replica_type: &str, container: &str) -> BTreeMap<String, String> {
    let first = &job.replica("mpiReplicaSpecs", "Launcher")["template"]["spec"]["containers"][0];
    if replica_type != "Launcher" || first["name"] != container {
        return BTreeMap::new();
    }
    let mut env = vars(&[
        ("OMPI_MCA_plm_rsh_agent", "/etc/mpi/kubexec.sh".into()),
        ("OMPI_MCA_orte_default_hostfile", "/etc/mpi/hostfile".into()),
        ("I_MPI_HYDRA_BOOTSTRAP", "rsh".into()),
        ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/etc/mpi/kubexec.sh".into()),
    ]);
    let gpu = first["resources"]["limits"]
        .as_object()
        .is_some_and(|limits| limits.keys().any(|k| k.contains("gpu")));
    if !gpu {
        env.extend(vars(&[
            ("NVIDIA_VISIBLE_DEVICES", String::new()),
            ("NVIDIA_DRIVER_CAPABILITIES", String::new()),
        ]));
    }
    env
}

// ---- the check -------------------------------------------------------------------------------

/// Variables that are plumbing, not part of v1's interface.
const PLUMBING: &[&str] = &["TRAINSET_REPLICA_INDEX", "JOB_COMPLETION_INDEX"];

fn canonical(key: &str, value: &str) -> Value {
    if key == "TF_CONFIG" {
        serde_json::from_str(value)
            .unwrap_or_else(|e| panic!("TF_CONFIG is not JSON ({e}): {value}"))
    } else {
        Value::String(value.to_owned())
    }
}

/// Compiles `manifest`, simulates every pod and compares each container's env with v1's.
/// `user_env` lists variables the manifest sets itself, with the values they must resolve to.
fn check(manifest: &str, user_env: &[(&str, &str)]) -> usize {
    let value: Value = serde_norway::from_str(manifest).expect("YAML");
    let mut kind = value["kind"].as_str().expect("kind").to_owned();
    if kind == "MPIJob" && value["apiVersion"] == "kubeflow.org/v1" {
        kind.push_str(" v1");
    }
    let job = Job {
        name: value["metadata"]["name"].as_str().expect("name").to_owned(),
        namespace: value["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_owned(),
        spec: value["spec"].clone(),
    };
    let compiled = compile_with_test_key(&value, None).expect("compiles");
    let field = value["spec"]
        .as_object()
        .expect("spec")
        .keys()
        .find(|k| k.ends_with("ReplicaSpecs"))
        .expect("replica specs")
        .clone();
    let replica_types: BTreeMap<String, String> = value["spec"][&field]
        .as_object()
        .expect("map")
        .keys()
        .map(|k| (k.to_ascii_lowercase(), canonical_type(k)))
        .collect();

    let pods = pods(&compiled.jobset);
    let hostnames: BTreeSet<String> = pods.iter().map(|p| p.hostname.clone()).collect();
    for pod in &pods {
        let replica_type = &replica_types[&pod.replicated_job];
        for container in &pod.containers {
            // Server-side apply keys env by name: a repeated name would make the JobSet unappliable.
            let names: Vec<&str> = container
                .env
                .iter()
                .flatten()
                .map(|v| v.name.as_str())
                .collect();
            let unique: BTreeSet<&str> = names.iter().copied().collect();
            assert_eq!(
                names.len(),
                unique.len(),
                "{}: repeated env {names:?}",
                pod.hostname
            );
            let mut actual = resolve(pod, container);
            for name in PLUMBING {
                actual.remove(*name);
            }
            let want = expected(
                &kind,
                &job,
                replica_type,
                pod.replica_index,
                &container.name,
            );
            // v1 appends its variables after the user's and the kubelet takes the last of a
            // name: an injected name keeps the injected value, any other the user's.
            for (name, wanted) in user_env.iter().filter(|(n, _)| !want.contains_key(*n)) {
                assert_eq!(
                    actual.remove(*name).as_deref(),
                    Some(*wanted),
                    "{}: user variable {name}",
                    pod.hostname
                );
            }
            let got: BTreeMap<&String, Value> =
                actual.iter().map(|(k, v)| (k, canonical(k, v))).collect();
            let want_values: BTreeMap<&String, Value> =
                want.iter().map(|(k, v)| (k, canonical(k, v))).collect();
            assert_eq!(
                got, want_values,
                "{} container {}",
                pod.hostname, container.name
            );
            // Every address handed out names a pod that exists.
            for value in actual.values() {
                for host in value
                    .split([',', ':', '"'])
                    .filter_map(|part| part.strip_suffix(&format!(".{}", job.name)))
                {
                    assert!(
                        hostnames.contains(host),
                        "{}: {host} names no pod",
                        pod.hostname
                    );
                }
            }
        }
    }
    pods.len()
}

fn canonical_type(key: &str) -> String {
    ["Chief", "Master", "PS", "Worker", "Evaluator", "Launcher"]
        .iter()
        .find(|t| t.eq_ignore_ascii_case(key))
        .map(|t| (*t).to_owned())
        .unwrap_or_else(|| panic!("unknown replica type {key}"))
}

#[test]
fn every_pod_of_every_example_sees_v1s_environment() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("examples/") {
        let path = entry.expect("entry").path();
        let pods = check(&std::fs::read_to_string(&path).expect("readable"), &[]);
        assert!(pods > 0, "{}", path.display());
        checked += pods;
    }
    assert!(checked >= 25, "simulated {checked} pods");
}

#[test]
fn sparse_tf_config_with_enable_dynamic_worker() {
    check(
        r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: dyn, namespace: research}
spec:
  enableDynamicWorker: true
  tfReplicaSpecs:
    PS: {replicas: 2, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: tensorflow, image: tf, ports: [{name: tfjob-port, containerPort: 3333}]}, {name: sidecar, image: s}]}}}
    Evaluator: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
"#,
        &[],
    );
}

#[test]
fn a_single_pod_tfjob_gets_no_tf_config() {
    assert_eq!(
        check(
            "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: solo}\nspec:\n  tfReplicaSpecs:\n    worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}\n",
            &[]
        ),
        1
    );
}

#[test]
fn injected_variables_win_over_the_users_of_the_same_name() {
    check(
        r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: own}
spec:
  nprocPerNode: "4"
  pytorchReplicaSpecs:
    Master:
      template:
        spec:
          containers:
          - name: pytorch
            image: p
            ports: [{name: pytorchjob-port, containerPort: 29500}]
            env:
            - {name: PYTHONUNBUFFERED, value: "0"}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: p
            env:
            - {name: PYTHONUNBUFFERED, value: "0"}
          - name: sidecar
            image: s
            env:
            - {name: PYTHONUNBUFFERED, value: "0"}
"#,
        &[("PYTHONUNBUFFERED", "0")],
    );
}

#[test]
fn user_variables_cannot_refer_to_injected_ones() {
    let manifest = r#"
apiVersion: kubeflow.org/v1
kind: XGBoostJob
metadata: {name: refs}
spec:
  xgbReplicaSpecs:
    Master: {template: {spec: {containers: [{name: xgboost, image: x, env: [{name: WHO, value: "$(RANK)@$(MASTER_ADDR) $$ $(NOPE)"}]}]}}}
    Worker: {replicas: 2, template: {spec: {containers: [{name: xgboost, image: x, env: [{name: WHO, value: "$(RANK)@$(MASTER_ADDR) $$ $(NOPE)"}]}]}}}
"#;
    let value: Value = serde_norway::from_str(manifest).expect("YAML");
    let compiled = compile_manifest(value, &Options::default()).expect("compiles");
    let seen: BTreeSet<String> = pods(&compiled.jobset)
        .iter()
        .map(|pod| resolve(pod, &pod.containers[0])["WHO"].clone())
        .collect();
    // The user's variables come first, so the kubelet has not defined the injected ones yet.
    let want: BTreeSet<String> = ["$(RANK)@$(MASTER_ADDR) $ $(NOPE)".to_owned()].into();
    assert_eq!(seen, want);
}

#[test]
fn mpi_intel_with_the_launcher_as_worker() {
    check(
        r#"
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: intel}
spec:
  slotsPerWorker: 8
  runLauncherAsWorker: true
  mpiImplementation: Intel
  launcherCreationPolicy: WaitForWorkersReady
  mpiReplicaSpecs:
    Launcher: {template: {spec: {containers: [{name: l, image: i}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: w, image: i}]}}}
"#,
        &[],
    );
}

#[test]
fn elastic_pytorch_with_explicit_rendezvous() {
    check(
        r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: rdzv}
spec:
  elasticPolicy: {rdzvBackend: etcd-v2, rdzvHost: etcd.infra, rdzvPort: 2379, maxReplicas: 5}
  pytorchReplicaSpecs:
    Worker: {replicas: 4, template: {spec: {containers: [{name: pytorch, image: p}]}}}
"#,
        &[],
    );
}
