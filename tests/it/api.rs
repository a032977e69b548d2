//! Training job manifests deserialize into the API types and serialize back unchanged.

use pretty_assertions::assert_eq;
use serde_json::Value;
use trainset::api::{
    CleanPodPolicy, JAXJob, MPIJob, PaddleJob, PyTorchJob, RestartPolicy, TFJob, TrainingJob,
    XGBoostJob,
};

fn yaml_value(text: &str) -> Value {
    serde_norway::from_str(text).expect("valid YAML")
}

/// Parses `text` as `K`, serializes it again and compares the two as JSON values. A kind served
/// at more than one version writes its own: the apiserver gives the version asked for.
fn round_trip<K: TrainingJob + std::fmt::Debug>(text: &str) -> K {
    let mut input = yaml_value(text);
    let job: K = serde_json::from_value(input.clone()).expect("deserializes into the API type");
    if K::ALSO_SERVED_AT
        .iter()
        .any(|version| input["apiVersion"] == format!("{}/{version}", K::group(&())))
    {
        input["apiVersion"] = K::api_version(&()).into();
    }
    assert_eq!(serde_json::to_value(&job).expect("serializes"), input);
    job
}

#[test]
fn every_example_round_trips_unchanged() {
    let examples =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples")).expect("examples/");
    let mut seen = 0;
    for entry in examples {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("readable");
        let kind = yaml_value(&text)["kind"].as_str().expect("kind").to_owned();
        match kind.as_str() {
            "TFJob" => drop(round_trip::<TFJob>(&text)),
            "PyTorchJob" => drop(round_trip::<PyTorchJob>(&text)),
            "XGBoostJob" => drop(round_trip::<XGBoostJob>(&text)),
            "PaddleJob" => drop(round_trip::<PaddleJob>(&text)),
            "JAXJob" => drop(round_trip::<JAXJob>(&text)),
            "MPIJob" => drop(round_trip::<MPIJob>(&text)),
            other => panic!("{}: unexpected kind {other}", path.display()),
        }
        seen += 1;
    }
    assert!(seen >= 10, "expected at least 10 examples, found {seen}");
}

/// The TFJob shape of the training operator's documentation: PS and Worker, lower-case keys
/// allowed, every run policy field.
#[test]
fn tfjob_from_the_docs_keeps_every_field() {
    let job: TFJob = round_trip(
        r#"
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: dist-mnist
  namespace: kubeflow
spec:
  enableDynamicWorker: true
  successPolicy: AllWorkers
  runPolicy:
    cleanPodPolicy: Running
    ttlSecondsAfterFinished: 60
    activeDeadlineSeconds: 3600
    backoffLimit: 3
    suspend: false
    managedBy: kubeflow.org/training-operator
    schedulingPolicy:
      minAvailable: 3
      queue: research
      minResources: {cpu: "4", memory: 8Gi}
      priorityClass: high
      scheduleTimeoutSeconds: 120
  tfReplicaSpecs:
    ps:
      replicas: 1
      restartPolicy: Never
      template:
        metadata:
          annotations: {sidecar.istio.io/inject: "false"}
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:latest
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-dist-mnist-test:latest
            ports:
            - {name: tfjob-port, containerPort: 2222}
status:
  conditions:
  - type: Created
    status: "True"
    reason: TFJobCreated
    message: TFJob dist-mnist is created.
    lastUpdateTime: "2026-11-30T10:00:00Z"
    lastTransitionTime: "2026-11-30T10:00:00Z"
  replicaStatuses:
    PS: {active: 1}
    Worker: {active: 1, succeeded: 1, failed: 1}
  startTime: "2026-11-30T10:00:01Z"
"#,
    );
    let ps = job
        .replica_specs()
        .get("PS")
        .expect("ps found case-insensitively");
    assert_eq!(ps.restart_policy, Some(RestartPolicy::Never));
    assert_eq!(
        job.replica_specs().get("worker").and_then(|w| w.replicas),
        Some(2)
    );
    let policy = job.run_policy().expect("runPolicy");
    assert_eq!(policy.clean_pod_policy, Some(CleanPodPolicy::Running));
    assert_eq!(policy.backoff_limit, Some(3));
    assert_eq!(
        policy
            .scheduling_policy
            .as_ref()
            .and_then(|s| s.priority_class.as_deref()),
        Some("high")
    );
    assert_eq!(
        job.job_status()
            .map(|s| s.replica_statuses["Worker"].failed),
        Some(1)
    );
}

/// PyTorchJob with Master and Worker, elastic policy and nprocPerNode.
#[test]
fn pytorchjob_master_worker_and_elastic_fields_round_trip() {
    let job: PyTorchJob = round_trip(
        r#"
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: elastic}
spec:
  nprocPerNode: auto
  elasticPolicy:
    minReplicas: 1
    maxReplicas: 4
    rdzvBackend: etcd-v2
    rdzvHost: etcd.default
    rdzvPort: 2379
    rdzvId: run-1
    rdzvConf: [{key: timeout, value: "900"}]
    standalone: false
    maxRestarts: 3
    metrics:
    - type: Resource
      resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: pytorch, image: "pytorch:2"}]
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: pytorch, image: "pytorch:2"}]
"#,
    );
    let elastic = job.spec.elastic_policy.as_ref().expect("elasticPolicy");
    assert_eq!(elastic.rdzv_backend.map(|b| b.as_str()), Some("etcd-v2"));
    assert_eq!(elastic.metrics.len(), 1);
}

/// Fields of the newest pod template (Kubernetes 1.34-1.37) reach the API types unchanged.
#[test]
fn newest_pod_template_fields_survive() {
    let job: JAXJob = round_trip(
        r#"
apiVersion: kubeflow.org/v1
kind: JAXJob
metadata: {name: newest}
spec:
  jaxReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          hostnameOverride: custom-host
          schedulingGroup: {podGroupName: gang-a}
          evictionResponders: [{name: checkpointer, priority: 10}]
          resources:
            limits: {cpu: "2"}
          containers:
          - name: jax
            image: jax:latest
            restartPolicy: Never
            restartPolicyRules:
            - action: Restart
              exitCodes: {operator: In, values: [42]}
            env:
            - name: FROM_FILE
              valueFrom:
                fileKeyRef: {volumeName: config, path: env, key: MODE}
"#,
    );
    let template = job
        .spec
        .jax_replica_specs
        .get("Worker")
        .and_then(|w| w.template.as_ref());
    let pod = template.and_then(|t| t.spec.as_ref()).expect("pod spec");
    assert_eq!(
        pod.scheduling_group
            .as_ref()
            .and_then(|g| g.pod_group_name.as_deref()),
        Some("gang-a")
    );
    assert_eq!(pod.hostname_override.as_deref(), Some("custom-host"));
}

#[test]
fn mpijob_v2beta1_fields_round_trip() {
    let job: MPIJob = round_trip(
        r#"
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: intel}
spec:
  slotsPerWorker: 4
  runLauncherAsWorker: true
  sshAuthMountPath: /home/mpiuser/.ssh
  launcherCreationPolicy: WaitForWorkersReady
  mpiImplementation: Intel
  runPolicy: {cleanPodPolicy: All, managedBy: kubeflow.org/mpi-operator}
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers: [{name: launcher, image: "intel-mpi:1"}]
    Worker:
      replicas: 2
      template:
        spec:
          containers: [{name: worker, image: "intel-mpi:1"}]
"#,
    );
    assert_eq!(job.spec.slots_per_worker, Some(4));
    assert_eq!(
        serde_json::to_value(job.spec.mpi_implementation).expect("serializes"),
        serde_json::json!("Intel")
    );
}

#[test]
fn a_misspelt_enum_value_is_an_error_that_names_the_field() {
    let text = r#"
apiVersion: kubeflow.org/v1
kind: XGBoostJob
metadata: {name: bad}
spec:
  xgbReplicaSpecs:
    Master:
      restartPolicy: OnFailur
"#;
    let value = yaml_value(text);
    let error = serde_path_to_error::deserialize::<_, XGBoostJob>(value).expect_err("rejected");
    assert_eq!(
        error.path().to_string(),
        "spec.xgbReplicaSpecs.Master.restartPolicy"
    );
}

/// A TrainJob as the Kubeflow SDK writes it (`kubeflow` 0.5.0: runtime reference, trainer with
/// resources per node, initializers, a runtime patch, a deadline), and as Kueue's webhook leaves
/// it (its own empty patch), reads and writes back unchanged.
#[test]
fn a_trainjob_as_the_sdk_and_kueue_write_it_round_trips() {
    use trainset::api::trainer::TrainJob;
    let input = yaml_value(
        r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: a1b2c3d4e5f6, labels: {team: ml}}
spec:
  runtimeRef: {name: torch-distributed, kind: ClusterTrainingRuntime}
  trainer:
    numNodes: 2
    resourcesPerNode:
      requests: {cpu: "4", nvidia.com/gpu: "1"}
      limits: {cpu: "4", nvidia.com/gpu: "1"}
    command: [bash, -c, "torchrun train.py"]
    env: [{name: EPOCHS, value: "3"}]
  initializer:
    dataset: {storageUri: "hf://tatsu-lab/alpaca", env: [{name: ACCESS_TOKEN, value: t}]}
    model: {storageUri: "hf://Qwen/Qwen2.5-1.5B-Instruct"}
  runtimePatches:
  - manager: trainer.kubeflow.org/kubeflow-sdk
    trainingRuntimeSpec:
      template:
        metadata: {labels: {tier: gold}}
        spec:
          replicatedJobs:
          - name: node
            template:
              spec:
                template:
                  spec:
                    nodeSelector: {pool: a100}
                    containers: [{name: node, env: [{name: NCCL_DEBUG, value: INFO}]}]
  - manager: kueue.x-k8s.io/manager
    trainingRuntimeSpec: {template: {spec: {}}}
  activeDeadlineSeconds: 3600
  suspend: true
status:
  conditions:
  - {type: Suspended, status: "True", reason: Suspended, message: TrainJob is suspended, lastTransitionTime: "2026-12-03T12:00:00Z"}
  jobsStatus:
  - {name: node, ready: 0, succeeded: 0, failed: 0, active: 0, suspended: 1}
"#,
    );
    let job: TrainJob = serde_json::from_value(input.clone()).expect("a TrainJob");
    assert_eq!(serde_json::to_value(&job).expect("serializes"), input);
    assert_eq!(job.spec.runtime_patches.len(), 2);
}
