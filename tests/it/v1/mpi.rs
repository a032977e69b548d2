//! MPIJob at both of its versions: the version a job was created as decides how it runs, and a
//! field of the other version is refused naming it.

use std::path::Path;

use serde_json::{Value, json};
use trainset::api::{API_VERSION_ANNOTATION, MPIJob};
use trainset::compile::Options;
use trainset::compile::v1::Compile;

use crate::support::compile_with_test_key;

#[test]
fn committed_api_version_policy_matches_the_code() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/api-version.yaml"
    ));
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("deploy/api-version.yaml: {e}; run `cargo run -- api-version`"));
    assert_eq!(
        committed,
        trainset::api_version::to_yaml().expect("YAML"),
        "deploy/api-version.yaml drifted; run `cargo run -q -- api-version > deploy/api-version.yaml`"
    );
}

fn mpijob(version: &str, spec_extra: Value, launcher_resources: Value) -> Value {
    let container =
        |name: &str| json!({"name": name, "image": "mpi:1", "resources": launcher_resources});
    let mut spec = json!({
        "mpiReplicaSpecs": {
            "Launcher": {"template": {"spec": {"containers": [container("mpi")]}}},
            "Worker": {"replicas": 3, "template": {"spec": {"containers": [{"name": "mpi", "image": "mpi:1"}]}}},
        }
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), spec_extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({
        "apiVersion": format!("kubeflow.org/{version}"),
        "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "team"},
        "spec": spec,
    })
}

fn compile(manifest: &Value) -> trainset::compile::Compiled {
    compile_with_test_key(manifest, None).unwrap_or_else(|e| panic!("compiles: {e}"))
}

fn config(compiled: &trainset::compile::Compiled, key: &str) -> String {
    compiled
        .config_map
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(key))
        .cloned()
        .unwrap_or_else(|| panic!("ConfigMap key {key}"))
}

/// The launcher's pod spec in the compiled JobSet.
fn launcher_pod(compiled: &trainset::compile::Compiled) -> &k8s_openapi::api::core::v1::PodSpec {
    compiled
        .jobset
        .spec
        .replicated_jobs
        .iter()
        .find(|rj| rj.name == "launcher")
        .and_then(|rj| rj.template.spec.as_ref())
        .and_then(|s| s.template.spec.as_ref())
        .expect("the launcher's pod")
}

#[test]
fn the_manifest_version_decides_the_semantics() {
    let v1 = compile(&mpijob("v1", json!({}), json!({})));
    assert!(v1.secret.is_none(), "v1 uses no SSH key");
    let access = v1
        .launcher_access
        .as_ref()
        .expect("v1 makes the launcher's access");
    assert_eq!(access.role.metadata.name.as_deref(), Some("pi-launcher"));
    let network = v1.jobset.spec.network.as_ref().expect("network");
    assert_eq!(
        network.enable_dns_hostnames,
        Some(false),
        "v1 MPIJob has no Service"
    );
    let owner = v1.jobset.metadata.labels.as_ref().expect("labels");
    assert_eq!(
        owner
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("trainset")
    );

    let v2 = compile(&mpijob("v2beta1", json!({}), json!({})));
    assert!(v2.secret.is_some(), "v2beta1 runs over SSH");
    assert!(v2.launcher_access.is_none());
    assert_eq!(
        v2.jobset
            .spec
            .network
            .as_ref()
            .and_then(|n| n.enable_dns_hostnames),
        Some(true)
    );
}

/// What the admission policy records wins over what a manifest claims: `render` records the
/// manifest's own version, as the policy does in a cluster.
#[test]
fn a_recorded_version_in_the_manifest_does_not_change_the_semantics() {
    let mut manifest = mpijob("v2beta1", json!({}), json!({}));
    manifest["metadata"]["annotations"] = json!({API_VERSION_ANNOTATION: "v1"});
    assert!(compile(&manifest).secret.is_some());
}

/// The controller generates a key pair for each compile of a job that needs one: only the API
/// that runs over SSH does, and the other compiles without it.
#[test]
fn only_the_version_over_ssh_needs_a_key() {
    let job = |version: &str| {
        let mut manifest = mpijob(version, json!({}), json!({}));
        manifest["metadata"]["annotations"] = json!({API_VERSION_ANNOTATION: version});
        trainset::compile::parse::<MPIJob>(manifest).unwrap_or_else(|e| panic!("{e}"))
    };
    assert!(job("v2beta1").needs_ssh_key());
    let v1 = job("v1");
    assert!(!v1.needs_ssh_key());
    let compiled = v1
        .compile(&Options::default())
        .unwrap_or_else(|e| panic!("compiles without a key: {e}"));
    assert!(compiled.secret.is_none());
}

#[test]
fn a_field_of_the_other_version_is_refused_by_name() {
    let cases = [
        (
            "v1",
            json!({"mpiImplementation": "Intel"}),
            "spec.mpiImplementation",
        ),
        (
            "v1",
            json!({"sshAuthMountPath": "/home/u/.ssh"}),
            "spec.sshAuthMountPath",
        ),
        (
            "v2beta1",
            json!({"mainContainer": "mpi"}),
            "spec.mainContainer",
        ),
        (
            "v2beta1",
            json!({"cleanPodPolicy": "All"}),
            "spec.cleanPodPolicy",
        ),
    ];
    for (version, extra, field) in cases {
        let error = compile_with_test_key(&mpijob(version, extra, json!({})), None)
            .err()
            .unwrap_or_else(|| panic!("{version} {field} compiled"))
            .to_string();
        assert!(error.starts_with(&format!("{field}: ")), "{error}");
        assert!(
            error.contains(&format!("not of kubeflow.org/{version}")),
            "{error}"
        );
    }
}

#[test]
fn the_hostfile_names_hosts_as_v1_and_a_gpu_launcher_runs_ranks() {
    let plain = compile(&mpijob("v1", json!({"slotsPerWorker": 2}), json!({})));
    assert_eq!(
        config(&plain, "hostfile"),
        "pi-worker-0 slots=2\npi-worker-1 slots=2\npi-worker-2 slots=2\n"
    );
    let gpu = compile(&mpijob(
        "v1",
        json!({}),
        json!({"limits": {"nvidia.com/gpu": "1"}}),
    ));
    assert!(config(&gpu, "hostfile").starts_with("pi-launcher slots=1\npi-worker-0 slots=1\n"));
    assert!(config(&gpu, "discover_hosts.sh").contains("echo pi-launcher:1\n"));
    let launcher_env = |compiled: &trainset::compile::Compiled| -> Vec<String> {
        launcher_pod(compiled).containers[0]
            .env
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect()
    };
    assert!(launcher_env(&plain).contains(&"NVIDIA_VISIBLE_DEVICES".to_owned()));
    assert!(!launcher_env(&gpu).contains(&"NVIDIA_VISIBLE_DEVICES".to_owned()));
}

#[test]
fn intel_mpi_bootstrap_is_set_only_where_the_user_set_none() {
    let mut manifest = mpijob("v1", json!({}), json!({}));
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "ssh"}]);
    let compiled = compile(&manifest);
    let env: Vec<(String, Option<String>)> = launcher_pod(&compiled).containers[0]
        .env
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect();
    let bootstrap: Vec<_> = env
        .iter()
        .filter(|(n, _)| n == "I_MPI_HYDRA_BOOTSTRAP")
        .collect();
    assert_eq!(
        bootstrap,
        [&("I_MPI_HYDRA_BOOTSTRAP".to_owned(), Some("ssh".to_owned()))]
    );
    assert!(
        env.iter().any(|(n, v)| n == "I_MPI_HYDRA_BOOTSTRAP_EXEC"
            && v.as_deref() == Some("/etc/mpi/kubexec.sh"))
    );
    assert!(
        env.iter()
            .any(|(n, v)| n == "OMPI_MCA_plm_rsh_agent"
                && v.as_deref() == Some("/etc/mpi/kubexec.sh"))
    );
}

#[test]
fn main_container_must_be_a_container_name() {
    for (name, ok) in [
        ("mpi", true),
        ("mpi-2", true),
        ("mpi; rm -rf /", false),
        ("Mpi", false),
    ] {
        let result = compile_with_test_key(
            &mpijob("v1", json!({"mainContainer": name}), json!({})),
            None,
        );
        match result {
            Ok(compiled) => {
                assert!(ok, "{name:?} compiled");
                assert!(config(&compiled, "kubexec.sh").contains(&format!("--container={name} ")));
            }
            Err(error) => {
                assert!(!ok, "{name:?}: {error}");
                assert!(
                    error.to_string().starts_with("spec.mainContainer: "),
                    "{error}"
                );
            }
        }
    }
}

#[test]
fn a_launcher_service_account_of_its_own_is_bound_not_made() {
    let mut manifest = mpijob("v1", json!({}), json!({}));
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["serviceAccountName"] =
        json!("runner");
    let compiled = compile(&manifest);
    let access = compiled.launcher_access.as_ref().expect("access");
    assert!(access.service_account.is_none());
    let subjects = access.role_binding.subjects.as_ref().expect("subjects");
    assert_eq!(subjects[0].name, "runner");
    assert_eq!(subjects[0].namespace.as_deref(), Some("team"));
}
