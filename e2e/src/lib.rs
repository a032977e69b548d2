//! Helpers for end-to-end tests against the local control plane that `e2e/cluster up` starts.
//!
//! Every test that needs the cluster is marked `#[ignore]` with the reason, so a plain
//! `cargo test --workspace` reports them as ignored instead of failing or pretending to pass; the
//! repository's test command (`./run-tests`) brings the cluster up and runs them with `--ignored`.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::Value;

/// The repository root (this crate lives in `e2e/`).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A client for the cluster named by `KUBECONFIG` (see `e2e/cluster env`).
pub async fn client() -> Client {
    let config = Config::infer()
        .await
        .unwrap_or_else(|e| panic!("no cluster to test against ({e}); run `eval \"$(e2e/cluster env)\"` after `e2e/cluster up`"));
    Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// A namespace created for one test and deleted by [`TestNamespace::delete`].
pub struct TestNamespace {
    pub name: String,
    client: Client,
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
        }
    }

    pub async fn delete(self) {
        let namespaces: Api<Namespace> = Api::all(self.client);
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
/// these tests pluralises by appending `s` to its lower-case name.
pub fn dynamic_api(client: &Client, object: &Value, namespace: Option<&str>) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource =
        ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_ascii_lowercase()));
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

/// Polls `check` every 250 ms until it returns `Some`, or panics after `limit` describing `what`.
pub async fn wait_for<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
