//! Installing trainset as a cluster operator does, upgrading it with jobs in flight, and
//! uninstalling it: with kustomize (`deploy/`, from the previous release) and with the Helm chart
//! (`deploy/chart/`, helm built from its Go module). The pods the Deployment creates are run from
//! the image (`e2e/image`) by `trainset_e2e::pod`, since KWOK's nodes run nothing. These tests
//! delete and recreate trainset's namespace and CRDs: they run alone (`run-tests` stops the shared
//! operator first, `--test-threads=1`) and leave the CRDs installed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use jobset_types::JobSet;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset::kinds::{Served, Visitor, visit_all};
use trainset_e2e::kubelet::{self, Kubelet};
use trainset_e2e::pod::{RunningPod, Runtime, proc_status, root_mount_options};
use trainset_e2e::{
    TestNamespace, client, create, create_examples, delay, http_get, install_crds, operator,
    repo_root, status, wait_established, wait_for, wait_state, yaml_documents,
};

/// Port offset of the installed pod's metrics endpoint (see `trainset_e2e::loopback`).
const PORT: &str = "install_pod";
/// Those of the rollout test's pods: two replicas, and one surge pod of each rollout.
const PROBED_PORTS: [&str; 4] = [
    "probed_pod_0",
    "probed_pod_1",
    "probed_pod_2",
    "probed_pod_3",
];
/// trainset's Lease duration (`src/leader.rs`).
const LEASE: Duration = Duration::from_secs(15);
/// The install namespace of the kustomize base, and the Helm release's.
const NAMESPACE: &str = operator::NAMESPACE;
const RELEASE: &str = "trainset";
/// The image `e2e/image` builds by default.
const IMAGE_REPOSITORY: &str = "localhost/trainset";
const IMAGE_TAG: &str = "e2e";
/// How long in-flight jobs' pods would run: longer than any test, which ends them itself
/// (`InFlight::end_pods`) once what they must live through is over.
const UNTIL_ENDED: u32 = 3600;
/// How long in-flight jobs may take to end once their pods are told to.
const ENDING: Duration = Duration::from_secs(90);
/// The labels Helm's chart adds to the kustomize base's objects (its bookkeeping).
const HELM_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// kubectl of the local control plane (on `PATH` after `e2e/cluster env`).
fn kubectl(args: &[&str]) -> String {
    run(Command::new("kubectl").args(args))
}

/// The last line a script prints: the path it built or prepared.
fn script_output(script: &str, args: &[&str]) -> PathBuf {
    let out = run(Command::new(repo_root().join(script)).args(args));
    PathBuf::from(out.lines().last().unwrap_or_default().trim())
}

/// Helm, built from its Go module the first time a test needs it.
fn helm_command() -> Command {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    Command::new(HELM.get_or_init(|| script_output("e2e/build-upstream", &["helm"])))
}

fn helm(args: &[&str]) -> String {
    run(helm_command().args(args))
}

fn chart() -> String {
    repo_root().join("deploy/chart").display().to_string()
}

/// `--set` arguments of the Helm installs here: the image `e2e/image` built.
fn image_values() -> String {
    format!("image.repository={IMAGE_REPOSITORY},image.tag={IMAGE_TAG}")
}

/// A kustomize overlay of `deploy/` that sets the image, as a user's overlay would (kustomize
/// takes the base by a relative path only); `extra` is added to its kustomization.
fn overlay_named(name: &str, extra: &str) -> PathBuf {
    let dir = repo_root().join("target").join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let text = format!(
        "resources:\n- ../../deploy\nimages:\n- name: trainset\n  newName: {IMAGE_REPOSITORY}\n  newTag: {IMAGE_TAG}\n{extra}"
    );
    std::fs::write(dir.join("kustomization.yaml"), text).expect("kustomization.yaml");
    dir
}

fn overlay() -> PathBuf {
    overlay_named("install-e2e", "")
}

/// [`overlay`], with pods the tests' kubelet serves: their Ready condition is their probe's.
fn probed_overlay() -> PathBuf {
    let label = format!(
        "labels:\n- pairs: {{{}: {}}}\n  includeTemplates: true\n",
        kubelet::LABEL,
        kubelet::PROBED
    );
    overlay_named("install-e2e-probed", &label)
}

fn crd_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("CRD file");
        for crd in yaml_documents(&text) {
            names.push(crd["metadata"]["name"].as_str().expect("name").to_owned());
        }
    }
    names
}

/// `kubectl apply --server-side -f <dir>`, as the README installs CRDs, and waits until each is
/// established.
async fn apply_crds(client: &Client, dir: &Path) {
    kubectl(&["apply", "--server-side", "-f", &dir.display().to_string()]);
    wait_established(client, &crd_names(dir)).await;
}

/// Nothing of trainset's installed: no namespace, no cluster RBAC, no CRDs (so no training jobs).
async fn clean_slate(client: &Client) {
    let crds = repo_root().join("crds").display().to_string();
    kubectl(&["delete", "-f", &crds, "--ignore-not-found", "--wait=true"]);
    kubectl(&[
        "delete",
        "clusterrole,clusterrolebinding",
        "trainset",
        "--ignore-not-found",
    ]);
    kubectl(&[
        "delete",
        "namespace",
        NAMESPACE,
        "--ignore-not-found",
        "--wait=false",
    ]);
    namespace_gone(client).await;
}

async fn namespace_gone(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_for(
        Duration::from_secs(120),
        &format!("namespace {NAMESPACE} to be gone"),
        || async {
            namespaces
                .get_opt(NAMESPACE)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}

/// Waits until `kubectl rollout status` says the Deployment has rolled out.
fn rollout_status(timeout: &str) {
    kubectl(&[
        "rollout",
        "status",
        "deployment/trainset",
        "-n",
        NAMESPACE,
        &format!("--timeout={timeout}"),
    ]);
}

/// Waits for the Deployment's rollout and returns one of its current pods not in `other_than`.
async fn deployment_pod(client: &Client, other_than: &[String]) -> Pod {
    rollout_status("120s");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let selector = ListParams::default().labels("app.kubernetes.io/name=trainset");
    wait_for(
        Duration::from_secs(60),
        "a running pod of the new rollout",
        || async {
            let list = pods.list(&selector).await.ok()?;
            list.items.into_iter().find(|pod| {
                pod.metadata.deletion_timestamp.is_none()
                    && !other_than.contains(&pod.name_any())
                    && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
        },
    )
    .await
}

/// The pod holds the Lease under its own name and is ready (its readiness probe's path answers
/// 200: a standby would too, a leader once its watches listed) and alive.
async fn leads(client: &Client, pod: &RunningPod) {
    let what = format!(
        "pod {} to lead and be ready on {}{} (pod-{}.log in the target directory)",
        pod.name, pod.address, pod.readiness, pod.name
    );
    wait_for(Duration::from_secs(60), &what, || async {
        let holder = lease_holder(client, &pod.namespace).await;
        let ready = http_get(&pod.address, &pod.readiness).await?.0 == 200;
        (ready && holder.as_deref() == Some(pod.name.as_str())).then_some(())
    })
    .await;
    let (code, _) = http_get(&pod.address, &pod.liveness)
        .await
        .expect("liveness probe");
    assert_eq!(code, 200, "{}", pod.liveness);
}

/// Who holds the trainset Lease; `None` before any replica made it, or while it is released.
async fn lease_holder(client: &Client, namespace: &str) -> Option<String> {
    lease(client, namespace).await?.holder_identity
}

async fn lease(client: &Client, namespace: &str) -> Option<LeaseSpec> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get_opt("trainset")
        .await
        .expect("the trainset Lease");
    lease?.spec
}

/// As the pod's security context asks: its UID and GID, no capabilities, no privilege
/// escalation, a read-only root file system.
fn confined(pod: &RunningPod) {
    let (uid, gid) = pod.user.expect("the pod spec names a user");
    let pid = pod.container_pid();
    assert_eq!(proc_status(&pid, "Uid"), vec![uid.to_string(); 4].join(" "));
    assert_eq!(proc_status(&pid, "Gid"), vec![gid.to_string(); 4].join(" "));
    assert_eq!(proc_status(&pid, "CapEff"), "0000000000000000");
    assert_eq!(proc_status(&pid, "NoNewPrivs"), "1");
    let root = root_mount_options(&pid);
    assert!(
        root.split(',').any(|option| option == "ro"),
        "root file system mounted {root}"
    );
}

/// Each v1 kind's `framework` metrics label.
struct Frameworks(Vec<(String, &'static str)>);

impl Visitor for Frameworks {
    fn v1<K: Served>(&mut self) {
        self.0.push((K::kind(&()).into_owned(), K::FRAMEWORK));
    }

    /// A TrainJob's label is its runtime's framework, not its kind's.
    fn trainer(&mut self) {}
}

/// Every example runs to `Succeeded`, and `/metrics` has a reconcile series per framework.
async fn runs_every_example(client: &Client, pod: &RunningPod) {
    let ns = TestNamespace::create(client, "install").await;
    let jobs = create_examples(client, &ns.name).await;
    assert!(jobs.len() >= 10, "{} examples", jobs.len());
    for (manifest, api) in &jobs {
        let name = manifest["metadata"]["name"].as_str().expect("name");
        wait_state(api, name, "Succeeded", Duration::from_secs(120)).await;
    }
    let (code, metrics) = http_get(&pod.address, "/metrics").await.expect("/metrics");
    assert_eq!(code, 200);
    let mut frameworks = Frameworks(Vec::new());
    visit_all(&mut frameworks);
    for (kind, framework) in frameworks.0 {
        let series =
            format!("trainset_reconcile_duration_seconds_count{{framework=\"{framework}\"}}");
        assert!(metrics.contains(&series), "{kind}: no {series} in /metrics");
    }
    ns.delete().await;
}

/// The checks every install passes.
async fn serves(client: &Client, pod: &RunningPod) {
    leads(client, pod).await;
    confined(pod);
    runs_every_example(client, pod).await;
}

/// Jobs whose pods run until the test ends them: three examples of different layouts (an MPIJob
/// with its hostfile and SSH key among them), every pod kept when they end.
struct InFlight {
    ns: TestNamespace,
    jobs: Vec<(String, Api<DynamicObject>)>,
    /// Per job: its uid, its JobSet's uid, and its pods' uids.
    uids: BTreeMap<String, (String, String, Vec<String>)>,
}

fn in_flight_manifest(file: &str) -> Value {
    let path = repo_root().join("examples").join(file);
    let mut manifest = yaml_documents(&std::fs::read_to_string(&path).expect("example"))
        .pop()
        .expect("one manifest");
    let spec = manifest["spec"].as_object_mut().expect("spec");
    for (field, replicas) in spec.iter_mut() {
        if !field.ends_with("ReplicaSpecs") {
            continue;
        }
        for replica in replicas
            .as_object_mut()
            .expect("replica specs")
            .values_mut()
        {
            replica["template"]["metadata"] = delay(UNTIL_ENDED);
        }
    }
    spec.insert("runPolicy".to_owned(), json!({"cleanPodPolicy": "None"}));
    manifest
}

/// Selects the pods (or Jobs) of one JobSet.
fn of_jobset(name: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "{}={name}",
        jobset_types::keys::label::JOBSET_NAME
    ))
}

async fn pod_uids(client: &Client, ns: &str, jobset: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = of_jobset(jobset);
    let mut uids: Vec<String> = pods
        .list(&selector)
        .await
        .expect("pods")
        .items
        .iter()
        .filter_map(ResourceExt::uid)
        .collect();
    uids.sort();
    uids
}

impl InFlight {
    /// Creates the jobs and waits until every one runs with all its pods running.
    async fn start(client: &Client) -> Self {
        let ns = TestNamespace::create(client, "inflight").await;
        let mut jobs = Vec::new();
        for file in [
            "pytorchjob-master-worker.yaml",
            "tfjob-ps-worker.yaml",
            "mpijob.yaml",
        ] {
            let manifest = in_flight_manifest(file);
            let name = manifest["metadata"]["name"]
                .as_str()
                .expect("name")
                .to_owned();
            let api = create(client, &ns.name, &manifest).await;
            jobs.push((name, api));
        }
        let mut uids = BTreeMap::new();
        let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &ns.name);
        for (name, api) in &jobs {
            wait_state(api, name, "Running", Duration::from_secs(60)).await;
            let job = api.get(name).await.expect("job");
            let jobset = jobsets.get(name).await.expect("its JobSet");
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
            let selector = of_jobset(name);
            let expected = jobset
                .spec
                .replicated_jobs
                .iter()
                .map(|r| {
                    r.replicas.unwrap_or(1)
                        * r.template
                            .spec
                            .as_ref()
                            .and_then(|s| s.parallelism)
                            .unwrap_or(1)
                })
                .sum::<i32>();
            wait_for(
                Duration::from_secs(60),
                &format!("{expected} running pods of {name}"),
                || async {
                    let list = pods.list(&selector).await.ok()?;
                    let running = list
                        .items
                        .iter()
                        .filter(|p| {
                            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        })
                        .count();
                    (running == usize::try_from(expected).ok()?).then_some(())
                },
            )
            .await;
            let record = (
                job.uid().expect("uid"),
                jobset.uid().expect("uid"),
                pod_uids(client, &ns.name, name).await,
            );
            uids.insert(name.clone(), record);
        }
        Self { ns, jobs, uids }
    }

    /// Every pod's program ends now: KWOK completes a pod its delay after the pod's last change,
    /// so a delay of 0 set now completes it at once.
    async fn end_pods(&self, client: &Client) {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns.name);
        let now = delay(0);
        for pod in pods.list(&ListParams::default()).await.expect("pods").items {
            pods.patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": now })),
            )
            .await
            .unwrap_or_else(|e| panic!("end pod {}: {e}", pod.name_any()));
        }
    }

    /// None lost, none restarted: every job and JobSet is the one recorded at the start, no pod
    /// is new, no JobSet restarted, no container restarted. `mid_flight`: every job still runs,
    /// with every pod it started with (when a job ends, JobSet deletes the pods still running).
    async fn unchanged(&self, client: &Client, mid_flight: bool) {
        let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &self.ns.name);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns.name);
        for (name, api) in &self.jobs {
            let (job_uid, jobset_uid, pod_uids_then) = &self.uids[name];
            let job = api
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{name} lost: {e}"));
            assert_eq!(job.uid().as_ref(), Some(job_uid), "{name} was recreated");
            let state = status(&job)["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let states: &[&str] = if mid_flight {
                &["Running"]
            } else {
                &["Running", "Succeeded"]
            };
            assert!(
                states.contains(&state.as_str()),
                "{name} is {state}: {}",
                status(&job)
            );
            let jobset = jobsets
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{name}'s JobSet: {e}"));
            assert_eq!(
                jobset.uid().as_ref(),
                Some(jobset_uid),
                "{name}'s JobSet was recreated"
            );
            let restarts = jobset.status.as_ref().map_or(0, |s| s.restarts);
            assert_eq!(restarts, 0, "{name}'s JobSet restarted");
            let pods_now = pod_uids(client, &self.ns.name, name).await;
            let new: Vec<&String> = pods_now
                .iter()
                .filter(|uid| !pod_uids_then.contains(uid))
                .collect();
            assert!(new.is_empty(), "{name} has new pods {new:?}");
            if mid_flight {
                assert_eq!(&pods_now, pod_uids_then, "{name} lost pods mid-flight");
            }
            let selector = of_jobset(name);
            for pod in pods.list(&selector).await.expect("pods").items {
                let restarted: i32 = pod
                    .status
                    .iter()
                    .flat_map(|s| s.container_statuses.iter().flatten())
                    .map(|c| c.restart_count)
                    .sum();
                assert_eq!(restarted, 0, "{} restarted a container", pod.name_any());
            }
        }
    }

    /// Once their pods end, every job succeeds, and is still the one it was.
    async fn succeed(self, client: &Client) {
        self.end_pods(client).await;
        for (name, api) in &self.jobs {
            wait_state(api, name, "Succeeded", ENDING).await;
        }
        self.unchanged(client, false).await;
        self.ns.delete().await;
    }
}

/// An upgrade's rollout as the kubelet lives it: once the Deployment has rolled out and the old
/// pod is gone, the old container gets SIGTERM (it must exit 0 and release the Lease) and a pod
/// of the new ReplicaSet starts and leads.
async fn hand_over(client: &Client, mut old: RunningPod) -> RunningPod {
    let pod = deployment_pod(client, std::slice::from_ref(&old.name)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        Duration::from_secs(60),
        &format!("the old pod {} to be deleted", old.name),
        || async { pods.get_opt(&old.name).await.ok()?.is_none().then_some(()) },
    )
    .await;
    let exit = old.terminate().await;
    assert!(exit.success(), "the old pod {} exited {exit}", old.name);
    let holder = lease_holder(client, NAMESPACE).await;
    assert_ne!(holder, Some(old.name.clone()), "the old pod kept the Lease");
    drop(old);
    let new = RunningPod::start(client, &pod, Runtime::Image, PORT).await;
    leads(client, &new).await;
    new
}

/// What uninstalling does, in the two steps docs/operating.md gives. Removing the operator leaves
/// the training jobs and their JobSets alone: the JobSet controller runs them to the end, and
/// their status stays as trainset last wrote it. Deleting the CRDs deletes every training job,
/// and the garbage collector deletes their JobSets and pods.
async fn uninstall(client: &Client, mut running: RunningPod, remove_operator: impl FnOnce()) {
    let jobs = InFlight::start(client).await;
    remove_operator();
    namespace_gone(client).await;
    // The namespace took the Lease with it: a leader that noticed first has stopped leading and
    // exited 1 ("lost the Lease"), one that had not exits 0 on SIGTERM. Either way it is gone.
    let exit = running.terminate().await;
    assert!(
        exit.success() || exit.code() == Some(1),
        "pod {} exited {exit}",
        running.name
    );
    drop(running);

    jobs.end_pods(client).await;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &jobs.ns.name);
    for (name, api) in &jobs.jobs {
        wait_for(
            ENDING,
            &format!("{name}'s JobSet to complete without trainset"),
            || async {
                let jobset = jobsets.get(name).await.ok()?;
                let status = jobset.status?;
                (status.terminal_state.as_deref() == Some("Completed")).then_some(())
            },
        )
        .await;
        let job = api.get(name).await.expect("the job is still there");
        assert_eq!(
            status(&job)["state"],
            "Running",
            "nobody reports it any more"
        );
    }
    jobs.unchanged(client, false).await;

    let crds = repo_root().join("crds").display().to_string();
    kubectl(&["delete", "-f", &crds, "--wait=true"]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &jobs.ns.name);
    wait_for(
        Duration::from_secs(120),
        "the garbage collector to delete the JobSets and pods",
        || async {
            let left = jobsets
                .list_metadata(&ListParams::default())
                .await
                .ok()?
                .items
                .len()
                + pods
                    .list_metadata(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len();
            (left == 0).then_some(())
        },
    )
    .await;
    jobs.ns.delete().await;
    // The tests after this one need the CRDs.
    install_crds(client).await;
}

#[tokio::test]
#[ignore = "needs the local control plane and the image: e2e/cluster up; e2e/image"]
async fn kustomize_install_upgrade_from_the_previous_release_and_uninstall() {
    let client = client().await;
    clean_slate(&client).await;

    // The previous release, as its README said: CRDs, then the kustomize base.
    let previous = script_output("e2e/previous-release", &[]);
    apply_crds(&client, &previous.join("crds")).await;
    kubectl(&[
        "apply",
        "--server-side",
        "-k",
        &previous.join("deploy").display().to_string(),
    ]);
    // The previous release's ClusterRole lacks `*/finalizers`, without which this apiserver's
    // OwnerReferencesPermissionEnforcement refuses every JobSet it creates: a cluster with that
    // plugin needs today's ClusterRole (a superset) before it can run the previous release.
    let clusterrole = repo_root().join("deploy/clusterrole.yaml");
    kubectl(&[
        "apply",
        "--server-side",
        "-f",
        &clusterrole.display().to_string(),
    ]);
    let pod = deployment_pod(&client, &[]).await;
    let binary = previous.join("trainset");
    let old = RunningPod::start(&client, &pod, Runtime::Binary(&binary), PORT).await;
    leads(&client, &old).await;

    // Upgrade under live jobs: the CRDs first, then the base with the new image.
    let in_flight = InFlight::start(&client).await;
    apply_crds(&client, &repo_root().join("crds")).await;
    let current = overlay();
    kubectl(&[
        "apply",
        "--server-side",
        "-k",
        &current.display().to_string(),
    ]);
    let running = hand_over(&client, old).await;
    in_flight.unchanged(&client, true).await;

    // The upgraded install passes every check, and the jobs it took over succeed.
    serves(&client, &running).await;
    in_flight.succeed(&client).await;

    uninstall(&client, running, || {
        kubectl(&[
            "delete",
            "-k",
            &current.display().to_string(),
            "--wait=false",
        ]);
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane, the image (e2e/image) and helm (e2e/build-upstream helm)"]
async fn helm_install_upgrade_and_uninstall() {
    let client = client().await;
    clean_slate(&client).await;

    // The CRDs first, as the README says: the chart cannot carry them (docs/operating.md says why).
    apply_crds(&client, &repo_root().join("crds")).await;
    let values = image_values();
    helm(&[
        "install",
        RELEASE,
        &chart(),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--set",
        &values,
    ]);
    let pod = deployment_pod(&client, &[]).await;
    let running = RunningPod::start(&client, &pod, Runtime::Image, PORT).await;
    serves(&client, &running).await;

    // An upgrade that changes the pod template rolls the Deployment under live jobs.
    let in_flight = InFlight::start(&client).await;
    helm(&[
        "upgrade",
        RELEASE,
        &chart(),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "logFormat=text",
    ]);
    let running = hand_over(&client, running).await;
    in_flight.unchanged(&client, true).await;
    in_flight.succeed(&client).await;

    // Helm keeps the namespace it created; the README's uninstall deletes it too.
    uninstall(&client, running, || {
        helm(&["uninstall", RELEASE, "--namespace", NAMESPACE, "--wait"]);
        kubectl(&["delete", "namespace", NAMESPACE, "--wait=false"]);
    })
    .await;
}

/// The Deployment's pods once its rollout has finished, as their own probes say: waits until
/// every replica of the newest ReplicaSet is Ready (the tests' kubelet sets Ready from the
/// readiness probe, so a standby that did not answer would hold the rollout up), then checks
/// that exactly one of them leads: it holds the Lease, and it alone says `trainset_leader 1`.
/// Returns the leader's and the standby's names and addresses.
async fn rolled_out(client: &Client, kubelet: &Kubelet) -> ((String, String), (String, String)) {
    rollout_status("180s");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    wait_for(
        Duration::from_secs(60),
        "both replicas Ready and exactly one leading",
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let ready: Vec<String> = list
                .items
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                .filter(|pod| kubelet::is_ready(pod))
                .map(ResourceExt::name_any)
                .collect();
            let running = kubelet.running().await;
            if ready.len() != 2 || !ready.iter().all(|n| running.iter().any(|(r, _)| r == n)) {
                return None;
            }
            let mut leading = Vec::new();
            let mut standing_by = Vec::new();
            for (name, address) in running.into_iter().filter(|(n, _)| ready.contains(n)) {
                if trainset_e2e::leads(&address).await {
                    leading.push((name, address));
                } else {
                    standing_by.push((name, address));
                }
            }
            let holder = lease_holder(client, NAMESPACE).await?;
            match (leading.as_slice(), standing_by.as_slice()) {
                ([leader], [standby]) if leader.0 == holder => {
                    Some((leader.clone(), standby.clone()))
                }
                _ => None,
            }
        },
    )
    .await
}

/// The shipped Deployment (two replicas, the default RollingUpdate strategy: one pod more, none
/// fewer) on pods whose readiness is real: it rolls out with both replicas Ready and one leader,
/// and so does an upgrade. Then the leader's container is killed with jobs in flight: the
/// standby leads within the Lease, and no job is lost, restarted or made twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane and the image: e2e/cluster up; e2e/image"]
async fn install_of_two_replicas_rolls_out_ready_with_one_leader_and_fails_over_without_loss() {
    let client = client().await;
    clean_slate(&client).await;
    apply_crds(&client, &repo_root().join("crds")).await;
    let overlay = probed_overlay();
    let overlay = overlay.display().to_string();
    kubectl(&["apply", "--server-side", "-k", &overlay]);
    let deployment = kubectl(&[
        "get",
        "deployment/trainset",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.replicas} {.spec.strategy.type} {.spec.strategy.rollingUpdate.maxSurge} {.spec.strategy.rollingUpdate.maxUnavailable}",
    ]);
    assert_eq!(
        deployment, "2 RollingUpdate 25% 25%",
        "the shipped Deployment"
    );
    let kubelet = Kubelet::start(client.clone(), NAMESPACE, PROBED_PORTS.to_vec());
    let (first_leader, first_standby) = rolled_out(&client, &kubelet).await;

    // An upgrade: a changed pod template rolls both replicas over, one surge pod at a time.
    let upgrade =
        r#"{"spec":{"template":{"metadata":{"annotations":{"trainset.io/e2e-rollout":"2"}}}}}"#;
    kubectl(&[
        "patch",
        "deployment/trainset",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        upgrade,
    ]);
    let (leader, standby) = rolled_out(&client, &kubelet).await;
    for old in [&first_leader.0, &first_standby.0] {
        assert!(
            leader.0 != *old && standby.0 != *old,
            "{old} is of the old ReplicaSet"
        );
    }

    // Failover: the leader's container dies with jobs in flight.
    let jobs = InFlight::start(&client).await;
    let killed = std::time::Instant::now();
    kubelet.kill(&leader.0).await;
    let renewed = lease(&client, NAMESPACE)
        .await
        .and_then(|l| l.renew_time)
        .expect("the dead leader's last renewal");
    let what = format!("the standby {} to lead", standby.0);
    wait_for(LEASE * 2, &what, || async {
        let holder = lease_holder(&client, NAMESPACE).await?;
        (holder == standby.0 && trainset_e2e::leads(&standby.1).await).then_some(())
    })
    .await;
    let failover = killed.elapsed();
    let acquired = lease(&client, NAMESPACE)
        .await
        .and_then(|l| l.acquire_time)
        .expect("the standby's acquisition");
    // No replica may take a Lease before it lapses: the lease duration after the standby saw
    // the last renewal, by its own clock (as client-go's elector). It looks every retry period,
    // so it sees the renewal within one and takes the lapsed Lease within another.
    let after_renewal = acquired.0.duration_since(renewed.0);
    println!(
        "rollout: the standby led {:.1}s after the leader was killed, {:.1}s after its last \
         renewal (Lease {}s)",
        failover.as_secs_f64(),
        after_renewal.as_secs_f64(),
        LEASE.as_secs()
    );
    let latest =
        k8s_openapi::jiff::SignedDuration::try_from(LEASE + 2 * trainset::leader::RETRY_PERIOD)
            .expect("a duration");
    assert!(
        after_renewal >= k8s_openapi::jiff::SignedDuration::try_from(LEASE).expect("a duration"),
        "taken before the Lease lapsed: {after_renewal:?}"
    );
    assert!(after_renewal <= latest, "{after_renewal:?}");
    jobs.unchanged(&client, true).await;
    jobs.succeed(&client).await;

    kubectl(&["delete", "-k", &overlay, "--wait=false"]);
    namespace_gone(&client).await;
    drop(kubelet);
}

/// The objects of a rendering, by kind, namespace and name, without Helm's bookkeeping labels.
fn objects(yaml: &str) -> BTreeMap<String, Value> {
    yaml_documents(yaml)
        .into_iter()
        .map(|mut object| {
            if let Some(labels) = object["metadata"]["labels"].as_object_mut() {
                for label in HELM_LABELS {
                    labels.remove(label);
                }
                if labels.is_empty() {
                    object["metadata"]
                        .as_object_mut()
                        .expect("metadata")
                        .remove("labels");
                }
            }
            let key = format!(
                "{}/{}/{}",
                object["kind"].as_str().unwrap_or_default(),
                object["metadata"]["namespace"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, object)
        })
        .collect()
}

fn helm_template(set: &[&str]) -> BTreeMap<String, Value> {
    let mut args = vec!["template", RELEASE, "--namespace", NAMESPACE];
    for value in set {
        args.extend(["--set", value]);
    }
    let chart = chart();
    args.push(&chart);
    objects(&helm(&args))
}

#[test]
#[ignore = "needs kubectl (e2e/cluster env) and helm (e2e/build-upstream helm)"]
fn the_chart_renders_what_kustomize_renders() {
    let mut expected = objects(&kubectl(&[
        "kustomize",
        &repo_root().join("deploy").display().to_string(),
    ]));
    // Helm installs into a namespace it is given (`--create-namespace`); the base creates its own.
    assert!(
        expected
            .remove(&format!("Namespace//{NAMESPACE}"))
            .is_some()
    );
    let rendered = helm_template(&[]);
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (key, object) in &expected {
        assert_eq!(&rendered[key], object, "{key}");
    }

    // The chart's appVersion is trainset's version.
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let version = cargo
        .lines()
        .find_map(|line| line.strip_prefix("version = "))
        .expect("a package version");
    let chart_yaml =
        std::fs::read_to_string(repo_root().join("deploy/chart/Chart.yaml")).expect("Chart.yaml");
    let chart_meta = yaml_documents(&chart_yaml).pop().expect("Chart.yaml");
    assert_eq!(
        format!(
            "\"{}\"",
            chart_meta["appVersion"].as_str().unwrap_or_default()
        ),
        version
    );
}

#[test]
#[ignore = "needs helm (e2e/build-upstream helm)"]
fn every_chart_value_reaches_the_objects() {
    let rendered = helm_template(&[
        "image.repository=registry.example/ml/trainset,image.tag=0.1.0,image.pullPolicy=IfNotPresent",
        "replicas=1,leaderElection.enabled=false",
        "resources.limits.memory=1Gi,resources.requests.cpu=500m",
        "metrics.port=9090,metrics.service=false",
        "logFormat=text,clusterDomain=cluster.local,gangScheduler=native",
        "mpiKubectlDeliveryImage=registry.example/kubectl-delivery:1",
        "nodeSelector.pool=system",
    ]);
    let deployment = &rendered[&format!("Deployment/{NAMESPACE}/trainset")];
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/ml/trainset:0.1.0");
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        container["args"],
        json!([
            "run",
            "--log-format=text",
            "--metrics-address=0.0.0.0:9090",
            "--leader-elect=false",
            "--cluster-domain=cluster.local",
            "--gang-scheduler=native",
            "--mpi-kubectl-delivery-image=registry.example/kubectl-delivery:1"
        ])
    );
    assert_eq!(container["ports"][0]["containerPort"], 9090);
    assert_eq!(container["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(container["resources"]["requests"]["cpu"], "500m");
    assert_eq!(pod["nodeSelector"]["pool"], "system");
    // No Lease, no Lease permissions; no metrics Service.
    for absent in [
        format!("Role/{NAMESPACE}/trainset-leader-election"),
        format!("RoleBinding/{NAMESPACE}/trainset-leader-election"),
        format!("Service/{NAMESPACE}/trainset-metrics"),
    ] {
        assert!(!rendered.contains_key(&absent), "{absent} rendered");
    }

    // Two replicas without a Lease would both reconcile: the chart refuses.
    let chart = chart();
    let output = helm_command()
        .args([
            "template",
            RELEASE,
            &chart,
            "--set",
            "leaderElection.enabled=false",
        ])
        .output()
        .expect("helm");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("leaderElection.enabled=false needs replicas: 1"),
        "{stderr}"
    );
}
