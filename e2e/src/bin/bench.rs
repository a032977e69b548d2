//! Side by side on the local control plane: the same N PyTorchJobs (1 Master + 3 Workers) run
//! through trainset (release build), as their compiled JobSets created directly (the floor), and
//! with `--peers` through training-operator v1.9.4 and as TrainJobs through Trainer v2.3.0. Then a
//! steady state of many live suspended jobs. Prints a table, then `key=value` lines.
//!
//! Needs `e2e/cluster up`; `e2e/bench` builds trainset (release, unless told otherwise), and runs
//! this with `TRAINSET_BIN` naming the binary measured.
//! Usage: `bench [--jobs N] [--peers | --peer NAME...] [--steady N] [--hold SECONDS] [--limit SECONDS]
//! [--warmup N] [--trials N]` (defaults: 1000 jobs, no peers, 10000 steady jobs held 60 s, a
//! warm-up of 200 jobs, 3 trials of trainset against the floor).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainset::compile::Options;
use trainset::kinds::compile_manifest;
use trainset_e2e::audit::Audit;
use trainset_e2e::{
    Peer, TestNamespace, client, cluster_state, condition, dry_run_create, dynamic_api, http_get,
    install_crds, loopback, operator, status, wait_for,
};

/// A progress line, stamped with the UTC time of day as the e2e scripts' logs are, so a run's
/// phases can be timed from its output.
macro_rules! say {
    ($($line:tt)*) => {{
        let day = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs() % 86_400);
        println!(
            "{:02}:{:02}:{:02} bench: {}",
            day / 3600,
            day / 60 % 60,
            day % 60,
            format_args!($($line)*)
        );
    }};
}

/// Creations in flight at once, for every run.
const IN_FLIGHT: usize = 16;
/// How long one phase may take before the bench gives up (`--limit`).
static LIMIT: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
const DEFAULT_LIMIT_SECONDS: u64 = 1200;

fn limit() -> Duration {
    *LIMIT.get_or_init(|| Duration::from_secs(DEFAULT_LIMIT_SECONDS))
}
/// The bench's own trainset listens on this port offset (see `trainset_e2e::loopback`).
const PORT: &str = "bench_operator";
/// Before the idle measurement the control plane settles: the JobSet and Job controllers take
/// minutes after the last job is taken in to write the status of 10,000 JobSets and 20,000 Jobs,
/// and the operator's watches see each of those writes. Settled is a window of [`SETTLE`] in which
/// the control plane used under [`QUIET_PCT`] % of a core (about 23 % at rest here: audit log,
/// Leases, Kueue); the wait ends after [`SETTLE_LIMIT`] in any case, and the hold then says what
/// the control plane did.
const SETTLE: Duration = Duration::from_secs(10);
const QUIET_PCT: f64 = 40.0;
const SETTLE_LIMIT: Duration = Duration::from_secs(600);
/// How long a peer's webhooks may take to admit its first job.
const ADMISSION_LIMIT: Duration = Duration::from_secs(120);
/// Pods per job: 1 Master + 3 Workers, or a TrainJob of 4 nodes.
const PODS_PER_JOB: usize = 4;
/// `USER_HZ`: the unit of /proc/<pid>/stat times, 100 on every Linux architecture.
const TICKS_PER_SECOND: f64 = 100.0;
/// The users the cluster's audit policy records (`e2e/cluster`).
const TRAINSET_USER: &str = "system:serviceaccount:trainset-system:trainset";
const CONTROL_PLANE: [&str; 7] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "jobset",
    "kueue",
];

struct Args {
    jobs: usize,
    warmup: usize,
    trials: usize,
    /// The peers measured after trainset, in [`PEERS`]' order.
    peers: Vec<&'static System>,
    steady: usize,
    hold: u64,
    limit: u64,
}

fn args() -> Args {
    let mut args = Args {
        jobs: 1000,
        warmup: 200,
        trials: 3,
        peers: Vec::new(),
        steady: 10_000,
        hold: 60,
        limit: DEFAULT_LIMIT_SECONDS,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut number = |flag: &str| -> u64 {
            let value = given.next().unwrap_or_default();
            value
                .parse()
                .unwrap_or_else(|e| panic!("{flag} {value:?}: {e}"))
        };
        match flag.as_str() {
            "--jobs" => args.jobs = number("--jobs") as usize,
            "--warmup" => args.warmup = number("--warmup") as usize,
            "--trials" => args.trials = (number("--trials") as usize).max(1),
            "--steady" => args.steady = number("--steady") as usize,
            "--hold" => args.hold = number("--hold"),
            "--limit" => args.limit = number("--limit"),
            "--peers" => args.peers = PEERS.iter().collect(),
            "--peer" => {
                let name = given.next().unwrap_or_default();
                let peer = PEERS.iter().find(|p| p.label == name);
                let labels = PEERS.map(|p| p.label);
                args.peers
                    .push(peer.unwrap_or_else(|| panic!("--peer {name:?}: one of {labels:?}")));
            }
            other => panic!(
                "unknown argument {other:?}; usage: bench [--jobs N] [--peers | --peer NAME...] [--steady N] [--hold SECONDS] [--limit SECONDS] [--warmup N] [--trials N]"
            ),
        }
    }
    args.peers
        .sort_by_key(|p| PEERS.iter().position(|q| q.label == p.label));
    args.peers.dedup_by_key(|p| p.label);
    args
}

/// The peers `--peers` measures, in this order; `--peer NAME` measures one.
static PEERS: [System; 2] = [
    System {
        label: "training-operator",
        operator: None,
        manifest: pytorchjob,
        done: succeeded,
        exists_pods: true,
    },
    System {
        label: "trainer",
        operator: None,
        manifest: trainjob,
        done: complete,
        exists_pods: false,
    },
];

fn pytorchjob(index: usize, suspend: bool) -> Value {
    let template = json!({"spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}});
    json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": format!("bench-{index}")},
           "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": template},
               "Worker": {"replicas": 3, "template": template}}}})
}

fn trainjob(index: usize, suspend: bool) -> Value {
    json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": format!("bench-{index}")},
           "spec": {"suspend": suspend, "runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"numNodes": PODS_PER_JOB}}})
}

/// Seconds since `start` at which each key was first complete.
struct Timeline {
    start: Instant,
    seen: HashMap<String, f64>,
    expected: usize,
}

impl Timeline {
    fn complete(&self) -> bool {
        self.seen.len() >= self.expected
    }

    /// p50 / p99 / last, or how many of how many got there within [`limit`].
    fn describe(&self) -> String {
        if !self.complete() {
            return format!(
                "{}/{} in {}s",
                self.seen.len(),
                self.expected,
                limit().as_secs()
            );
        }
        let (p50, p99, last) = self.summary();
        format!("{p50:.1}/{p99:.1}/{last:.1}")
    }

    /// (median, 99th percentile, last) in seconds.
    fn summary(&self) -> (f64, f64, f64) {
        let mut times: Vec<f64> = self.seen.values().copied().collect();
        times.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let index = ((times.len() as f64 * q).ceil() as usize).saturating_sub(1);
            times.get(index).copied().unwrap_or(f64::NAN)
        };
        (at(0.5), at(0.99), times.last().copied().unwrap_or(f64::NAN))
    }

    /// When the last one got there; infinite when not all did.
    fn last(&self) -> f64 {
        if self.complete() {
            self.summary().2
        } else {
            f64::INFINITY
        }
    }
}

/// What an observed object contributes: the key it counts for and a member of that key (a pod
/// of a job), or nothing.
type Marker = fn(&DynamicObject) -> Option<(String, String)>;

/// Watches `api` until `count` keys each have `needed` members, recording when each got there.
async fn observe(
    api: Api<DynamicObject>,
    start: Instant,
    count: usize,
    needed: usize,
    mark: Marker,
) -> Timeline {
    let mut timeline = Timeline {
        start,
        seen: HashMap::new(),
        expected: count,
    };
    let mut members: HashMap<String, HashSet<String>> = HashMap::new();
    let events = watcher(api, watcher::Config::default());
    let mut events = std::pin::pin!(events);
    let deadline = tokio::time::Instant::now() + limit();
    while timeline.seen.len() < count {
        let event = match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(_))) => continue,
            Ok(None) | Err(_) => break,
        };
        let object = match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => object,
            _ => continue,
        };
        if let Some((key, member)) = mark(&object) {
            let set = members.entry(key.clone()).or_default();
            set.insert(member);
            if set.len() >= needed {
                let at = timeline.start.elapsed().as_secs_f64();
                timeline.seen.entry(key).or_insert(at);
            }
        }
    }
    timeline
}

fn exists(object: &DynamicObject) -> Option<(String, String)> {
    Some((object.name_any(), String::new()))
}

fn true_condition(object: &DynamicObject, type_: &str) -> Option<(String, String)> {
    (condition(&status(object), type_)["status"] == "True").then(|| exists(object))?
}

fn completed(object: &DynamicObject) -> Option<(String, String)> {
    true_condition(object, "Completed")
}

fn succeeded(object: &DynamicObject) -> Option<(String, String)> {
    true_condition(object, "Succeeded")
}

fn complete(object: &DynamicObject) -> Option<(String, String)> {
    true_condition(object, "Complete")
}

fn suspended(object: &DynamicObject) -> Option<(String, String)> {
    true_condition(object, "Suspended")
}

/// A pod of a v1 job, counted for the job named by its `training.kubeflow.org/job-name`.
fn v1_pod(object: &DynamicObject) -> Option<(String, String)> {
    let job = object.labels().get("training.kubeflow.org/job-name")?;
    Some((job.clone(), object.name_any()))
}

/// Waits until `object` would be admitted, before a clock starts: admission webhooks answer from
/// caches that may trail a peer's start (Kueue's TrainJob webhook refused the first TrainJobs
/// with "runtime 'torch-distributed' not found" seconds after Trainer applied its runtimes).
async fn wait_admitted(client: &Client, object: &Value, namespace: &str) {
    wait_for(
        ADMISSION_LIMIT,
        "the first job to be admitted (dry run)",
        || async { dry_run_create(client, object, namespace).await.ok() },
    )
    .await;
}

/// Creates every object with `IN_FLIGHT` requests at once.
async fn submit(api: &Api<DynamicObject>, objects: &[Value]) {
    stream::iter(objects)
        .for_each_concurrent(IN_FLIGHT, |object| async move {
            let object: DynamicObject =
                serde_json::from_value(object.clone()).unwrap_or_else(|e| panic!("object: {e}"));
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| panic!("creating: {e}"));
        })
        .await;
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at field 3: utime is 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / TICKS_PER_SECOND
}

/// Seconds since the process started (from `/proc`, so a peer's start script is not counted).
fn process_age(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // `starttime`, field 22, is the 20th after the command name.
    let started = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse::<f64>().ok());
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
    let uptime = uptime
        .split_whitespace()
        .next()
        .and_then(|u| u.parse::<f64>().ok());
    match (started, uptime) {
        (Some(started), Some(uptime)) => uptime - started / TICKS_PER_SECOND,
        _ => f64::NAN,
    }
}

/// A `/proc/<pid>/status` size (`VmRSS` now, `VmHWM` peak) in MiB.
fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// A pid e2e/cluster recorded for `component`.
fn component_pid(component: &str) -> Option<u32> {
    let path = cluster_state()
        .join("pids")
        .join(format!("{component}.pid"));
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn control_plane_cpu() -> f64 {
    control_plane_cpu_by_component().iter().sum()
}

/// CPU seconds of each of [`CONTROL_PLANE`], in that order (0 for one not running).
fn control_plane_cpu_by_component() -> [f64; CONTROL_PLANE.len()] {
    CONTROL_PLANE.map(|c| component_pid(c).map_or(0.0, cpu_seconds))
}

/// API requests one user made, counted by the apiserver's audit log.
#[derive(Default)]
struct Requests {
    /// All but the Lease's, by verb.
    by_verb: BTreeMap<String, usize>,
    /// Leader election's renewals: a few per minute whatever the number of jobs, so they are
    /// counted apart from the requests per job (the peers run without leader election).
    leases: usize,
    /// Event writes, apart from the rest.
    events: usize,
    /// Creates, updates, patches and deletes of anything but events and Leases.
    writes: usize,
}

impl Requests {
    fn total(&self) -> usize {
        self.by_verb.values().sum()
    }
}

/// What `user` asked of the apiserver since `mark`, by the audit log.
fn requests_since(mark: &Audit, user: &str) -> Requests {
    let mut requests = Requests::default();
    for event in mark.since() {
        if event["user"]["username"] != user {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or_default().to_owned();
        let resource = event["objectRef"]["resource"].as_str().unwrap_or_default();
        if resource == "leases" {
            requests.leases += 1;
            continue;
        }
        if resource == "events" {
            requests.events += 1;
        } else if matches!(verb.as_str(), "create" | "update" | "patch" | "delete") {
            requests.writes += 1;
        }
        *requests.by_verb.entry(verb).or_default() += 1;
    }
    requests
}

/// One system running N jobs.
struct Run {
    label: &'static str,
    /// Seconds until the bench had created every job: the pace the control plane took them at.
    submitted: f64,
    /// Every JobSet exists (v1: every pod).
    exists: Timeline,
    /// Every job reported finished.
    done: Timeline,
    /// The operator's CPU seconds and peak RSS (MiB), and what it asked the apiserver.
    operator: Option<(f64, f64, Requests)>,
    control_plane_cpu: f64,
    /// The same, by component of [`CONTROL_PLANE`]: where an operator's extra cost lands.
    control_plane_cpu_by_component: [f64; CONTROL_PLANE.len()],
}

/// Many live suspended jobs held still.
struct Steady {
    label: &'static str,
    rss_mib: f64,
    idle_cpu_pct: f64,
    /// The control plane's CPU during the hold (% of a core): whether the cluster was idle too.
    control_plane_pct: f64,
    /// trainset's reconciles during the hold (its metrics): nothing changes the held jobs, so
    /// each was woken by the JobSet controller still working on their JobSets and Jobs.
    reconciles: Option<u64>,
    /// A fresh process over the held jobs: seconds until it reconciled them all once, and its
    /// peak RSS (MiB) by then.
    startup: Option<(f64, f64)>,
}

/// A system's operator process, owned by the bench so the steady state can restart it.
enum Operator {
    Trainset(operator::Extra),
    Peer(Peer),
}

impl Operator {
    async fn start(client: &Client, label: &'static str) -> Self {
        match label {
            "trainset" => Self::Trainset(start_trainset(client).await),
            peer => Self::Peer(Peer::start(peer)),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Self::Trainset(_) => "trainset",
            Self::Peer(peer) => peer.name(),
        }
    }

    fn pid(&self) -> u32 {
        match self {
            Self::Trainset(process) => process.pid(),
            Self::Peer(peer) => peer_pid(peer.name()),
        }
    }

    /// Stops the process for good (SIGTERM; a peer by `e2e/peers … stop`, which also takes
    /// its CRDs and jobs away).
    async fn stop(self) {
        match self {
            Self::Trainset(process) => process.stop().await,
            Self::Peer(peer) => drop(peer),
        }
    }

    /// Stops the process as a restart of its pod would (SIGTERM; a peer by `e2e/peers …
    /// pause`): its CRDs and the jobs it serves stay for the next process.
    async fn pause(self) {
        match self {
            Self::Trainset(process) => process.stop().await,
            Self::Peer(peer) => peer.pause(),
        }
    }
}

/// The name of the job created while the operator is stopped: it sorts after every held job, so
/// an operator that works through what it listed in order reaches it last.
const STARTUP_PROBE: &str = "zzz-startup-probe";

/// How one system is driven.
#[derive(Clone, Copy)]
struct System {
    label: &'static str,
    /// The operator's pid and its audit user; `None` for the direct run.
    operator: Option<(u32, &'static str)>,
    manifest: fn(usize, bool) -> Value,
    /// The object whose completion is watched, and how it counts.
    done: Marker,
    /// What shows the job's work exists: its JobSet (or its pods, `PODS_PER_JOB` of them).
    exists_pods: bool,
}

async fn run_jobs(client: &Client, system: &System, jobs: usize) -> Run {
    let ns = TestNamespace::create(client, &format!("bench-{}", system.label)).await;
    let manifests: Vec<Value> = (0..jobs).map(|i| (system.manifest)(i, false)).collect();
    let objects: Vec<Value> = match system.operator {
        Some(_) => manifests,
        None => manifests
            .iter()
            .map(|m| direct_jobset(m, &ns.name))
            .collect(),
    };
    let api = dynamic_api(client, &objects[0], Some(&ns.name));
    let jobsets = dynamic_api(client, &jobset_kind(), Some(&ns.name));
    let pods = dynamic_api(
        client,
        &json!({"apiVersion": "v1", "kind": "Pod"}),
        Some(&ns.name),
    );
    let (exists_api, needed, mark): (_, _, Marker) = if system.exists_pods {
        (pods, PODS_PER_JOB, v1_pod)
    } else {
        (jobsets, 1, exists)
    };
    wait_admitted(client, &objects[0], &ns.name).await;
    let audit = Audit::mark();
    let operator_cpu = system.operator.map(|(pid, _)| cpu_seconds(pid));
    let control_plane = control_plane_cpu_by_component();
    let start = Instant::now();
    let (submitted, exists, done) = tokio::join!(
        async {
            submit(&api, &objects).await;
            start.elapsed().as_secs_f64()
        },
        observe(exists_api, start, jobs, needed, mark),
        observe(api.clone(), start, jobs, 1, system.done),
    );
    let mut control_plane_cpu_by_component = control_plane_cpu_by_component();
    for (after, before) in control_plane_cpu_by_component.iter_mut().zip(control_plane) {
        *after -= before;
    }
    let operator = system
        .operator
        .zip(operator_cpu)
        .map(|((pid, user), before)| {
            (
                cpu_seconds(pid) - before,
                memory_mib(pid, "VmHWM"),
                requests_since(&audit, user),
            )
        });
    delete_and_wait(client, ns).await;
    let run = Run {
        label: system.label,
        submitted,
        exists,
        done,
        operator,
        control_plane_cpu: control_plane_cpu_by_component.iter().sum(),
        control_plane_cpu_by_component,
    };
    progress(&run);
    run
}

/// The API work every v1-compatible operator adds to the floor, done alone: per job the
/// PyTorchJob's creation, three status writes (server-side apply, as trainset writes them:
/// `Created`, `Running`, `Succeeded`) and two events, `IN_FLIGHT` jobs at once, with no operator
/// and no JobSet. Its control plane CPU is what trainset's runs can at least cost over the
/// floor's: the part of their difference that trainset cannot write away.
async fn writes_alone(client: &Client, jobs: usize) -> ([f64; CONTROL_PLANE.len()], f64) {
    let ns = TestNamespace::create(client, "bench-writes-alone").await;
    let manifest = pytorchjob(0, false);
    let api = dynamic_api(client, &manifest, Some(&ns.name));
    let events: Api<DynamicObject> = dynamic_api(
        client,
        &json!({"apiVersion": "v1", "kind": "Event"}),
        Some(&ns.name),
    );
    let before = control_plane_cpu_by_component();
    let start = Instant::now();
    stream::iter(0..jobs)
        .for_each_concurrent(IN_FLIGHT, |index| {
            let (api, events, namespace) = (api.clone(), events.clone(), ns.name.clone());
            async move {
                let object: DynamicObject = serde_json::from_value(pytorchjob(index, false))
                    .unwrap_or_else(|e| panic!("object: {e}"));
                let created = api
                    .create(&PostParams::default(), &object)
                    .await
                    .unwrap_or_else(|e| panic!("creating: {e}"));
                let name = created.name_any();
                let uid = created.uid().unwrap_or_default();
                for (step, status) in reported_statuses(&name).into_iter().enumerate() {
                    let body = json!({
                        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "metadata": {"name": name, "uid": uid}, "status": status,
                    });
                    api.patch_status(
                        &name,
                        &PatchParams::apply("trainset").force(),
                        &Patch::Apply(body),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
                    if step != 1 {
                        let event = event_on(&namespace, &name, &uid, step);
                        let event: DynamicObject =
                            serde_json::from_value(event).unwrap_or_else(|e| panic!("event: {e}"));
                        events
                            .create(&PostParams::default(), &event)
                            .await
                            .unwrap_or_else(|e| panic!("event on {name}: {e}"));
                    }
                }
            }
        })
        .await;
    let seconds = start.elapsed().as_secs_f64();
    let mut cpu = control_plane_cpu_by_component();
    for (after, before) in cpu.iter_mut().zip(before) {
        *after -= before;
    }
    delete_and_wait(client, ns).await;
    (cpu, seconds)
}

/// The statuses trainset writes for one bench job, in order, as it writes them.
fn reported_statuses(name: &str) -> [Value; 3] {
    let at = "2026-01-01T00:00:00Z";
    let condition = |type_: &str, status: &str, reason: &str, message: String| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastUpdateTime": at, "lastTransitionTime": at})
    };
    let created = condition(
        "Created",
        "True",
        "PyTorchJobCreated",
        format!("PyTorchJob {name} is created."),
    );
    let running = |status: &str| {
        condition(
            "Running",
            status,
            "PyTorchJobRunning",
            format!("PyTorchJob {name} is running."),
        )
    };
    let selector = |role: &str| {
        format!(
            "training.kubeflow.org/job-name={name},training.kubeflow.org/operator-name=pytorchjob-controller,training.kubeflow.org/replica-type={role}"
        )
    };
    let counts = |field: &str, master: u32, workers: u32| {
        json!({"Master": {field: master, "selector": selector("master")},
               "Worker": {field: workers, "selector": selector("worker")}})
    };
    [
        json!({"conditions": [created], "replicaStatuses": counts("active", 0, 0)}),
        json!({"conditions": [created, running("True")], "replicaStatuses": counts("active", 1, 3),
               "startTime": at}),
        json!({"conditions": [created, running("False"), condition("Succeeded", "True",
               "PyTorchJobSucceeded", format!("PyTorchJob {name} is successfully completed."))],
               "replicaStatuses": counts("succeeded", 1, 3), "startTime": at,
               "completionTime": at}),
    ]
}

/// The core/v1 Event trainset writes on a job's creation (`step` 0) or its success.
fn event_on(namespace: &str, name: &str, uid: &str, step: usize) -> Value {
    let at = "2026-01-01T00:00:00Z";
    let (reason, message) = if step == 0 {
        ("SuccessfulCreateJobSet", format!("Created JobSet {name}"))
    } else {
        (
            "PyTorchJobSucceeded",
            format!("PyTorchJob {name} is successfully completed."),
        )
    };
    json!({"apiVersion": "v1", "kind": "Event",
           "metadata": {"name": format!("{name}.{step}"), "namespace": namespace},
           "involvedObject": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                              "name": name, "namespace": namespace, "uid": uid},
           "reason": reason, "message": message, "type": "Normal", "count": 1,
           "firstTimestamp": at, "lastTimestamp": at,
           "source": {"component": "trainset"}, "reportingComponent": "trainset"})
}

async fn steady_state(
    client: &Client,
    system: &System,
    operator: Operator,
    count: usize,
    hold: u64,
) -> Option<Steady> {
    let pid = operator.pid();
    if count == 0 {
        operator.stop().await;
        return None;
    }
    let ns = TestNamespace::create(client, &format!("steady-{}", system.label)).await;
    let manifests: Vec<Value> = (0..count).map(|i| (system.manifest)(i, true)).collect();
    let api = dynamic_api(client, &manifests[0], Some(&ns.name));
    wait_admitted(client, &manifests[0], &ns.name).await;
    // Taken in: the operator reported the job suspended.
    let start = Instant::now();
    let ((), taken) = tokio::join!(
        submit(&api, &manifests),
        observe(api.clone(), start, count, 1, suspended)
    );
    say!(
        "{}: {count} suspended jobs taken in after {:.1} s",
        system.label,
        taken.last()
    );
    let settled = settle().await;
    say!(
        "{}: control plane settled after {:.0} s; holding {hold} s",
        system.label,
        settled
    );
    let own_metrics = system.label == "trainset";
    let reconciles_before = if own_metrics {
        reconciles().await
    } else {
        None
    };
    let (before, control_plane) = (cpu_seconds(pid), control_plane_cpu());
    tokio::time::sleep(Duration::from_secs(hold)).await;
    let held = Duration::from_secs(hold);
    let idle_cpu_pct = share_of_a_core(cpu_seconds(pid) - before, held);
    let control_plane_pct = share_of_a_core(control_plane_cpu() - control_plane, held);
    let rss_mib = memory_mib(pid, "VmRSS");
    let reconciles = if own_metrics {
        reconciles().await
    } else {
        None
    };
    // Said now, so a later phase that fails does not take these figures with it.
    say!(
        "{}: held {count} for {hold} s: RSS {rss_mib:.1} MiB, idle CPU {idle_cpu_pct:.2} % of a core, control plane {control_plane_pct:.1} %",
        system.label
    );
    let startup = startup(client, system, operator, &api, count).await;
    delete_and_wait(client, ns).await;
    Some(Steady {
        label: system.label,
        rss_mib,
        idle_cpu_pct,
        control_plane_pct,
        reconciles: reconciles
            .zip(reconciles_before)
            .map(|(after, before)| after - before),
        startup,
    })
}

/// CPU seconds used over `window`, as % of one core.
fn share_of_a_core(cpu_seconds: f64, window: Duration) -> f64 {
    cpu_seconds / window.as_secs_f64() * 100.0
}

/// Waits for a window of [`SETTLE`] in which the control plane was quiet, at most
/// [`SETTLE_LIMIT`]; the seconds waited.
async fn settle() -> f64 {
    let start = Instant::now();
    loop {
        let before = control_plane_cpu();
        tokio::time::sleep(SETTLE).await;
        let used_pct = share_of_a_core(control_plane_cpu() - before, SETTLE);
        if used_pct < QUIET_PCT || start.elapsed() >= SETTLE_LIMIT {
            return start.elapsed().as_secs_f64();
        }
    }
}

/// Restarts `operator` over the `count` held jobs: the seconds from its process's start until it has
/// reconciled each once, and its peak RSS then. A job created while it is stopped is reported last
/// by an operator that works through its initial list in order (controller-runtime's queue); for
/// trainset its own reconcile count must also reach every job.
async fn startup(
    client: &Client,
    system: &System,
    operator: Operator,
    api: &Api<DynamicObject>,
    count: usize,
) -> Option<(f64, f64)> {
    let label = operator.label();
    operator.pause().await;
    let mut probe = (system.manifest)(count, true);
    probe["metadata"]["name"] = json!(STARTUP_PROBE);
    submit(api, &[probe]).await;
    let operator = Operator::start(client, label).await;
    let probe_api = api.clone();
    let reported = tokio::spawn(async move {
        let only_probe = format!("metadata.name={STARTUP_PROBE}");
        let probe = watcher(probe_api, watcher::Config::default().fields(&only_probe));
        let mut probe = std::pin::pin!(probe);
        while let Some(event) = probe.next().await {
            if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event
                && suspended(&o).is_some()
            {
                return true;
            }
        }
        false
    });
    let reported = tokio::time::timeout(limit(), reported).await;
    let mut done = matches!(reported, Ok(Ok(true)));
    if done && label == "trainset" {
        let deadline = Instant::now() + limit();
        while reconciles().await.is_none_or(|n| n <= count as u64) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        done = reconciles().await.is_some_and(|n| n > count as u64);
    }
    let pid = operator.pid();
    let figures = (process_age(pid), memory_mib(pid, "VmHWM"));
    say!(
        "{label}: restarted over {count} suspended jobs: {}",
        if done {
            format!(
                "all reconciled after {:.1} s, peak RSS {:.1} MiB",
                figures.0, figures.1
            )
        } else {
            format!("not all reconciled within {:?}", limit())
        }
    );
    operator.stop().await;
    done.then_some(figures)
}

/// How many reconciles the bench's trainset has run, of every kind (its `/metrics`).
async fn reconciles() -> Option<u64> {
    let (_, text) = http_get(&loopback(PORT), "/metrics").await?;
    let counts = text
        .lines()
        .filter(|line| line.starts_with("trainset_reconcile_duration_seconds_count"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok());
    Some(counts.sum::<f64>() as u64)
}

fn jobset_kind() -> Value {
    json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"})
}

/// The JobSet trainset compiles `manifest` to, standing alone (no owner to point at).
fn direct_jobset(manifest: &Value, namespace: &str) -> Value {
    let options = Options {
        default_namespace: Some(namespace),
        ..Default::default()
    };
    let compiled = compile_manifest(manifest.clone(), &options).expect("compiles");
    let mut jobset = serde_json::to_value(&compiled.jobset).expect("JSON");
    jobset["metadata"]["ownerReferences"] = Value::Null;
    jobset
}

/// Deletes the namespace and waits until it is gone, so its cleanup does not load the next run.
async fn delete_and_wait(client: &Client, ns: TestNamespace) {
    let name = ns.name.clone();
    ns.delete().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let start = Instant::now();
    let exists = || async { matches!(namespaces.get_opt(&name).await, Ok(Some(_))) };
    while start.elapsed() < limit() && exists().await {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let outcome = if exists().await {
        "still there"
    } else {
        "gone"
    };
    say!(
        "namespace {name} {outcome} after {:.0} s",
        start.elapsed().as_secs_f64()
    );
}

/// Starts the trainset binary measured on the bench's port and waits until it leads.
async fn start_trainset(client: &Client) -> operator::Extra {
    let address = loopback(PORT);
    let extra = operator::spawn_extra(client, &address).await;
    trainset_e2e::wait_leading(&address, Duration::from_secs(90)).await;
    extra
}

fn peer_pid(peer: &str) -> u32 {
    component_pid(peer).unwrap_or_else(|| panic!("no pid recorded for {peer}"))
}

/// trainset's times over the floor's, trial by trial: when the last JobSet existed and when the
/// last job finished.
struct Ratios {
    exists: Vec<f64>,
    done: Vec<f64>,
}

impl Ratios {
    /// Of trials each holding trainset's run, then the floor's.
    fn of(trials: &[Vec<Run>]) -> Self {
        let ratio = |pair: &[Run], time: fn(&Run) -> f64| match pair {
            [trainset, direct] => time(trainset) / time(direct),
            _ => f64::NAN,
        };
        Self {
            exists: trials
                .iter()
                .map(|p| ratio(p, |r| r.exists.last()))
                .collect(),
            done: trials.iter().map(|p| ratio(p, |r| r.done.last())).collect(),
        }
    }

    /// The index of the middle one of `values` (the lower middle of an even count).
    fn middle(values: &[f64]) -> usize {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        order[(order.len() - 1) / 2]
    }

    /// The trial whose finished ratio is the median: the one the table shows.
    fn median_trial(&self) -> usize {
        Self::middle(&self.done)
    }

    fn median(values: &[f64]) -> f64 {
        values[Self::middle(values)]
    }

    fn list(values: &[f64]) -> String {
        let each: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        each.join(",")
    }
}

fn print_table(runs: &[Run], steady: &[Steady], jobs: usize, ratios: &Ratios) {
    let cell = |s: String| format!("{s:>18}");
    let header: String = runs.iter().map(|r| cell(r.label.to_owned())).collect();
    println!(
        "\n{jobs} PyTorchJobs (1 Master + 3 Workers; pods complete after 1 s + jitter), {IN_FLIGHT} creations in flight"
    );
    println!(
        "trainset and direct: trial {} of {} (the median finished ratio; each trial's: {})",
        ratios.median_trial() + 1,
        ratios.done.len(),
        Ratios::list(&ratios.done)
    );
    println!("{:<40}{header}", "");
    let row = |label: &str, value: &dyn Fn(&Run) -> String| {
        let cells: String = runs.iter().map(|r| cell(value(r))).collect();
        println!("{label:<40}{cells}");
    };
    let times = |(p50, p99, last): (f64, f64, f64)| format!("{p50:.1}/{p99:.1}/{last:.1}");
    row("all submitted (s)", &|r| format!("{:.1}", r.submitted));
    row("work exists, p50/p99/last (s)", &|r| {
        times(r.exists.summary())
    });
    row("job finished, p50/p99/last (s)", &|r| {
        times(r.done.summary())
    });
    row("operator CPU (s)", &|r| {
        r.operator
            .as_ref()
            .map_or("-".into(), |o| format!("{:.1}", o.0))
    });
    row("operator peak RSS (MiB)", &|r| {
        r.operator
            .as_ref()
            .map_or("-".into(), |o| format!("{:.1}", o.1))
    });
    row("control plane CPU (s)", &|r| {
        format!("{:.1}", r.control_plane_cpu)
    });
    let per_job = |n: usize| format!("{:.2}", n as f64 / jobs as f64);
    row("operator requests per job", &|r| {
        r.operator
            .as_ref()
            .map_or("-".into(), |o| per_job(o.2.total()))
    });
    row("  Lease requests (not per job)", &|r| {
        r.operator
            .as_ref()
            .map_or("-".into(), |o| o.2.leases.to_string())
    });
    row("  writes per job (events apart)", &|r| {
        r.operator
            .as_ref()
            .map_or("-".into(), |o| per_job(o.2.writes))
    });
    row("  events per job", &|r| {
        r.operator
            .as_ref()
            .map_or("-".into(), |o| per_job(o.2.events))
    });
    let verbs: HashSet<&String> = runs
        .iter()
        .filter_map(|r| r.operator.as_ref())
        .flat_map(|o| o.2.by_verb.keys())
        .collect();
    let mut verbs: Vec<&String> = verbs.into_iter().collect();
    verbs.sort();
    for verb in verbs {
        row(&format!("  {verb} per job"), &|r| {
            r.operator.as_ref().map_or("-".into(), |o| {
                per_job(o.2.by_verb.get(verb).copied().unwrap_or(0))
            })
        });
    }
    for s in steady {
        let woken = s
            .reconciles
            .map(|n| format!(", {n} reconciles during the hold"))
            .unwrap_or_default();
        println!(
            "steady state, {}: RSS {:.1} MiB, idle CPU {:.2} % of a core{woken} \
             (control plane {:.0} %)",
            s.label, s.rss_mib, s.idle_cpu_pct, s.control_plane_pct
        );
    }
}

fn print_keys(
    runs: &[Run],
    steady: &[Steady],
    jobs: usize,
    ratios: &Ratios,
    writes_alone_cpu: f64,
) {
    let find = |label: &str| runs.iter().find(|r| r.label == label);
    let per_job = |n: usize| n as f64 / jobs as f64;
    let mut keys: Vec<(String, String)> = Vec::new();
    // What trainset's run cost the control plane over the floor's, in the median trial, beside
    // what the writes it must make cost alone.
    if let (Some(trainset), Some(direct)) = (find("trainset"), find("direct")) {
        let extra = trainset.control_plane_cpu - direct.control_plane_cpu;
        keys.push(("control_plane_extra_cpu_s".into(), format!("{extra:.1}")));
    }
    keys.push((
        "writes_alone_control_plane_cpu_s".into(),
        format!("{writes_alone_cpu:.1}"),
    ));
    for (name, values) in [("exists", &ratios.exists), ("done", &ratios.done)] {
        keys.push((
            format!("ratio_{name}_vs_direct"),
            format!("{:.2}", Ratios::median(values)),
        ));
        keys.push((
            format!("ratio_{name}_vs_direct_trials"),
            Ratios::list(values),
        ));
    }
    for (prefix, label) in [
        ("trainset", "trainset"),
        ("v1", "training-operator"),
        ("trainer", "trainer"),
    ] {
        let Some(run) = find(label) else { continue };
        keys.push((
            format!("{prefix}_done_s"),
            format!("{:.1}", run.done.last()),
        ));
        if let Some((cpu, rss, requests)) = &run.operator {
            let (rss_key, requests_key) = if prefix == "trainset" {
                ("rss_mib_1k".to_owned(), "requests_per_job".to_owned())
            } else {
                (
                    format!("{prefix}_rss_mib_1k"),
                    format!("{prefix}_requests_per_job"),
                )
            };
            keys.push((format!("{prefix}_cpu_s"), format!("{cpu:.1}")));
            keys.push((rss_key, format!("{rss:.1}")));
            keys.push((requests_key, format!("{:.2}", per_job(requests.total()))));
            if prefix == "trainset" {
                keys.push((
                    "writes_per_job".into(),
                    format!("{:.2}", per_job(requests.writes)),
                ));
                keys.push((
                    "events_per_job".into(),
                    format!("{:.2}", per_job(requests.events)),
                ));
            }
        }
    }
    for s in steady {
        let prefix = match s.label {
            "trainset" => String::new(),
            "training-operator" => "v1_".into(),
            other => format!("{other}_"),
        };
        keys.push((format!("{prefix}rss_mib_10k"), format!("{:.1}", s.rss_mib)));
        keys.push((
            format!("{prefix}idle_cpu_pct_10k"),
            format!("{:.2}", s.idle_cpu_pct),
        ));
        if let Some(n) = s.reconciles {
            keys.push((format!("{prefix}reconciles_during_hold_10k"), n.to_string()));
        }
        if let Some((seconds, peak)) = s.startup {
            keys.push((format!("{prefix}startup_s_10k"), format!("{seconds:.1}")));
            keys.push((
                format!("{prefix}peak_rss_mib_startup_10k"),
                format!("{peak:.1}"),
            ));
        }
    }
    println!();
    for (key, value) in keys {
        println!("{key}={value}");
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    LIMIT.get_or_init(|| Duration::from_secs(args.limit));
    let client = client().await;
    install_crds(&client).await;
    let mut runs = Vec::new();
    let mut steady = Vec::new();

    // The first jobs on a fresh control plane pay for what is cold there (etcd, the apiserver's
    // watch caches, the controllers' informers): a run of the floor, not measured, takes that
    // cost, so that trainset's run, the first measured, does not pay it alone.
    if args.warmup > 0 {
        let warmup = System {
            label: "warm-up",
            operator: None,
            manifest: pytorchjob,
            done: completed,
            exists_pods: false,
        };
        say!("warm-up: {} jobs of the floor, not measured", args.warmup);
        run_jobs(&client, &warmup, args.warmup).await;
    }
    let trainset = System {
        label: "trainset",
        operator: None,
        manifest: pytorchjob,
        done: succeeded,
        exists_pods: false,
    };
    let direct = System {
        label: "direct",
        operator: None,
        manifest: pytorchjob,
        done: completed,
        exists_pods: false,
    };
    // trainset and the floor take turns, in the order trainset, floor, floor, trainset, …: the
    // same jobs' control plane CPU has varied by a fifth between runs an hour apart on this
    // machine, which one pair cannot tell from trainset's cost. Each trainset run is a fresh
    // process, stopped before the floor's (its watches would read the floor's JobSets).
    let mut trials = Vec::new();
    for trial in 0..args.trials {
        say!("trial {} of {}", trial + 1, args.trials);
        let mut pair = Vec::new();
        for floor in [trial % 2 == 1, trial % 2 == 0] {
            if floor {
                pair.push(run_jobs(&client, &direct, args.jobs).await);
            } else {
                let process = Operator::start(&client, "trainset").await;
                let measured = System {
                    operator: Some((process.pid(), TRAINSET_USER)),
                    ..trainset
                };
                pair.push(run_jobs(&client, &measured, args.jobs).await);
                process.stop().await;
            }
        }
        pair.sort_by_key(|run| run.label != "trainset");
        trials.push(pair);
    }
    let ratios = Ratios::of(&trials);
    let median = ratios.median_trial();
    runs.extend(trials.swap_remove(median));
    let alone = writes_alone(&client, args.jobs).await;
    say!(
        "the writes alone: {:.1} s, control plane CPU {:.1} s ({})",
        alone.1,
        alone.0.iter().sum::<f64>(),
        by_component(&alone.0)
    );
    let process = Operator::start(&client, "trainset").await;
    let trainset = System {
        operator: Some((process.pid(), TRAINSET_USER)),
        ..trainset
    };
    steady.extend(steady_state(&client, &trainset, process, args.steady, args.hold).await);

    for peer in &args.peers {
        let process = Operator::start(&client, peer.label).await;
        let system = System {
            operator: Some((process.pid(), peer.label)),
            ..**peer
        };
        runs.push(run_jobs(&client, &system, args.jobs).await);
        steady.extend(steady_state(&client, &system, process, args.steady, args.hold).await);
    }

    print_table(&runs, &steady, args.jobs, &ratios);
    print_keys(&runs, &steady, args.jobs, &ratios, alone.0.iter().sum());
    // A peer that does not finish is a figure; trainset or the floor not finishing is a failure.
    let unfinished: Vec<&str> = trials
        .iter()
        .flatten()
        .chain(&runs)
        .filter(|r| matches!(r.label, "trainset" | "direct"))
        .filter(|r| !(r.exists.complete() && r.done.complete()))
        .map(|r| r.label)
        .collect();
    assert!(
        unfinished.is_empty(),
        "not every job finished within {:?}: {unfinished:?}",
        limit()
    );
}

/// One line per run as soon as it ends, so an interrupted benchmark still tells what it saw.
fn progress(run: &Run) {
    let operator = run.operator.as_ref().map_or(String::new(), |(cpu, rss, requests)| {
        format!(
            ", operator CPU {cpu:.1} s, peak RSS {rss:.1} MiB, {} requests ({} writes, {} events)",
            requests.total(),
            requests.writes,
            requests.events
        )
    });
    say!(
        "{}: submitted in {:.1} s, exists {}, finished {}, control plane CPU {:.1} s ({}){operator}",
        run.label,
        run.submitted,
        run.exists.describe(),
        run.done.describe(),
        run.control_plane_cpu,
        by_component(&run.control_plane_cpu_by_component)
    );
}

/// CPU seconds of each of [`CONTROL_PLANE`], as `etcd 1.2, kube-apiserver 3.4, …`.
fn by_component(cpu: &[f64; CONTROL_PLANE.len()]) -> String {
    let components: Vec<String> = CONTROL_PLANE
        .iter()
        .zip(cpu)
        .map(|(component, cpu)| format!("{component} {cpu:.1}"))
        .collect();
    components.join(", ")
}
