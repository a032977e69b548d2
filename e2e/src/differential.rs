//! The pure half of `e2e/differential`: what one operator did with one manifest, reduced to facts
//! that can be compared with another operator's (pods keyed by replica type and index, env as the
//! kubelet would resolve it, addresses and namespaces abstracted), the differences between two
//! such runs, and the table of documented deviations. The binary
//! (`src/bin/differential.rs`) does the I/O.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use jobset_types::keys::{
    JOB_COMPLETION_INDEX as COMPLETION_INDEX, label::JOB_INDEX as JOBSET_JOB_INDEX,
};
use serde_json::{Value, json};
use trainset::compile::{JOB_NAME, JOB_ROLE, REPLICA_TYPE};

/// The label the Job controller puts on the pods of a Job.
const BATCH_JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// Prefix of the v1 labels compared on pods.
const V1_LABELS: &str = "training.kubeflow.org/";
/// The label (scheduler-plugins) and annotation (Volcano) that put a pod in its PodGroup.
const GANG_MEMBERSHIP: [&str; 2] = [
    "scheduling.x-k8s.io/pod-group",
    "scheduling.k8s.io/group-name",
];
/// The v1 operators' per-pod index label (trainset has none yet: issue 10).
const REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
/// Volumes the apiserver adds to every pod (the ServiceAccount token), named with a random suffix.
const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
const ABSENT: &str = "—";

/// Everything one operator did with one case.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub namespace: String,
    /// The job object when it settled.
    pub job: Value,
    /// Every pod seen during the run, in its last observed version.
    pub pods: Vec<Value>,
    /// The MPI hostfile the launcher mounts, if any.
    pub hostfile: Option<String>,
    /// The gang scheduler's PodGroups seen during the run (`e2e/differential --gang`), each in
    /// its last version and whether it was deleted before the run ended.
    pub pod_groups: Vec<(Value, bool)>,
    /// The HorizontalPodAutoscalers seen during the run, likewise.
    pub autoscalers: Vec<(Value, bool)>,
    /// The (type, reason) of each event on the job.
    pub events: Vec<(String, String)>,
}

/// A compared fact: where (`job`, `worker/0`, `worker/0/pytorch`) and what (`env MASTER_ADDR`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fact {
    pub location: String,
    pub aspect: String,
}

pub type Facts = BTreeMap<Fact, String>;

/// One fact on which the two runs differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub fact: Fact,
    pub peer: String,
    pub trainset: String,
}

/// The key of a pod: its replica type (lower case, as the v1 label) and index. A v1 operator's
/// own pod is named `<job>-<type>-<index>` (its index label may differ: mpi-operator counts
/// workers from 1 when the launcher is a worker too); a Job's pod is named after the Job plus a
/// random suffix, which may be all digits (mpi-operator's launcher `<job>-launcher-49442`), so its
/// name says nothing. Under a JobSet the index is the completion index within one Indexed Job, or,
/// where each pod has a Job of its own, that Job's index.
pub fn pod_key(pod: &Value) -> String {
    let meta = &pod["metadata"];
    let labels = &meta["labels"];
    let replica_type = labels[REPLICA_TYPE]
        .as_str()
        .or_else(|| labels[JOB_ROLE].as_str())
        .unwrap_or("?")
        .to_ascii_lowercase();
    let own_pod = labels[BATCH_JOB_NAME].is_null();
    let by_name = labels[JOB_NAME]
        .as_str()
        .filter(|_| own_pod)
        .and_then(|job| {
            meta["name"]
                .as_str()?
                .strip_prefix(&format!("{job}-{replica_type}-"))
                .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        });
    let job_index = labels[JOBSET_JOB_INDEX].as_str().filter(|i| *i != "0");
    let index = by_name
        .or(job_index)
        .or_else(|| labels[COMPLETION_INDEX].as_str())
        .or_else(|| meta["annotations"][COMPLETION_INDEX].as_str())
        .or_else(|| labels[REPLICA_INDEX].as_str())
        .unwrap_or("0");
    format!("{replica_type}/{index}")
}

/// Rewrites the names a pod is reachable by into `⟨key⟩` and the namespace into `⟨namespace⟩`,
/// so a v1 per-replica Service (`job-worker-0.ns.svc`) and a JobSet address
/// (`job-worker-0-0.job.ns.svc`) of the same pod compare equal.
pub struct Addresses {
    /// (alias, replacement), longest alias first.
    aliases: Vec<(String, String)>,
}

impl Addresses {
    pub fn new(pods: &[Value], namespace: &str) -> Self {
        let mut aliases = Vec::new();
        for pod in pods {
            let token = format!("⟨{}⟩", pod_key(pod));
            let spec = &pod["spec"];
            let mut names: Vec<String> = pod["metadata"]["name"]
                .as_str()
                .map(str::to_owned)
                .into_iter()
                .collect();
            if let Some(host) = spec["hostname"].as_str() {
                names.push(host.to_owned());
                if let Some(subdomain) = spec["subdomain"].as_str() {
                    names.push(format!("{host}.{subdomain}"));
                }
            }
            for name in names {
                for suffix in [
                    String::new(),
                    format!(".{namespace}"),
                    format!(".{namespace}.svc"),
                    format!(".{namespace}.svc.cluster.local"),
                ] {
                    aliases.push((format!("{name}{suffix}"), token.clone()));
                }
            }
        }
        if !namespace.is_empty() {
            aliases.push((namespace.to_owned(), "⟨namespace⟩".to_owned()));
        }
        aliases.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        aliases.dedup_by(|a, b| a.0 == b.0);
        Self { aliases }
    }

    /// `text` with every alias that stands as a whole name (not inside a longer one) replaced.
    pub fn normalize(&self, text: &str) -> String {
        let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut previous: Option<char> = None;
        'scan: while let Some(c) = rest.chars().next() {
            if previous.is_none_or(|p| !is_name_char(p)) {
                for (alias, token) in &self.aliases {
                    if let Some(after) = rest.strip_prefix(alias.as_str()) {
                        // A trailing dot ends a sentence or a FQDN, not a longer name.
                        let next = after.chars().next();
                        let continues = next.is_some_and(|n| {
                            n.is_ascii_alphanumeric()
                                || n == '-'
                                || (n == '.' && after[1..].chars().next().is_some_and(is_name_char))
                        });
                        if !continues {
                            out.push_str(token);
                            rest = after;
                            previous = alias.chars().last();
                            continue 'scan;
                        }
                    }
                }
            }
            out.push(c);
            previous = Some(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }
}

/// The value of a downward-API `fieldPath` on `pod`, as the kubelet resolves it. Values that
/// depend on scheduling or identity (IPs, node, uid) become a placeholder naming the field.
fn field_ref(pod: &Value, path: &str) -> String {
    let meta = &pod["metadata"];
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_owned)
    };
    if let Some(key) = keyed("metadata.labels['") {
        return meta["labels"][key.as_str()]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    if let Some(key) = keyed("metadata.annotations['") {
        return meta["annotations"][key.as_str()]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    match path {
        "metadata.name" | "metadata.namespace" => meta[&path["metadata.".len()..]]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        "spec.serviceAccountName" => pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        other => format!("⟨{other}⟩"),
    }
}

/// Kubernetes' `$(VAR)` expansion: a name defined earlier in the list is replaced, `$$` escapes,
/// anything else stays as written.
fn expand(value: &str, defined: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(after) = tail.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(close) = tail.strip_prefix('(').and_then(|t| t.find(')')) {
            let name = &tail[1..=close];
            match defined.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &tail[close + 2..];
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// A container's env after the kubelet's resolution, in the order defined.
pub fn resolved_env(pod: &Value, container: &Value) -> BTreeMap<String, String> {
    let mut defined = BTreeMap::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let Some(name) = var["name"].as_str() else {
            continue;
        };
        let value = if let Some(path) = var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field_ref(pod, path)
        } else if !var["valueFrom"].is_null() {
            format!("⟨valueFrom {}⟩", var["valueFrom"])
        } else {
            expand(var["value"].as_str().unwrap_or_default(), &defined)
        };
        defined.insert(name.to_owned(), value);
    }
    defined
}

fn compact(value: &Value) -> String {
    match value {
        Value::Null => ABSENT.to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A volume's source without the names that embed its job (compared through `Addresses`).
fn volume_summary(volume: &Value) -> String {
    let mut source = volume.clone();
    if let Some(map) = source.as_object_mut() {
        map.remove("name");
    }
    compact(&source)
}

fn pod_facts(facts: &mut Facts, key: &str, pod: &Value, addresses: &Addresses) {
    let mut put = |location: String, aspect: String, value: String| {
        facts.insert(Fact { location, aspect }, addresses.normalize(&value));
    };
    let spec = &pod["spec"];
    for field in ["restartPolicy", "priorityClassName", "schedulerName"] {
        put(key.to_owned(), field.to_owned(), compact(&spec[field]));
    }
    if let Some(labels) = pod["metadata"]["labels"].as_object() {
        let compared =
            |k: &String| k.starts_with(V1_LABELS) || GANG_MEMBERSHIP.contains(&k.as_str());
        for (label, value) in labels.iter().filter(|(k, _)| compared(k)) {
            put(key.to_owned(), format!("label {label}"), compact(value));
        }
    }
    for name in GANG_MEMBERSHIP {
        let value = &pod["metadata"]["annotations"][name];
        if !value.is_null() {
            put(key.to_owned(), format!("annotation {name}"), compact(value));
        }
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        if !name.starts_with(TOKEN_VOLUME_PREFIX) {
            put(
                key.to_owned(),
                format!("volume {name}"),
                volume_summary(volume),
            );
        }
    }
    for (list, what) in [
        ("initContainers", "initContainer"),
        ("containers", "container"),
    ] {
        let names: Vec<&str> = spec[list]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        put(key.to_owned(), format!("{what}s"), names.join(", "));
        for container in spec[list].as_array().into_iter().flatten() {
            let name = container["name"].as_str().unwrap_or_default();
            if list == "initContainers" {
                // One fact: what an operator adds there is one addition.
                put(
                    key.to_owned(),
                    format!("initContainer {name}"),
                    compact(container),
                );
                continue;
            }
            let location = format!("{key}/{name}");
            for (var, value) in resolved_env(pod, container) {
                put(location.clone(), format!("env {var}"), value);
            }
            let mut ports: Vec<String> = container["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}:{}/{}",
                        p["name"].as_str().unwrap_or(""),
                        p["containerPort"],
                        p["protocol"].as_str().unwrap_or("TCP")
                    )
                })
                .collect();
            ports.sort();
            put(location.clone(), "ports".to_owned(), ports.join(", "));
            for field in ["command", "args"] {
                put(
                    location.clone(),
                    field.to_owned(),
                    compact(&container[field]),
                );
            }
            for mount in container["volumeMounts"].as_array().into_iter().flatten() {
                let path = mount["mountPath"].as_str().unwrap_or_default();
                let volume = mount["name"].as_str().unwrap_or_default();
                if !volume.starts_with(TOKEN_VOLUME_PREFIX) {
                    put(location.clone(), format!("mount {path}"), compact(mount));
                }
            }
        }
    }
}

/// The facts of one run. Pods with the same key (a pod recreated after a failure) count once,
/// by their first version; how many there were is a fact of its own.
pub fn facts(run: &Run) -> Facts {
    let addresses = Addresses::new(&run.pods, &run.namespace);
    let mut by_key: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for pod in &run.pods {
        by_key.entry(pod_key(pod)).or_default().push(pod);
    }
    let mut facts = Facts::new();
    let job = |aspect: &str| Fact {
        location: "job".to_owned(),
        aspect: aspect.to_owned(),
    };
    facts.insert(
        job("pods"),
        by_key.keys().cloned().collect::<Vec<_>>().join(", "),
    );
    for (key, pods) in &mut by_key {
        pods.sort_by_key(|p| {
            p["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
        });
        facts.insert(
            Fact {
                location: key.clone(),
                aspect: "pods created".to_owned(),
            },
            pods.len().to_string(),
        );
        pod_facts(&mut facts, key, pods[0], &addresses);
    }
    if let Some(hostfile) = &run.hostfile {
        facts.insert(job("hostfile"), addresses.normalize(hostfile));
    }
    for (prefix, objects) in [
        ("podgroup", &run.pod_groups),
        ("autoscaler", &run.autoscalers),
    ] {
        for (object, deleted) in objects {
            let mut leaves = BTreeMap::new();
            flatten(prefix, &compared(object), &mut leaves);
            for (aspect, value) in leaves.into_iter().filter(|(_, v)| v != "null") {
                facts.insert(job(&aspect), value);
            }
            let deleted = if *deleted { "yes" } else { "no" };
            facts.insert(
                job(&format!("{prefix} deleted by the end")),
                deleted.to_owned(),
            );
        }
    }
    // The events that tell of a suspension and a resume (the SDK's verbose logs show them);
    // the others name each operator's own objects.
    for (type_, reason) in &run.events {
        if reason.ends_with("Suspended") || reason.ends_with("Resumed") {
            facts.insert(job(&format!("event {reason}")), type_.clone());
        }
    }
    let status = &run.job["status"];
    // One fact per condition type: the order of the list is how each operator happened to
    // append, not behaviour.
    for c in status["conditions"].as_array().into_iter().flatten() {
        facts.insert(
            job(&format!("condition {}", compact(&c["type"]))),
            format!("{}({})", compact(&c["status"]), compact(&c["reason"])),
        );
    }
    if let Some(replicas) = status["replicaStatuses"].as_object() {
        for (replica_type, counts) in replicas {
            // One fact per counter: pods still running at the end are counted differently by
            // design (docs/compatibility.md), failures must agree.
            for field in ["active", "succeeded", "failed"] {
                facts.insert(
                    job(&format!("replicaStatuses.{replica_type}.{field}")),
                    counts[field].as_i64().unwrap_or(0).to_string(),
                );
            }
            facts.insert(
                job(&format!("replicaStatuses.{replica_type}.selector")),
                addresses.normalize(&compact(&counts["selector"])),
            );
        }
    }
    for field in ["startTime", "completionTime"] {
        let present = if status[field].is_null() {
            "absent"
        } else {
            "set"
        };
        facts.insert(job(field), present.to_owned());
    }
    facts
}

/// The facts on which the two runs differ.
pub fn differences(peer: &Facts, trainset: &Facts) -> Vec<Difference> {
    let mut keys: Vec<&Fact> = peer.keys().chain(trainset.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|fact| {
            let a = peer.get(fact).map_or(ABSENT, String::as_str);
            let b = trainset.get(fact).map_or(ABSENT, String::as_str);
            (a != b).then(|| Difference {
                fact: fact.clone(),
                peer: a.to_owned(),
                trainset: b.to_owned(),
            })
        })
        .collect()
}

/// A row of the "Deviations from v1" table in docs/compatibility.md: an aspect (one `*` matches any run of
/// characters) and the kinds it concerns (`all`, or a comma-separated list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deviation {
    pub aspect: String,
    pub kinds: Vec<String>,
}

impl Deviation {
    pub fn covers(&self, kind: &str, difference: &Difference) -> bool {
        let kind_matches = self.kinds.iter().any(|k| k == "all" || k == kind);
        let aspect = &difference.fact.aspect;
        let aspect_matches = match self.aspect.split_once('*') {
            Some((prefix, suffix)) => {
                aspect.len() >= prefix.len() + suffix.len()
                    && aspect.starts_with(prefix)
                    && aspect.ends_with(suffix)
            }
            None => *aspect == self.aspect,
        };
        kind_matches && aspect_matches
    }
}

/// The heading of the section of docs/compatibility.md that documents deviations.
pub const DEVIATIONS_HEADING: &str = "## Deviations from v1";
/// The heading of the section that documents deviations from Trainer v2.3.0.
pub const TRAINER_DEVIATIONS_HEADING: &str = "## Deviations from Trainer v2.3.0";

/// The rows of the first table under [`DEVIATIONS_HEADING`]: the first column's code span is
/// the aspect, the second column the kinds.
pub fn deviations(readme: &str) -> Result<Vec<Deviation>, String> {
    deviations_under(readme, DEVIATIONS_HEADING)
}

/// The deviations docs/compatibility.md documents under `heading`.
pub fn documented_deviations(heading: &str) -> Result<Vec<Deviation>, String> {
    let readme = crate::repo_root().join("docs/compatibility.md");
    let text =
        std::fs::read_to_string(&readme).map_err(|e| format!("{}: {e}", readme.display()))?;
    deviations_under(&text, heading)
}

/// One case's two runs, each what an operator did or why the case did not run under it.
pub struct Outcome<T> {
    pub name: String,
    /// What the deviation table's second column matches.
    pub kind: String,
    pub upstream: Result<T, String>,
    pub trainset: Result<T, String>,
}

/// Compares each case's two runs by `facts`, prints the table, the cases that did not run, the
/// run times and `<tool>: N/M cases identical, K documented deviations, U undocumented`, and
/// returns whether every case ran and every difference is documented.
pub fn conclude<T>(
    tool: &str,
    outcomes: Vec<Outcome<T>>,
    facts: impl Fn(&T) -> Facts,
    known: &[Deviation],
    times: (std::time::Duration, std::time::Duration),
) -> bool {
    let total = outcomes.len();
    let mut verdicts = Vec::new();
    let mut failures = Vec::new();
    for outcome in outcomes {
        match (outcome.upstream, outcome.trainset) {
            (Ok(upstream), Ok(trainset)) => {
                let found = differences(&facts(&upstream), &facts(&trainset));
                let verdict = judge(&outcome.kind, found, known);
                verdicts.push((outcome.name, outcome.kind, verdict));
            }
            (upstream, trainset) => {
                for (who, e) in [("upstream", upstream.err()), ("trainset", trainset.err())] {
                    if let Some(e) = e {
                        failures.push(format!("{}: under {who}: {e}", outcome.name));
                    }
                }
            }
        }
    }
    print!("{}", report(&verdicts));
    for failure in &failures {
        println!("FAILED {failure}");
    }
    let identical = verdicts
        .iter()
        .filter(|(_, _, v)| v.documented.is_empty() && v.undocumented.is_empty())
        .count();
    let documented: usize = verdicts.iter().map(|(_, _, v)| v.documented.len()).sum();
    let undocumented: usize = verdicts.iter().map(|(_, _, v)| v.undocumented.len()).sum();
    println!(
        "upstream run {:.0}s, trainset run {:.0}s",
        times.0.as_secs_f64(),
        times.1.as_secs_f64()
    );
    println!(
        "{tool}: {identical}/{total} cases identical, {documented} documented deviations, {undocumented} undocumented"
    );
    undocumented == 0 && failures.is_empty()
}

/// The rows of the first table under `heading`, read as [`deviations`] reads them.
pub fn deviations_under(readme: &str, heading: &str) -> Result<Vec<Deviation>, String> {
    let section = readme
        .split_once(heading)
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("no section {heading:?}"))?;
    let rows = section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2); // header and separator
    let mut found = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let aspect = cells
            .first()
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.split_once('`'))
            .map(|(aspect, _)| aspect.to_owned())
            .ok_or_else(|| format!("deviation row without a `code` aspect: {row}"))?;
        let kinds = cells
            .get(1)
            .map(|c| c.split(',').map(|k| k.trim().to_owned()).collect())
            .ok_or_else(|| format!("deviation row without kinds: {row}"))?;
        found.push(Deviation { aspect, kinds });
    }
    if found.is_empty() {
        return Err(format!("no table under {heading:?}"));
    }
    Ok(found)
}

/// The outcome of one case.
#[derive(Debug, Default)]
pub struct Verdict {
    pub documented: Vec<Difference>,
    pub undocumented: Vec<Difference>,
}

pub fn judge(kind: &str, differences: Vec<Difference>, known: &[Deviation]) -> Verdict {
    let mut verdict = Verdict::default();
    for difference in differences {
        if known.iter().any(|d| d.covers(kind, &difference)) {
            verdict.documented.push(difference);
        } else {
            verdict.undocumented.push(difference);
        }
    }
    verdict
}

/// A text table: one line per case, then each difference indented under it.
pub fn report(cases: &[(String, String, Verdict)]) -> String {
    let mut out = String::new();
    let width = cases
        .iter()
        .map(|(n, _, _)| n.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(out, "{:width$}  {:12}  result", "case", "kind");
    for (name, kind, verdict) in cases {
        let result = match (verdict.undocumented.len(), verdict.documented.len()) {
            (0, 0) => "identical".to_owned(),
            (0, d) => format!("differs only by {d} documented deviation(s)"),
            (u, d) => format!("DIFFERENT: {u} undocumented, {d} documented"),
        };
        let _ = writeln!(out, "{name:width$}  {kind:12}  {result}");
        for (label, list) in [
            ("undocumented", &verdict.undocumented),
            ("documented", &verdict.documented),
        ] {
            for d in list {
                let _ = writeln!(
                    out,
                    "    {label:12} {} {}: upstream {:?}, trainset {:?}",
                    d.fact.location, d.fact.aspect, d.peer, d.trainset
                );
            }
        }
    }
    out
}

/// Every leaf of `value` by its path; list items that have a `name` (or a `mountPath`) are keyed
/// by it, so a list's order is not a difference but its members are.
pub fn flatten(path: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                flatten(&format!("{path}.{key}"), child, out);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let key = ["name", "mountPath", "containerPort"]
                    .into_iter()
                    .find_map(|k| {
                        item.get(k).map(|v| {
                            format!(
                                "{k}={}",
                                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                            )
                        })
                    })
                    .unwrap_or_else(|| index.to_string());
                flatten(&format!("{path}[{key}]"), item, out);
            }
        }
        leaf => {
            out.insert(path.to_owned(), leaf.to_string());
        }
    }
}

/// An object's labels, annotations, owners (without uids) and spec, the parts compared.
pub fn compared(object: &Value) -> Value {
    let metadata = &object["metadata"];
    let owners: Vec<Value> = metadata["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["name"],
                        "controller": o["controller"], "blockOwnerDeletion": o["blockOwnerDeletion"]}))
        .collect();
    json!({
        "metadata": {"labels": metadata["labels"], "annotations": metadata["annotations"],
                     "ownerReferences": owners},
        "spec": object["spec"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, labels: Value, host: Option<(&str, &str)>) -> Value {
        let mut pod =
            json!({"metadata": {"name": name, "namespace": "ns1", "labels": labels}, "spec": {}});
        if let Some((h, s)) = host {
            pod["spec"]["hostname"] = json!(h);
            pod["spec"]["subdomain"] = json!(s);
        }
        pod
    }

    #[test]
    fn v1_service_names_and_jobset_addresses_normalize_alike() {
        let v1 = pod(
            "job-worker-1",
            json!({JOB_NAME: "job", REPLICA_TYPE: "worker", REPLICA_INDEX: "1"}),
            None,
        );
        let ours = pod(
            "job-worker-0-1-x7k2p",
            json!({REPLICA_TYPE: "worker", COMPLETION_INDEX: "1"}),
            Some(("job-worker-0-1", "job")),
        );
        let a = Addresses::new(&[v1], "ns1");
        let b = Addresses::new(&[ours], "ns2");
        assert_eq!(a.normalize("job-worker-1.ns1.svc:2222"), "⟨worker/1⟩:2222");
        assert_eq!(
            b.normalize("job-worker-0-1.job.ns2.svc:2222"),
            "⟨worker/1⟩:2222"
        );
        assert_eq!(b.normalize("job-worker-0-1.job:2222"), "⟨worker/1⟩:2222");
        // A longer name that merely starts like an alias is left alone.
        assert_eq!(a.normalize("job-worker-10"), "job-worker-10");
        assert_eq!(a.normalize("ns1x"), "ns1x");
        assert_eq!(a.normalize("in ns1."), "in ⟨namespace⟩.");
    }

    #[test]
    fn a_pod_with_a_job_of_its_own_is_keyed_by_the_jobs_index() {
        let own_job = pod(
            "j-worker-1-0-abc",
            json!({REPLICA_TYPE: "worker", COMPLETION_INDEX: "0", JOBSET_JOB_INDEX: "1"}),
            None,
        );
        let indexed = pod(
            "j-worker-0-3-abc",
            json!({REPLICA_TYPE: "worker", COMPLETION_INDEX: "3", JOBSET_JOB_INDEX: "0"}),
            None,
        );
        assert_eq!(pod_key(&own_job), "worker/1");
        assert_eq!(pod_key(&indexed), "worker/3");
        // mpi-operator with runLauncherAsWorker: pod worker-0 carries index label 1.
        let upstream = pod(
            "j-worker-0",
            json!({JOB_NAME: "j", REPLICA_TYPE: "worker", REPLICA_INDEX: "1"}),
            None,
        );
        assert_eq!(pod_key(&upstream), "worker/0");
        // mpi-operator's launcher is a Job's pod; an all-digit random suffix is not an index.
        let launcher = pod(
            "j-launcher-49442",
            json!({JOB_NAME: "j", JOB_ROLE: "launcher", BATCH_JOB_NAME: "j-launcher"}),
            None,
        );
        assert_eq!(pod_key(&launcher), "launcher/0");
    }

    #[test]
    fn env_resolves_field_refs_then_expands_in_order() {
        let p = json!({"metadata": {"name": "p", "annotations": {COMPLETION_INDEX: "3"}}});
        let c = json!({"env": [
            {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
            {"name": "ADDR", "value": "r$(RANK)-$(LATER)-$$(RANK)-$"},
            {"name": "LATER", "value": "x"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]});
        let env = resolved_env(&p, &c);
        assert_eq!(env["RANK"], "3");
        assert_eq!(env["ADDR"], "r3-$(LATER)-$(RANK)-$");
        assert_eq!(env["IP"], "⟨status.podIP⟩");
    }

    #[test]
    fn both_differentials_find_their_tables_in_the_docs() {
        for heading in [DEVIATIONS_HEADING, TRAINER_DEVIATIONS_HEADING] {
            let rows = documented_deviations(heading).unwrap_or_else(|e| panic!("{e}"));
            assert!(rows.len() >= 4, "{heading}: {} rows", rows.len());
        }
    }

    #[test]
    fn deviations_parse_and_cover_by_aspect_and_kind() {
        let readme = "# x\n\n## Deviations from v1\n\nText.\n\n| Aspect | Kinds | Why |\n|---|---|---|\n| `label training.kubeflow.org/replica-index` | all | later |\n| `env PET_*` | PyTorchJob, JAXJob | because |\n\nAfter.\n";
        let known = deviations(readme).expect("table");
        assert_eq!(known.len(), 2);
        let diff = |aspect: &str| Difference {
            fact: Fact {
                location: "worker/0/c".into(),
                aspect: aspect.into(),
            },
            peer: "a".into(),
            trainset: "b".into(),
        };
        let verdict = judge(
            "PyTorchJob",
            vec![diff("env PET_NNODES"), diff("env WORLD_SIZE")],
            &known,
        );
        assert_eq!(verdict.documented.len(), 1);
        assert_eq!(verdict.undocumented[0].fact.aspect, "env WORLD_SIZE");
        assert!(!known[1].covers("TFJob", &diff("env PET_NNODES")));
        let inner = Deviation {
            aspect: "replicaStatuses.*.selector".into(),
            kinds: vec!["all".into()],
        };
        assert!(inner.covers("TFJob", &diff("replicaStatuses.Worker.selector")));
        assert!(!inner.covers("TFJob", &diff("replicaStatuses.Worker.failed")));
        assert!(deviations("no table").is_err());
    }

    #[test]
    fn facts_compare_pods_by_key_and_status_by_shape() {
        let run = |name: &str, ns: &str, labels: Value, host, succeeded: i64| Run {
            namespace: ns.into(),
            job: json!({"status": {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Done"}],
                "replicaStatuses": {"Worker": {"succeeded": succeeded}}, "startTime": "t"}}),
            pods: vec![{
                let mut p = pod(name, labels, host);
                p["metadata"]["namespace"] = json!(ns);
                p["spec"]["containers"] = json!([{"name": "c", "env": [
                    {"name": "PEER", "value": format!("{name}.{ns}.svc")},
                    {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}]);
                p
            }],
            hostfile: None,
            pod_groups: Vec::new(),
            autoscalers: Vec::new(),
            events: vec![
                ("Normal".into(), "PyTorchJobSuspended".into()),
                ("Normal".into(), "SuccessfulCreatePod".into()),
            ],
        };
        let a = facts(&run(
            "j-worker-0",
            "a",
            json!({JOB_NAME: "j", REPLICA_TYPE: "worker", REPLICA_INDEX: "0"}),
            None,
            1,
        ));
        let b = facts(&run(
            "j-worker-0-0-abc",
            "b",
            json!({JOB_NAME: "j", REPLICA_TYPE: "worker", COMPLETION_INDEX: "0"}),
            Some(("j-worker-0-0", "j")),
            1,
        ));
        let c = facts(&run(
            "j-worker-0-0-abc",
            "b",
            json!({JOB_NAME: "j", REPLICA_TYPE: "worker", COMPLETION_INDEX: "0"}),
            Some(("j-worker-0-0", "j")),
            0,
        ));
        let ab = differences(&a, &b);
        // Only the label that names the index differs: env, addresses and status agree.
        assert_eq!(ab.len(), 1, "{ab:?}");
        assert_eq!(ab[0].fact.aspect, format!("label {REPLICA_INDEX}"));
        let bc = differences(&b, &c);
        assert_eq!(bc.len(), 1);
        assert_eq!(bc[0].fact.aspect, "replicaStatuses.Worker.succeeded");
        assert_eq!((bc[0].peer.as_str(), bc[0].trainset.as_str()), ("1", "0"));
        // The suspension event is a fact; the events naming each operator's objects are not.
        let event = |aspect: &str| Fact {
            location: "job".to_owned(),
            aspect: aspect.to_owned(),
        };
        assert_eq!(
            a.get(&event("event PyTorchJobSuspended"))
                .map(String::as_str),
            Some("Normal")
        );
        assert!(!a.contains_key(&event("event SuccessfulCreatePod")));
    }
}
