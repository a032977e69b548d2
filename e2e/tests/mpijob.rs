//! MPIJob at both of its versions on one CRD: a `kubeflow.org/v1` job (training-operator v1's
//! semantics: kubectl exec, a Role of the launcher's own) and a `kubeflow.org/v2beta1` one
//! (mpi-operator's: SSH) in one namespace, each read back in its version; and the launcher's
//! Role, checked with `kubectl auth can-i` as the launcher's ServiceAccount.

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use serde_json::{Value, json};
use trainset::api::API_VERSION_ANNOTATION;
use trainset_e2e::{create, delay, http_get, operator, pods_with, setup, wait_for, wait_state};

/// An MPIJob at `version`: one launcher and `workers` workers whose pods run `seconds`.
fn mpijob(version: &str, name: &str, workers: i64, seconds: u32, spec: Value) -> Value {
    let template = |command: bool| {
        let mut container = json!({"name": "mpi", "image": "mpi:test"});
        if command {
            container["command"] = json!(["mpirun", "-n", "2", "hostname"]);
        }
        json!({"metadata": delay(seconds), "spec": {"containers": [container]}})
    };
    let mut manifest = json!({
        "apiVersion": format!("kubeflow.org/{version}"),
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 2,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template(true)},
                "Worker": {"replicas": workers, "template": template(false)},
            },
        },
    });
    if let (Some(target), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
        target.extend(extra.clone());
    }
    manifest
}

/// `kubectl` of the local control plane (on `PATH` after `e2e/cluster env`); its output.
fn kubectl(args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("kubectl: {e}"));
    assert!(
        output.status.success() || output.status.code() == Some(1),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_v1_and_a_v2beta1_mpijob_run_side_by_side_each_as_its_version_says() {
    let (client, ns) = setup("mpi-versions").await;
    let v1 = mpijob("v1", "pi-v1", 2, 3, json!({"mainContainer": "mpi"}));
    let v2 = mpijob(
        "v2beta1",
        "pi-v2",
        2,
        3,
        json!({"mpiImplementation": "OpenMPI"}),
    );
    let v1_api = create(&client, &ns.name, &v1).await;
    let v2_api = create(&client, &ns.name, &v2).await;
    for (api, name) in [(&v1_api, "pi-v1"), (&v2_api, "pi-v2")] {
        wait_state(api, name, "Succeeded", Duration::from_secs(120)).await;
    }

    // Each reads back in its own version as it was written, plus the recorded version and the
    // CRD's `runPolicy: {}` default.
    for (api, manifest, version) in [(&v1_api, &v1, "v1"), (&v2_api, &v2, "v2beta1")] {
        let name = manifest["metadata"]["name"].as_str().unwrap_or_default();
        let stored = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let stored = serde_json::to_value(&stored).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(stored["apiVersion"], format!("kubeflow.org/{version}"));
        assert_eq!(
            stored["metadata"]["annotations"][API_VERSION_ANNOTATION], version,
            "{name}"
        );
        let mut expected = manifest["spec"].clone();
        expected["runPolicy"] = json!({});
        assert_eq!(stored["spec"], expected, "{name} reads back unchanged");
    }
    // The other version reads the same object with nothing pruned.
    let other = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &ns.name,
        &kube::api::ApiResource {
            group: "kubeflow.org".into(),
            version: "v2beta1".into(),
            api_version: "kubeflow.org/v2beta1".into(),
            kind: "MPIJob".into(),
            plural: "mpijobs".into(),
        },
    );
    let as_v2 = other
        .get("pi-v1")
        .await
        .unwrap_or_else(|e| panic!("pi-v1: {e}"));
    assert_eq!(as_v2.data["spec"]["mainContainer"], "mpi");

    // `kubectl get mpijob` lists both.
    let listed = kubectl(&["get", "mpijobs", "-n", &ns.name, "-o", "name"]);
    let mut names: Vec<&str> = listed.lines().collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["mpijob.kubeflow.org/pi-v1", "mpijob.kubeflow.org/pi-v2"]
    );

    // What each API makes besides the JobSet.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns.name);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns.name);
    let v1_config = config_maps.get("pi-v1-config").await.expect("pi-v1-config");
    let data = v1_config.data.unwrap_or_default();
    assert_eq!(
        data.get("hostfile").map(String::as_str),
        Some("pi-v1-worker-0 slots=2\npi-v1-worker-1 slots=2\n")
    );
    assert!(
        data.get("kubexec.sh")
            .is_some_and(|s| s.contains("--container=mpi "))
    );
    assert!(secrets.get_opt("pi-v1-ssh").await.expect("get").is_none());
    assert!(
        accounts
            .get_opt("pi-v1-launcher")
            .await
            .expect("get")
            .is_some()
    );
    assert!(
        bindings
            .get_opt("pi-v1-launcher")
            .await
            .expect("get")
            .is_some()
    );
    assert!(secrets.get_opt("pi-v2-ssh").await.expect("get").is_some());
    assert!(
        accounts
            .get_opt("pi-v2-launcher")
            .await
            .expect("get")
            .is_none()
    );

    // v1's launcher is the master, with v1's operator name.
    let launchers = pods_with(
        &client,
        &ns.name,
        "training.kubeflow.org/job-name=pi-v1,training.kubeflow.org/job-role=master",
    )
    .await;
    assert_eq!(launchers.len(), 1);
    let labels = launchers[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("training.kubeflow.org/operator-name")
            .map(String::as_str),
        Some("mpijob-controller")
    );
    assert_eq!(
        labels
            .get("training.kubeflow.org/replica-type")
            .map(String::as_str),
        Some("launcher")
    );

    let (_, metrics) = http_get(&operator::metrics_address(), "/metrics")
        .await
        .expect("metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "trainset_api_version_policy 1"),
        "the operator found the api-version policy at startup"
    );
    ns.delete().await;
}

/// `kubectl auth can-i` as `account` in `namespace`.
fn can_i(
    namespace: &str,
    account: &str,
    verb: &str,
    resource: &str,
    subresource: Option<&str>,
) -> bool {
    let user = format!("system:serviceaccount:{namespace}:{account}");
    let mut args = vec![
        "auth", "can-i", verb, resource, "-n", namespace, "--as", &user,
    ];
    if let Some(subresource) = subresource {
        args.extend(["--subresource", subresource]);
    }
    match kubectl(&args).as_str() {
        "yes" => true,
        "no" => false,
        other => panic!("kubectl auth can-i {args:?}: {other}"),
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: e2e/cluster up"]
async fn a_launcher_may_exec_into_its_own_workers_and_no_other_pod() {
    let (client, ns) = setup("mpi-rbac").await;
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns.name);
    let mut workers = Vec::new();
    for name in ["alpha", "beta"] {
        let api = create(&client, &ns.name, &mpijob("v1", name, 2, 600, json!({}))).await;
        wait_state(&api, name, "Running", Duration::from_secs(120)).await;
        let selector = format!(
            "jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=worker"
        );
        let mut pods: Vec<String> = pods_with(&client, &ns.name, &selector)
            .await
            .into_iter()
            .filter_map(|pod| pod.metadata.name)
            .collect();
        pods.sort();
        assert_eq!(pods.len(), 2, "{name}'s workers");
        // The Role names exactly the job's workers once trainset has seen them.
        let role = format!("{name}-launcher");
        wait_for(
            Duration::from_secs(30),
            &format!("{role} to name {pods:?}"),
            || async {
                let live = roles.get(&role).await.ok()?;
                let named: Vec<String> = live
                    .rules
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|rule| rule.resources.as_deref() == Some(&["pods/exec".to_owned()][..]))
                    .flat_map(|rule| rule.resource_names.unwrap_or_default())
                    .collect();
                (named == pods).then_some(())
            },
        )
        .await;
        workers.push(pods);
    }
    let selector =
        "jobset.sigs.k8s.io/jobset-name=alpha,jobset.sigs.k8s.io/replicatedjob-name=launcher";
    let alpha_launcher_pod = wait_for(Duration::from_secs(60), "alpha's launcher pod", || async {
        pods_with(&client, &ns.name, selector)
            .await
            .pop()?
            .metadata
            .name
    })
    .await;
    for worker in &workers[0] {
        assert!(can_i(
            &ns.name,
            "alpha-launcher",
            "create",
            &format!("pods/{worker}"),
            Some("exec")
        ));
    }
    for worker in &workers[1] {
        assert!(!can_i(
            &ns.name,
            "alpha-launcher",
            "create",
            &format!("pods/{worker}"),
            Some("exec")
        ));
        assert!(can_i(
            &ns.name,
            "beta-launcher",
            "create",
            &format!("pods/{worker}"),
            Some("exec")
        ));
    }
    assert!(!can_i(
        &ns.name,
        "alpha-launcher",
        "create",
        &format!("pods/{alpha_launcher_pod}"),
        Some("exec")
    ));
    assert!(!can_i(
        &ns.name,
        "alpha-launcher",
        "create",
        "pods",
        Some("exec")
    ));
    assert!(!can_i(&ns.name, "alpha-launcher", "delete", "pods", None));
    assert!(can_i(&ns.name, "alpha-launcher", "list", "pods", None));

    // The scripts of the job's ConfigMap find the pods of the hostfile's names, asking as the
    // launcher would (its ServiceAccount); the exec itself is printed, not run (KWOK's pods run
    // nothing).
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let data = config_maps
        .get("alpha-config")
        .await
        .expect("alpha-config")
        .data
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("trainset-{}", ns.name));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let fake = dir.join("kubectl");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nif [ \"$1\" = exec ]; then echo \"EXEC $*\"; exit 0; fi\n\
             exec kubectl -n {ns} --as=system:serviceaccount:{ns}:alpha-launcher \"$@\"\n",
            ns = ns.name
        ),
    )
    .expect("fake kubectl");
    let script = |key: &str| {
        let path = dir.join(key);
        let text = data.get(key).unwrap_or_else(|| panic!("{key}"));
        std::fs::write(
            &path,
            text.replace("/opt/kube/kubectl", &fake.display().to_string()),
        )
        .unwrap_or_else(|e| panic!("{key}: {e}"));
        path
    };
    let (kubexec, discover) = (script("kubexec.sh"), script("discover_hosts.sh"));
    let sh = |args: &[&str]| {
        let output = Command::new("sh")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("sh {args:?}: {e}"));
        assert!(
            output.status.success(),
            "sh {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let fake_path = fake.display().to_string();
    sh(&["-c", &format!("chmod +x {fake_path}")]);
    // The hostfile's worker 1 is the pod of completion index 1.
    let worker_1 = pods_with(
        &client,
        &ns.name,
        "jobset.sigs.k8s.io/jobset-name=alpha,batch.kubernetes.io/job-completion-index=1,\
         jobset.sigs.k8s.io/replicatedjob-name=worker",
    )
    .await
    .pop()
    .and_then(|pod| pod.metadata.name)
    .expect("alpha's worker 1");
    let ran = sh(&[&kubexec.display().to_string(), "alpha-worker-1", "hostname"]);
    assert_eq!(
        ran.trim(),
        format!("EXEC exec {worker_1} -- /bin/sh -c hostname")
    );
    assert_eq!(
        sh(&[&discover.display().to_string()]),
        "alpha-worker-0:2\nalpha-worker-1:2\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
    ns.delete().await;
}
