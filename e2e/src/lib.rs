//! Helpers for end-to-end tests against the local control plane that `e2e/cluster up` starts.
//!
//! Every test that needs the cluster is marked `#[ignore]` with the reason, so a plain
//! `cargo test --workspace` reports them as ignored instead of failing or pretending to pass; the
//! repository's test command (`./run-tests`) brings the cluster up and runs them with `--ignored`.

pub mod audit;
pub mod differential;
pub mod gang;
pub mod kubelet;
pub mod kueue;
pub mod pod;
pub mod relay;

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{Value, json};

/// The repository root (this crate lives in `e2e/`).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, which `.ci/run` keeps outside the repository),
/// where the binaries are and the tests write their logs.
pub fn target_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo_root().join("target"), std::path::PathBuf::from)
}

/// The port plan the scripts read too: `name=offset` lines.
const PORTS: &str = include_str!("../ports");

/// The offset of the port `name` in `e2e/ports`.
fn offset(name: &str) -> u16 {
    PORTS
        .lines()
        .filter_map(|line| line.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, offset)| offset.trim().parse().ok())
        .unwrap_or_else(|| panic!("e2e/ports has no port {name:?}"))
}

/// `127.0.0.1:<TRAINSET_E2E_PORT_BASE + offset>` of the port `name` in `e2e/ports`: every port
/// the tests use derives from the cluster's port base, which `e2e/cluster env` exports (its
/// default is written there only).
pub fn loopback(name: &str) -> String {
    let offset = offset(name);
    let base = std::env::var("TRAINSET_E2E_PORT_BASE")
        .ok()
        .and_then(|b| b.parse::<u16>().ok())
        .unwrap_or_else(|| {
            panic!("TRAINSET_E2E_PORT_BASE is not set; run `eval \"$(e2e/cluster env)\"`")
        });
    format!("127.0.0.1:{}", base.saturating_add(offset))
}

/// The cluster's state directory: where `KUBECONFIG` (from `e2e/cluster env`) lives.
pub fn cluster_state() -> std::path::PathBuf {
    let kubeconfig = std::env::var_os("KUBECONFIG")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("KUBECONFIG is not set; run `eval \"$(e2e/cluster env)\"`"));
    kubeconfig
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs `e2e/cluster <args>` (restarting a component, say) and panics if it fails.
pub fn cluster(args: &[&str]) {
    run_script("e2e/cluster", args, &[]);
}

/// Runs the repository's script `path` with `args` and panics if it fails.
fn run_script(path: &str, args: &[&str], env: &[(&str, &str)]) {
    let status = std::process::Command::new(repo_root().join(path))
        .args(args)
        .envs(env.iter().copied())
        .status()
        .unwrap_or_else(|e| panic!("{path} {args:?}: {e}"));
    assert!(status.success(), "{path} {args:?} failed: {status}");
}

/// A client for the cluster named by `KUBECONFIG` (see `e2e/cluster env`).
pub async fn client() -> Client {
    let config = Config::infer()
        .await
        .unwrap_or_else(|e| panic!("no cluster to test against ({e}); run `eval \"$(e2e/cluster env)\"` after `e2e/cluster up`"));
    Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// A namespace created for one test, deleted by [`TestNamespace::delete`] or, when a test
/// fails first, on drop.
pub struct TestNamespace {
    pub name: String,
    client: Client,
    deleted: bool,
}

impl Drop for TestNamespace {
    /// A failing test unwinds without reaching `delete`; kubectl (on `PATH` after
    /// `e2e/cluster env`) removes the namespace without an async runtime.
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let name = format!("e2e-{prefix}-{:x}", nanos ^ std::process::id());
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let body: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                .unwrap_or_else(|e| panic!("namespace body: {e}"));
        namespaces
            .create(&PostParams::default(), &body)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        Self {
            name,
            client: client.clone(),
            deleted: false,
        }
    }

    pub async fn delete(mut self) {
        self.deleted = true;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        // Best effort: a leftover namespace never makes a test pass or fail.
        let _ = namespaces
            .delete(&self.name, &DeleteParams::background())
            .await;
    }
}

/// Parses every YAML document in `text` into JSON values, skipping empty ones.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap_or_else(|e| panic!("YAML: {e}")))
        .filter(|value: &Value| !value.is_null())
        .collect()
}

/// The API of the object's kind, found through discovery-free plural guessing: every kind used in
/// these tests pluralises its lower-case name by appending `s`, or `es` after an `s`
/// (`WorkloadPriorityClass`).
pub fn dynamic_api(client: &Client, object: &Value, namespace: Option<&str>) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let singular = kind.to_ascii_lowercase();
    let plural = match singular.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None if singular.ends_with('s') => format!("{singular}es"),
        None => format!("{singular}s"),
    };
    let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Server-side applies `object` with field manager `trainset-e2e`.
pub async fn apply(
    client: &Client,
    object: &Value,
    namespace: Option<&str>,
) -> Result<DynamicObject, kube::Error> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let params = PatchParams::apply("trainset-e2e").force();
    dynamic_api(client, object, namespace)
        .patch(&name, &params, &Patch::Apply(object))
        .await
}

/// Creates `object` with `dryRun=All`: admission and validation run, nothing is stored.
pub async fn dry_run_create(
    client: &Client,
    object: &Value,
    namespace: &str,
) -> Result<DynamicObject, kube::Error> {
    let object: DynamicObject =
        serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("object: {e}"));
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let value = serde_json::to_value(&object).unwrap_or_default();
    dynamic_api(client, &value, Some(namespace))
        .create(&params, &object)
        .await
}

/// Creates `object` in `namespace` as `kubectl create` (and client-side `kubectl apply`) does:
/// a POST with strict field validation, so an unknown field is an error, not a warning.
pub async fn create_strict(
    client: &Client,
    object: &Value,
    namespace: &str,
) -> Result<DynamicObject, kube::Error> {
    let plural = dynamic_api(client, object, Some(namespace))
        .resource_url()
        .to_owned();
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let uri = format!("{plural}?fieldValidation=Strict&fieldManager=trainset-e2e");
    let request = http::Request::post(uri)
        .header("Content-Type", "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request::<DynamicObject>(request).await
}

/// Polls `check` every 250 ms until it returns `Some`, or panics after `limit` describing `what`.
pub async fn wait_for<T, F, Fut>(limit: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_until(limit, check)
        .await
        .unwrap_or_else(|| panic!("timed out after {limit:?} waiting for {what}"))
}

/// [`wait_for`] that says `None` when `limit` passes instead of panicking: for a caller that
/// has more to say about why.
pub async fn wait_until<T, F, Fut>(limit: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Creates a training job (or any object) from its manifest in `ns`, panicking with the
/// apiserver's answer if it is refused.
pub async fn create(client: &Client, ns: &str, manifest: &Value) -> Api<DynamicObject> {
    let api = dynamic_api(client, manifest, Some(ns));
    let object: DynamicObject = serde_json::from_value(manifest.clone()).expect("object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating {}: {e}", manifest["metadata"]["name"]));
    api
}

/// Waits until condition `type_` of the object is True; fails at once if the object fails
/// instead (unless `Failed` is what it waits for).
pub async fn wait_condition(
    api: &Api<DynamicObject>,
    name: &str,
    type_: &str,
    limit: Duration,
) -> Value {
    wait_for(limit, &format!("{name} to be {type_}"), || async {
        let status = status(&api.get(name).await.ok()?);
        if type_ != "Failed" {
            assert_ne!(condition(&status, "Failed")["status"], "True", "{status}");
        }
        (condition(&status, type_)["status"] == "True").then_some(status)
    })
    .await
}

/// The pods in `ns` matching `selector` that are not being deleted.
pub async fn pods_with(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.list(&ListParams::default().labels(selector))
        .await
        .unwrap_or_else(|e| panic!("listing pods {selector}: {e}"))
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Creates `manifest` in `ns`, retrying for up to `limit` while an admission webhook refuses it:
/// Trainer's and Kueue's TrainJob webhooks look a runtime up in their informers' caches, which
/// may not have one created a moment before.
pub async fn create_when_admitted(
    client: &Client,
    ns: &str,
    manifest: &Value,
    limit: Duration,
) -> Result<Api<DynamicObject>, kube::Error> {
    create_when_admitted_unless(client, ns, manifest, limit, |_| false).await
}

/// [`create_when_admitted`], but a denial whose message `final_denial` accepts is returned at
/// once (a webhook that refuses the object itself, not its cache's view of another).
pub async fn create_when_admitted_unless(
    client: &Client,
    ns: &str,
    manifest: &Value,
    limit: Duration,
    final_denial: impl Fn(&str) -> bool,
) -> Result<Api<DynamicObject>, kube::Error> {
    let api = dynamic_api(client, manifest, Some(ns));
    let object: DynamicObject =
        serde_json::from_value(manifest.clone()).map_err(kube::Error::SerdeError)?;
    let deadline = Instant::now() + limit;
    loop {
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => return Ok(api),
            Err(kube::Error::Api(status))
                if status.message.starts_with("admission webhook ")
                    && !final_denial(&status.message)
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Creates every manifest of `examples/` in `ns`: each with the API it was created through.
pub async fn create_examples(client: &Client, ns: &str) -> Vec<(Value, Api<DynamicObject>)> {
    let mut jobs = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("examples")).expect("examples/") {
        let path = entry.expect("entry").path();
        for manifest in yaml_documents(&std::fs::read_to_string(&path).expect("readable")) {
            let api = create(client, ns, &manifest).await;
            jobs.push((manifest, api));
        }
    }
    jobs
}

/// The object's `status`.
pub fn status(object: &DynamicObject) -> Value {
    object.data["status"].clone()
}

/// Waits until the job's `status.state` is `state`; fails at once on another terminal state.
pub async fn wait_state(
    api: &Api<DynamicObject>,
    name: &str,
    state: &str,
    limit: Duration,
) -> Value {
    wait_for(limit, &format!("{name} to reach {state}"), || async {
        let object = api.get(name).await.ok()?;
        let current = status(&object)["state"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if current != state && (current == "Succeeded" || current == "Failed") {
            panic!(
                "{name} reached {current} instead of {state}: {}",
                status(&object)
            );
        }
        (current == state).then(|| status(&object))
    })
    .await
}

/// The condition of `type_` in an object's `status` (`Null` when absent).
pub fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// What an operator test starts from: a client, the CRDs and policies installed, the shared
/// operator running, and a fresh namespace named after `prefix`.
pub async fn setup(prefix: &str) -> (Client, TestNamespace) {
    let client = client().await;
    install_crds(&client).await;
    operator::ensure(&client).await;
    let ns = TestNamespace::create(&client, prefix).await;
    (client, ns)
}

/// Applies the committed CRDs under `crds/`, waits until each is established, then applies
/// `deploy/trainjob-names.yaml` (whose policies read the runtime CRDs) and
/// `deploy/api-version.yaml`, as the README installs them.
pub async fn install_crds(client: &Client) {
    let mut names = Vec::new();
    for entry in
        std::fs::read_dir(repo_root().join("crds")).unwrap_or_else(|e| panic!("crds/: {e}"))
    {
        let path = entry.unwrap_or_else(|e| panic!("crds/: {e}")).path();
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for crd in yaml_documents(&text) {
            let name = crd["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            apply(client, &crd, None)
                .await
                .unwrap_or_else(|e| panic!("applying {name}: {e}"));
            names.push(name);
        }
    }
    let built = trainset::crds::all().unwrap_or_else(|e| panic!("building the CRDs: {e}"));
    assert_eq!(
        names.len(),
        built.len(),
        "crds/ holds every CRD trainset serves"
    );
    wait_established(client, &names).await;
    let policies = trainset::trainjob_names::objects()
        .into_iter()
        .chain(trainset::api_version::objects());
    for policy in policies {
        apply(client, &policy, None)
            .await
            .unwrap_or_else(|e| panic!("applying {}: {e}", policy["metadata"]["name"]));
    }
}

/// Applies `deploy/runtimes/` (the runtimes trainset ships and the SDK's public ConfigMap), as
/// `kubectl apply --server-side -k deploy/runtimes` would.
pub async fn install_runtimes(client: &Client) {
    let dir = repo_root().join("deploy/runtimes");
    let kustomization = std::fs::read_to_string(dir.join("kustomization.yaml"))
        .unwrap_or_else(|e| panic!("deploy/runtimes/kustomization.yaml: {e}"));
    let resources = yaml_documents(&kustomization)
        .first()
        .map(|k| k["resources"].clone())
        .unwrap_or_default();
    for file in resources.as_array().into_iter().flatten() {
        let file = file.as_str().unwrap_or_default();
        let text = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("deploy/runtimes/{file}: {e}"));
        for object in yaml_documents(&text) {
            let namespace = object["metadata"]["namespace"].as_str();
            apply(client, &object, namespace)
                .await
                .unwrap_or_else(|e| panic!("applying {file}: {e}"));
        }
    }
}

/// Waits until each named CRD is established (its kinds are served).
pub async fn wait_established(client: &Client, names: &[String]) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        wait_for(
            Duration::from_secs(30),
            &format!("CRD {name} to be established"),
            || async {
                let crd = crds.get(name).await.ok()?;
                let conditions = crd.status?.conditions?;
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await;
    }
}

pub const COMPLETE_DELAY: &str = "pod-complete.stage.kwok.x-k8s.io/delay";

/// Pods that run `seconds` before KWOK completes them (the jitter bound is the total delay).
pub fn delay(seconds: u32) -> Value {
    let value = format!("{seconds}s");
    json!({"annotations": {COMPLETE_DELAY: value.clone(), "pod-complete.stage.kwok.x-k8s.io/jitter-delay": value}})
}

pub async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&ListParams::default()).await.expect("events");
    list.items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect()
}

pub async fn wait_event(client: &Client, ns: &str, name: &str, type_: &str, reason: &str) {
    wait_for(
        Duration::from_secs(30),
        &format!("{type_} event {reason} on {name}"),
        || async {
            let events = events_for(client, ns, name).await;
            events
                .iter()
                .any(|(t, r)| t == type_ && r == reason)
                .then_some(())
        },
    )
    .await;
}

/// An upstream operator started with `e2e/peers <name> start` and stopped again (a v1 peer
/// restoring trainset's CRDs) when the guard drops, pass or fail.
pub struct Peer(&'static str);

impl Peer {
    pub fn start(name: &'static str) -> Self {
        Self::start_with(name, &[])
    }

    /// [`Peer::start`] with `env` set for `e2e/peers` (`TRAINSET_E2E_MPIJOB_V1`, ...).
    pub fn start_with(name: &'static str, env: &[(&str, &str)]) -> Self {
        run_script("e2e/peers", &[name, "start"], env);
        Peer(name)
    }

    pub fn name(&self) -> &'static str {
        self.0
    }

    /// Stops the peer as a platform team switching to trainset does (`e2e/peers … switch`): its
    /// jobs stay, under trainset's CRDs. The guard still stops it at the end.
    pub fn switch(&self) {
        run_script("e2e/peers", &[self.0, "switch"], &[]);
    }

    /// Stops the peer's processes only, as a restart of its pod would (`e2e/peers … pause`):
    /// its CRDs and jobs stay, and [`Peer::start`] brings it back over them.
    pub fn pause(self) {
        run_script("e2e/peers", &[self.0, "pause"], &[]);
        std::mem::forget(self);
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("e2e/peers"))
            .args([self.0, "stop"])
            .status();
    }
}

pub mod operator {
    //! The trainset controller as a child process of the test binary, running as the
    //! ServiceAccount of `deploy/` with its ClusterRole (so every operator test also proves that
    //! RBAC is enough): started once, shared by the tests of one binary, restartable, and stopped by
    //! `run-tests` at the end.

    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    use kube::Client;
    use tokio::sync::Mutex;

    /// The ports (in `e2e/ports`) of the operators' metrics endpoints.
    pub const SHARED_PORT: &str = "shared_operator";
    pub const FOLLOWER_PORT: &str = "follower_operator";
    pub const NAMESPACE: &str = "trainset-system";

    static PROCESS: Mutex<Option<Child>> = Mutex::const_new(None);

    /// The shared operator's metrics address.
    pub fn metrics_address() -> String {
        super::loopback(SHARED_PORT)
    }

    /// Records the child's pid as `trainset@<port>.<pid>.pid` in the cluster's pid directory, so
    /// `e2e/cluster stop-extras` (run by `run-tests`) and `down` stop it by pid, checked against
    /// `/proc/<pid>/exe`, even after this test binary has exited.
    fn record(child: &Child, metrics_address: &str) {
        let port = metrics_address.rsplit(':').next().unwrap_or("0");
        let path = super::cluster_state()
            .join("pids")
            .join(format!("trainset@{port}.{}.pid", child.id()));
        std::fs::write(&path, child.id().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Pids recorded for operators on `metrics_address` that still run.
    fn recorded(metrics_address: &str) -> Vec<u32> {
        let port = metrics_address.rsplit(':').next().unwrap_or("0");
        let prefix = format!("trainset@{port}.");
        let Ok(entries) = std::fs::read_dir(super::cluster_state().join("pids")) else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
            .filter(|pid: &u32| {
                std::fs::read_link(format!("/proc/{pid}/exe"))
                    .is_ok_and(|exe| exe.to_string_lossy().contains("/trainset"))
            })
            .collect()
    }

    pub fn binary() -> std::path::PathBuf {
        std::env::var_os("TRAINSET_BIN")
            .map(Into::into)
            .unwrap_or_else(|| super::target_dir().join("debug/trainset"))
    }

    /// Applies `deploy/namespace.yaml`, `clusterrole.yaml` and `rbac.yaml` and returns a fresh
    /// token of the trainset ServiceAccount (a TokenRequest, as the kubelet's projected volume gets).
    pub async fn service_account_token(client: &Client) -> String {
        for file in ["namespace.yaml", "clusterrole.yaml", "rbac.yaml"] {
            let path = super::repo_root().join("deploy").join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for object in super::yaml_documents(&text) {
                let namespace = object["metadata"]["namespace"].as_str().map(str::to_owned);
                super::apply(client, &object, namespace.as_deref())
                    .await
                    .unwrap_or_else(|e| panic!("applying {file}: {e}"));
            }
        }
        super::pod::token(client, NAMESPACE, "trainset").await
    }

    /// The local control plane's apiserver URL and the path of its CA, from `KUBECONFIG`.
    pub fn apiserver() -> (String, String) {
        let admin =
            kube::config::Kubeconfig::read().unwrap_or_else(|e| panic!("reading KUBECONFIG: {e}"));
        let cluster = admin
            .clusters
            .first()
            .and_then(|c| c.cluster.clone())
            .unwrap_or_else(|| panic!("KUBECONFIG names no cluster"));
        (
            cluster.server.unwrap_or_default(),
            cluster.certificate_authority.unwrap_or_default(),
        )
    }

    /// Writes to `path` a kubeconfig for the local control plane that authenticates with
    /// `token`, as a pod's ServiceAccount token would.
    pub fn write_token_kubeconfig(path: &std::path::Path, token: &str) {
        write_token_kubeconfig_via(path, token, &apiserver().0);
    }

    /// [`write_token_kubeconfig`], reaching the apiserver at `server` (a relay in front of it).
    fn write_token_kubeconfig_via(path: &std::path::Path, token: &str, server: &str) {
        let (_, ca) = apiserver();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster: {{server: \"{server}\", certificate-authority: \"{ca}\"}}\nusers:\n- name: token\n  user: {{token: \"{token}\"}}\ncontexts:\n- name: token\n  context: {{cluster: e2e, user: token}}\ncurrent-context: token\n"
        );
        std::fs::write(path, kubeconfig).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// A kubeconfig that authenticates as the trainset ServiceAccount with a fresh token.
    async fn service_account_kubeconfig(client: &Client) -> std::path::PathBuf {
        let token = service_account_token(client).await;
        let path = super::target_dir().join("trainset-e2e.kubeconfig");
        write_token_kubeconfig(&path, &token);
        path
    }

    fn spawn(
        kubeconfig: &std::path::Path,
        metrics_address: &str,
        args: &[&str],
        log: Stdio,
        err: Stdio,
    ) -> Child {
        let child = Command::new(binary())
            .args([
                "run",
                "--metrics-address",
                metrics_address,
                "--lease-namespace",
                NAMESPACE,
            ])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {} (build it with `cargo build --bin trainset`): {e}",
                    binary().display()
                )
            });
        record(&child, metrics_address);
        child
    }

    fn log_files() -> (Stdio, Stdio) {
        let path = std::env::var_os("TRAINSET_E2E_LOG")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| super::target_dir().join("trainset-e2e.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let err = log.try_clone().unwrap_or_else(|e| panic!("log: {e}"));
        (Stdio::from(log), Stdio::from(err))
    }

    /// Starts the shared operator unless it runs, here or for an earlier test binary (each
    /// test file is its own binary; the first one's operator serves them all).
    pub async fn ensure(client: &Client) {
        let mut process = PROCESS.lock().await;
        let running = process
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)));
        if !running && recorded(&metrics_address()).is_empty() {
            let kubeconfig = service_account_kubeconfig(client).await;
            let (log, err) = log_files();
            *process = Some(spawn(&kubeconfig, &metrics_address(), &[], log, err));
        }
    }

    /// The shared operator's pid, if exactly one runs.
    pub fn pid() -> Option<u32> {
        match recorded(&metrics_address()).as_slice() {
            [pid] => Some(*pid),
            _ => None,
        }
    }

    /// Another operator process on `metrics_address` (a follower, or the chaos tests' own),
    /// logging to the shared log; killed (SIGKILL) on drop.
    pub struct Extra(Child);

    impl Extra {
        pub fn pid(&self) -> u32 {
            self.0.id()
        }

        /// Whether the process still runs.
        pub fn running(&mut self) -> bool {
            matches!(self.0.try_wait(), Ok(None))
        }

        /// How the process ended, if it has.
        pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
            self.0.try_wait().ok().flatten()
        }

        /// SIGTERM, as Kubernetes stops a pod, then waits up to 30 s for the exit: the process
        /// releases its Lease, so the next one leads at once.
        pub async fn stop(mut self) {
            let pid = self.pid().to_string();
            let sent = Command::new("kill").args(["-TERM", &pid]).status();
            assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
            let what = format!("trainset {pid} to exit after SIGTERM");
            crate::wait_for(Duration::from_secs(30), &what, || {
                let status = self.0.try_wait().ok().flatten();
                async move { status }
            })
            .await;
        }
    }

    impl Drop for Extra {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    pub async fn spawn_extra(client: &Client, metrics_address: &str) -> Extra {
        spawn_extra_with(client, metrics_address, &[]).await
    }

    /// [`spawn_extra`], with more flags for `trainset run`.
    pub async fn spawn_extra_with(client: &Client, metrics_address: &str, args: &[&str]) -> Extra {
        let kubeconfig = service_account_kubeconfig(client).await;
        let (log, err) = log_files();
        Extra(spawn(&kubeconfig, metrics_address, args, log, err))
    }

    /// [`spawn_extra`], reaching the apiserver through `relay` (its own kubeconfig).
    pub async fn spawn_extra_via(
        client: &Client,
        metrics_address: &str,
        relay: &crate::relay::Relay,
    ) -> Extra {
        let token = service_account_token(client).await;
        let port = metrics_address.rsplit(':').next().unwrap_or("0");
        let path = super::target_dir().join(format!("trainset-e2e-relayed-{port}.kubeconfig"));
        write_token_kubeconfig_via(&path, &token, &format!("https://{}", relay.address()));
        let (log, err) = log_files();
        Extra(spawn(&path, metrics_address, &[], log, err))
    }
}

/// `GET http://<address><path>`: the status code and body, or `None` if nothing answers.
pub async fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(address),
    )
    .await
    .ok()?
    .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
        .await
        .ok()?
        .ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// Whether the trainset serving `address` leads (its `trainset_leader` gauge is 1).
pub async fn leads(address: &str) -> bool {
    http_get(address, "/metrics")
        .await
        .is_some_and(|(code, body)| code == 200 && body.lines().any(|l| l == "trainset_leader 1"))
}

/// Waits until the trainset serving `address` leads and is ready (its watches have listed).
pub async fn wait_leading(address: &str, limit: Duration) {
    wait_for(limit, &format!("trainset on {address} to lead"), || async {
        let ready = http_get(address, "/readyz").await?.0 == 200;
        (ready && leads(address).await).then_some(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// Every line of `e2e/ports` is a comment or `name=offset`, no name or offset twice, and
    /// every offset below 1,000 (two clusters' bases 1,000 apart never share a port).
    #[test]
    fn the_port_plan_names_each_port_once() {
        let (mut names, mut offsets) = (BTreeSet::new(), BTreeSet::new());
        for line in super::PORTS.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, offset) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("not name=offset: {line}"));
            let offset: u16 = offset.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(offset < 1000, "{line}");
            assert!(names.insert(name), "{name} twice");
            assert!(offsets.insert(offset), "offset {offset} twice");
        }
        assert_eq!(super::offset("apiserver"), 443);
    }
}
