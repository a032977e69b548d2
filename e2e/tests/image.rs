//! The image itself (`e2e/image`), run the way `deploy/deployment.yaml` runs it: as UID 65532 on
//! a read-only root file system with no capabilities, the ServiceAccount's token and CA mounted
//! where the kubelet mounts them, and the downward API's `POD_NAME`/`POD_NAMESPACE`. The one
//! difference: host networking, to reach the loopback apiserver, so the metrics endpoint is bound
//! to loopback too. Runs alone (`run-tests` stops the shared operator first): it must win the Lease.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use trainset::kinds::{Served, Visitor, visit_all};
use trainset_e2e::{
    TestNamespace, client, cluster_state, create_examples, http_get, install_crds, loopback,
    operator, repo_root, wait_for, wait_state,
};

/// Port offset of the image's metrics endpoint (see `trainset_e2e::loopback`).
const PORT: u16 = 885;
const CONTAINER: &str = "trainset-e2e-image";
const POD_NAME: &str = "trainset-image-e2e";
/// deploy/Containerfile's user and group.
const NONROOT: &str = "65532";
/// Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn image() -> String {
    std::env::var("TRAINSET_E2E_IMAGE").unwrap_or_else(|_| "localhost/trainset:e2e".to_owned())
}

fn podman() -> Command {
    let mut command = Command::new("podman");
    command.env(
        "CONTAINERS_CONF",
        repo_root().join("e2e/podman/containers.conf"),
    );
    command
}

fn podman_output(args: &[&str]) -> String {
    let output = podman()
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("podman {args:?}: {e}"));
    assert!(
        output.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The attached `podman run` and its pid file; the container is removed on drop whatever
/// happened.
struct Running(Child, PathBuf);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--time", "5", CONTAINER])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_file(&self.1);
    }
}

/// The files of the ServiceAccount volume: a fresh token, the cluster's CA, the namespace.
async fn service_account_volume(client: &kube::Client) -> PathBuf {
    let token = operator::service_account_token(client).await;
    let (_, ca) = operator::apiserver();
    let dir = repo_root().join("target/image-serviceaccount");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    std::fs::write(dir.join("token"), token).expect("token");
    std::fs::copy(&ca, dir.join("ca.crt")).unwrap_or_else(|e| panic!("{ca}: {e}"));
    std::fs::write(dir.join("namespace"), operator::NAMESPACE).expect("namespace");
    // Readable by UID 65532, as the kubelet's projected volume is.
    for file in ["token", "ca.crt", "namespace"] {
        make_world_readable(&dir.join(file), 0o644);
    }
    make_world_readable(&dir, 0o755);
    dir
}

fn make_world_readable(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn start(volume: &Path) -> Running {
    let (server, _) = operator::apiserver();
    let authority = server.trim_start_matches("https://");
    let (host, port) = authority
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("apiserver {server} has no port"));
    let _ = podman()
        .args(["rm", "--force", CONTAINER])
        .stderr(Stdio::null())
        .status();
    let log_path = repo_root().join("target/trainset-image.log");
    let log =
        std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
    let err = log.try_clone().expect("log");
    let mount = format!("{}:{SERVICE_ACCOUNT_DIR}:ro", volume.display());
    let metrics = loopback(PORT);
    let child = podman()
        .args(["run", "--rm", "--name", CONTAINER])
        .args(["--user", &format!("{NONROOT}:{NONROOT}")])
        .args(["--read-only", "--cap-drop", "ALL"])
        .args(["--security-opt", "no-new-privileges", "--network", "host"])
        .args(["--volume", &mount])
        .args(["--env", &format!("KUBERNETES_SERVICE_HOST={host}")])
        .args(["--env", &format!("KUBERNETES_SERVICE_PORT={port}")])
        .args(["--env", &format!("POD_NAME={POD_NAME}")])
        .args(["--env", &format!("POD_NAMESPACE={}", operator::NAMESPACE)])
        .arg(image())
        .args(["run", "--log-format=json", "--metrics-address", &metrics])
        .stdout(log)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("podman run {} (build it with e2e/image): {e}", image()));
    // `e2e/cluster down` stops it by this pid if the test cannot.
    let pid_file = cluster_state()
        .join("pids")
        .join(format!("podman@{CONTAINER}.pid"));
    std::fs::write(&pid_file, child.id().to_string())
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
    Running(child, pid_file)
}

/// A `/proc/<pid>/status` field of the container's process, as the host sees it.
fn proc_status(pid: &str, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The mount options of the container's root file system.
fn root_mount_options(pid: &str) -> String {
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    mounts
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(4) == Some(&"/"))
        .and_then(|fields| fields.get(5).map(|options| (*options).to_owned()))
        .unwrap_or_else(|| panic!("no root mount in /proc/{pid}/mountinfo"))
}

/// Each served kind's `framework` metrics label.
struct Frameworks(Vec<(String, &'static str)>);

impl Visitor for Frameworks {
    fn visit<K: Served>(&mut self) {
        self.0.push((K::kind(&()).into_owned(), K::FRAMEWORK));
    }
}

async fn wait_exit(running: &mut Running, limit: Duration) -> ExitStatus {
    wait_for(limit, "podman run to exit after SIGTERM", || {
        let status = running.0.try_wait().ok().flatten();
        async move { status }
    })
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane and the image: e2e/cluster up; e2e/image"]
async fn image_runs_as_the_deployment_runs_it() {
    let client = client().await;
    install_crds(&client).await;
    let volume = service_account_volume(&client).await;
    let mut running = start(&volume);
    let address = loopback(PORT);

    wait_for(
        Duration::from_secs(60),
        &format!("the image on {address} to lead (target/trainset-image.log)"),
        || async { (http_get(&address, "/readyz").await?.0 == 200).then_some(()) },
    )
    .await;

    // As the Deployment's securityContext asks: UID and GID 65532, no capabilities, read-only /.
    let pid = podman_output(&["inspect", "--format", "{{.State.Pid}}", CONTAINER]);
    assert_eq!(proc_status(&pid, "Uid"), [NONROOT; 4].join(" "));
    assert_eq!(proc_status(&pid, "Gid"), [NONROOT; 4].join(" "));
    assert_eq!(proc_status(&pid, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(&pid, "NoNewPrivs"), "1");
    let root = root_mount_options(&pid);
    assert!(
        root.split(',').any(|option| option == "ro"),
        "root file system mounted {root}"
    );

    // It leads under its POD_NAME.
    let leases: Api<Lease> = Api::namespaced(client.clone(), operator::NAMESPACE);
    let lease = leases.get("trainset").await.expect("the trainset Lease");
    let holder = lease.spec.and_then(|spec| spec.holder_identity);
    assert_eq!(holder.as_deref(), Some(POD_NAME));

    // Every example runs to Succeeded.
    let ns = TestNamespace::create(&client, "image").await;
    let jobs = create_examples(&client, &ns.name).await;
    assert!(jobs.len() >= 10, "{} examples", jobs.len());
    for (manifest, api) in &jobs {
        let name = manifest["metadata"]["name"].as_str().expect("name");
        wait_state(api, name, "Succeeded", Duration::from_secs(120)).await;
    }

    // Metrics: one reconcile histogram series per framework of the examples.
    let (code, metrics) = http_get(&address, "/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    let mut frameworks = Frameworks(Vec::new());
    visit_all(&mut frameworks);
    for (kind, framework) in frameworks.0 {
        let series =
            format!("trainset_reconcile_duration_seconds_count{{framework=\"{framework}\"}}");
        assert!(metrics.contains(&series), "{kind}: no {series} in /metrics");
    }

    // SIGTERM, as the kubelet stops a pod: podman passes it on; trainset exits 0 and lets the
    // Lease go.
    let podman_pid = running.0.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &podman_pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let exit = wait_exit(&mut running, Duration::from_secs(30)).await;
    assert!(exit.success(), "podman run exited {exit}");
    let lease = leases.get("trainset").await.expect("the trainset Lease");
    let holder = lease.spec.and_then(|spec| spec.holder_identity);
    assert_ne!(
        holder.as_deref(),
        Some(POD_NAME),
        "the Lease was not released"
    );
    drop(running);
    ns.delete().await;
}
