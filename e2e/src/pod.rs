//! A pod of an installed Deployment, run by hand the way the kubelet would run it. The local
//! control plane's nodes are KWOK's: they mark pods running but run nothing, so the install tests
//! take a real pod the Deployment created and start its container themselves, from its spec: the
//! image, args and env (the downward API's `metadata.name`/`metadata.namespace` resolved for that
//! pod), the user, read-only root, dropped capabilities and no-new-privileges of its security
//! context, and its ServiceAccount's token, CA and namespace mounted where the kubelet mounts
//! them. One difference: host networking, to reach the loopback apiserver, so the metrics
//! address is moved to loopback. An earlier release, which has no image, runs from its binary with
//! the same args and env and a kubeconfig holding the same token.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Probe, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

use crate::{cluster_state, loopback, operator, repo_root, wait_for};

/// Where the kubelet mounts a pod's ServiceAccount token, CA and namespace.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const METRICS_FLAG: &str = "--metrics-address";

/// `podman` with the machine's settings (`e2e/podman/containers.conf`).
pub fn podman() -> Command {
    let mut command = Command::new("podman");
    command.env(
        "CONTAINERS_CONF",
        repo_root().join("e2e/podman/containers.conf"),
    );
    command
}

/// How the pod's container is started.
pub enum Runtime<'a> {
    /// The pod's image with podman, as the kubelet would.
    Image,
    /// An earlier release's binary, run on the host with the pod's args and env.
    Binary(&'a Path),
}

/// What the pod's spec asks of its one container.
struct Spec {
    image: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// UID and GID, the container's security context over the pod's.
    user: Option<(i64, i64)>,
    read_only: bool,
    cap_drop: Vec<String>,
    no_new_privileges: bool,
    service_account: String,
    readiness: String,
    liveness: String,
}

/// The path an HTTP probe asks for; `what` names the probe in the panic.
fn probe_path(probe: Option<&Probe>, what: &str) -> String {
    probe
        .and_then(|p| p.http_get.as_ref())
        .and_then(|get| get.path.clone())
        .unwrap_or_else(|| panic!("the container has no HTTP {what} probe"))
}

fn spec_of(pod: &Pod, metrics: &str) -> Spec {
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    let spec = pod.spec.as_ref().expect("pod spec");
    let [container] = spec.containers.as_slice() else {
        panic!(
            "pod {name} has {} containers, not one",
            spec.containers.len()
        );
    };
    assert!(
        container.command.is_none(),
        "the image's entrypoint is overridden"
    );
    let args = container.args.clone().unwrap_or_default();
    assert!(
        !args.iter().any(|a| a == METRICS_FLAG),
        "write {METRICS_FLAG}=ADDRESS in one arg"
    );
    let mut args: Vec<String> = args
        .into_iter()
        .filter(|a| !a.starts_with(&format!("{METRICS_FLAG}=")))
        .collect();
    args.push(format!("{METRICS_FLAG}={metrics}"));

    let env = container
        .env
        .iter()
        .flatten()
        .map(|var| {
            let field = var
                .value_from
                .as_ref()
                .and_then(|from| from.field_ref.as_ref())
                .map(|field| field.field_path.as_str());
            let value = match (var.value.as_ref(), field) {
                (Some(value), None) => value.clone(),
                (None, Some("metadata.name")) => name.clone(),
                (None, Some("metadata.namespace")) => namespace.clone(),
                _ => panic!(
                    "env {}: only values and the pod's name and namespace",
                    var.name
                ),
            };
            (var.name.clone(), value)
        })
        .collect();

    let pod_context = spec.security_context.as_ref();
    let context = container.security_context.as_ref();
    let uid = context
        .and_then(|c| c.run_as_user)
        .or(pod_context.and_then(|c| c.run_as_user));
    let gid = context
        .and_then(|c| c.run_as_group)
        .or(pod_context.and_then(|c| c.run_as_group));
    Spec {
        image: container.image.clone().expect("container image"),
        args,
        env,
        user: uid.map(|uid| (uid, gid.unwrap_or(uid))),
        read_only: context.and_then(|c| c.read_only_root_filesystem) == Some(true),
        cap_drop: context
            .and_then(|c| c.capabilities.as_ref())
            .and_then(|c| c.drop.clone())
            .unwrap_or_default(),
        no_new_privileges: context.and_then(|c| c.allow_privilege_escalation) == Some(false),
        service_account: spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        readiness: probe_path(container.readiness_probe.as_ref(), "readiness"),
        liveness: probe_path(container.liveness_probe.as_ref(), "liveness"),
    }
}

/// A fresh token of a ServiceAccount (a TokenRequest, as the kubelet's projected volume gets).
pub async fn token(client: &Client, namespace: &str, account: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    wait_for(
        Duration::from_secs(30),
        &format!("a token for ServiceAccount {namespace}/{account}"),
        || async {
            accounts
                .create_token_request(account, &PostParams::default(), &request)
                .await
                .ok()?
                .status
                .and_then(|s| s.token)
        },
    )
    .await
}

fn write_readable(path: &Path, contents: &[u8], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The ServiceAccount volume's files, readable by any UID as the kubelet's projected volume is.
fn service_account_volume(dir: &Path, token: &str, namespace: &str) {
    use std::os::unix::fs::PermissionsExt;
    let (_, ca) = operator::apiserver();
    let ca = std::fs::read(&ca).unwrap_or_else(|e| panic!("{ca}: {e}"));
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    write_readable(&dir.join("token"), token.as_bytes(), 0o644);
    write_readable(&dir.join("ca.crt"), &ca, 0o644);
    write_readable(&dir.join("namespace"), namespace.as_bytes(), 0o644);
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
}

/// The running pod: its process, where it serves, and what its spec asked.
pub struct RunningPod {
    pub name: String,
    pub namespace: String,
    /// The metrics address (loopback).
    pub address: String,
    pub readiness: String,
    pub liveness: String,
    /// The UID and GID the spec asks for, when run from the image.
    pub user: Option<(i64, i64)>,
    child: Child,
    pid_file: PathBuf,
    container: Option<String>,
}

impl RunningPod {
    /// Starts `pod`'s container with its metrics on `loopback(port)`; logs go to
    /// `<target>/pod-<name>.log`.
    pub async fn start(client: &Client, pod: &Pod, runtime: Runtime<'_>, port: &str) -> Self {
        let name = pod.name_any();
        let namespace = pod.namespace().unwrap_or_default();
        let address = loopback(port);
        let spec = spec_of(pod, &address);
        let token = token(client, &namespace, &spec.service_account).await;
        let dir = crate::target_dir().join(format!("pod-{name}"));
        let log_path = crate::target_dir().join(format!("pod-{name}.log"));
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
        let err = log.try_clone().expect("log");
        let (server, _) = operator::apiserver();

        let (mut command, container, user) = match runtime {
            Runtime::Image => {
                service_account_volume(&dir.join("serviceaccount"), &token, &namespace);
                let authority = server.trim_start_matches("https://");
                let (host, port) = authority
                    .rsplit_once(':')
                    .unwrap_or_else(|| panic!("apiserver {server} has no port"));
                let container = format!("trainset-e2e-{name}");
                let _ = podman()
                    .args(["rm", "--force", &container])
                    .stderr(Stdio::null())
                    .stdout(Stdio::null())
                    .status();
                let mut command = podman();
                command.args(["run", "--rm", "--name", &container, "--network", "host"]);
                if let Some((uid, gid)) = spec.user {
                    command.args(["--user", &format!("{uid}:{gid}")]);
                }
                if spec.read_only {
                    command.arg("--read-only");
                }
                for capability in &spec.cap_drop {
                    command.args(["--cap-drop", capability]);
                }
                if spec.no_new_privileges {
                    command.args(["--security-opt", "no-new-privileges"]);
                }
                let mount = format!(
                    "{}:{SERVICE_ACCOUNT_DIR}:ro",
                    dir.join("serviceaccount").display()
                );
                command.args(["--volume", &mount]);
                command.args(["--env", &format!("KUBERNETES_SERVICE_HOST={host}")]);
                command.args(["--env", &format!("KUBERNETES_SERVICE_PORT={port}")]);
                for (key, value) in &spec.env {
                    command.args(["--env", &format!("{key}={value}")]);
                }
                command.arg(&spec.image).args(&spec.args);
                (command, Some(container), spec.user)
            }
            Runtime::Binary(binary) => {
                let kubeconfig = dir.join("kubeconfig");
                std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
                operator::write_token_kubeconfig(&kubeconfig, &token);
                let mut command = Command::new(binary);
                command
                    .args(&spec.args)
                    .envs(spec.env.iter().map(|(k, v)| (k, v)))
                    .env("KUBECONFIG", &kubeconfig);
                (command, None, None)
            }
        };
        let child = command
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting pod {name} ({}): {e}", spec.image));
        // `e2e/cluster stop-extras` and `down` stop it by this pid if the test cannot.
        let recorded = match runtime {
            Runtime::Image => format!("podman@{name}.pid"),
            Runtime::Binary(_) => format!("trainset@{port}.{}.pid", child.id()),
        };
        let pid_file = cluster_state().join("pids").join(recorded);
        std::fs::write(&pid_file, child.id().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        Self {
            name,
            namespace,
            address,
            readiness: spec.readiness,
            liveness: spec.liveness,
            user,
            child,
            pid_file,
            container,
        }
    }

    /// The pid of the container's process as the host sees it (from the image only).
    pub fn container_pid(&self) -> String {
        let container = self.container.as_deref().expect("run from the image");
        let output = podman()
            .args(["inspect", "--format", "{{.State.Pid}}", container])
            .output()
            .unwrap_or_else(|e| panic!("podman inspect: {e}"));
        assert!(output.status.success(), "podman inspect {container}");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Whether the container still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL to the container, as an OOM kill or a crash ends it.
    pub fn kill(&mut self) {
        match &self.container {
            Some(container) => {
                let killed = podman()
                    .args(["kill", "--signal", "KILL", container])
                    .stdout(Stdio::null())
                    .status()
                    .expect("podman kill");
                assert!(killed.success(), "podman kill {container}");
            }
            None => {
                let _ = self.child.kill();
            }
        }
    }

    /// SIGTERM, as the kubelet stops a pod's container, then waits up to 30 s for the exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -TERM {pid}");
        let what = format!("pod {} to exit after SIGTERM", self.name);
        wait_for(Duration::from_secs(30), &what, || {
            let status = self.child.try_wait().ok().flatten();
            async move { status }
        })
        .await
    }
}

impl Drop for RunningPod {
    fn drop(&mut self) {
        if let Some(container) = &self.container {
            let _ = podman()
                .args(["rm", "--force", "--time", "5", container])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// A `/proc/<pid>/status` field, as the host sees the process.
pub fn proc_status(pid: &str, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The mount options of a process's root file system.
pub fn root_mount_options(pid: &str) -> String {
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).expect("mountinfo");
    mounts
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(4) == Some(&"/"))
        .and_then(|fields| fields.get(5).map(|options| (*options).to_owned()))
        .unwrap_or_else(|| panic!("no root mount in /proc/{pid}/mountinfo"))
}
