use trainset::render::{Format, Operator, render};

const RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed, labels: {trainer.kubeflow.org/framework: torch}}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: pytorch/pytorch}]}}}
"#;

const TRAINJOB: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: mnist}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2}
"#;

#[test]
fn a_trainjob_renders_against_a_runtime_given_beside_it_or_in_its_input() {
    let beside = render(
        TRAINJOB,
        RUNTIME,
        "team",
        &Operator::default(),
        Format::Yaml,
    )
    .expect("renders");
    let within = render(
        &format!("{RUNTIME}\n---\n{TRAINJOB}"),
        "",
        "team",
        &Operator::default(),
        Format::Yaml,
    )
    .expect("renders");
    assert_eq!(beside, within);
    assert!(beside.contains("kind: JobSet"), "{beside}");
    assert!(beside.contains("namespace: team"), "{beside}");
    assert!(beside.contains("value: mnist-node-0-0.mnist"), "{beside}");
    assert!(
        !beside.contains("ClusterTrainingRuntime"),
        "runtimes are inputs: {beside}"
    );
}

#[test]
fn a_trainjob_the_apiserver_would_refuse_is_refused_with_every_field_named() {
    let job = TRAINJOB
        .replace("name: mnist", "name: MNIST_v2")
        .replace("trainer: {numNodes: 2}", "trainer: {numNodes: 2, gpus: 8}");
    let errors =
        render(&job, RUNTIME, "team", &Operator::default(), Format::Yaml).expect_err("refused");
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "document 1 (TrainJob MNIST_v2): unknown field \"spec.trainer.gpus\"; \
             metadata.name must match RFC 1035 DNS label format"
        ]
    );
}

#[test]
fn a_missing_or_foreign_runtime_is_an_error_naming_the_field() {
    let errors =
        render(TRAINJOB, "", "team", &Operator::default(), Format::Yaml).expect_err("no runtime");
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "document 1 (TrainJob mnist): spec.runtimeRef.name: no ClusterTrainingRuntime \"torch-distributed\" among the runtimes given (--runtime FILE)"
        ]
    );
    // A TrainingRuntime serves TrainJobs of its own namespace only.
    let namespaced = RUNTIME
        .replace("kind: ClusterTrainingRuntime", "kind: TrainingRuntime")
        .replace(
            "metadata: {name: torch-distributed,",
            "metadata: {name: torch-distributed, namespace: other,",
        );
    let job = TRAINJOB.replace(
        "runtimeRef: {name: torch-distributed}",
        "runtimeRef: {name: torch-distributed, kind: TrainingRuntime}",
    );
    assert!(
        render(
            &job,
            &namespaced,
            "team",
            &Operator::default(),
            Format::Yaml
        )
        .is_err()
    );
    assert!(
        render(
            &job,
            &namespaced,
            "other",
            &Operator::default(),
            Format::Yaml
        )
        .is_ok()
    );
    // Only runtimes belong beside the input.
    let errors = render(
        TRAINJOB,
        TRAINJOB,
        "team",
        &Operator::default(),
        Format::Yaml,
    )
    .expect_err("not a runtime");
    assert_eq!(
        errors[0].to_string(),
        "runtimes, document 1: not a TrainingRuntime or ClusterTrainingRuntime"
    );
}
