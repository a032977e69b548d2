//! The admission policies that refuse, at creation, a TrainJob whose pods' names would pass 63
//! characters under the runtime it names. The bound depends on that runtime (its replicated
//! jobs' names and pod counts), which a CRD rule cannot read, so each runtime kind gets a
//! ValidatingAdmissionPolicy (`admissionregistration.k8s.io/v1`, Kubernetes 1.30+) whose params
//! are that kind's runtimes: the apiserver evaluates it in process, with no webhook.
//!
//! The policy only refuses what it can work out: a runtime that does not exist yet, or an
//! expression that cannot be evaluated, lets the TrainJob through (`failurePolicy: Ignore`,
//! `parameterNotFoundAction: Allow`), and the compiler's own check
//! (`compile::bounds::pod_names`) fails it `InvalidSpec` at its first reconcile. The two draw
//! the line at the same length: the pod count below mirrors `compile::trainer::pod_count`,
//! and an e2e test compares them on every shipped runtime.

use kube::Resource;
use serde_json::{Value, json};

use crate::api::trainer::{ClusterTrainingRuntime, GROUP, TrainJob, TrainingRuntime};
use crate::compile::bounds::{MAX_NAME, POD_NAME_SEPARATORS, pod_names_too_long};
use crate::compile::trainer::{
    ANCESTOR_STEP, DATASET_INITIALIZER, MODEL_INITIALIZER, NODE, TRAINER_STEP,
};

/// The API that serves the policies.
pub const POLICY_API: &str = "admissionregistration.k8s.io/v1";

/// The name of the policy (and of its binding) for TrainJobs naming a runtime of `kind`.
pub fn policy_name(kind: &str) -> String {
    format!("trainset-trainjob-names-{}", kind.to_lowercase())
}

#[derive(Debug, thiserror::Error)]
#[error("writing the TrainJob name policies as YAML: {0}")]
pub struct PolicyYamlError(#[from] serde_norway::Error);

/// CEL for "`field` of `object`, or `default` when it is not set".
fn or(object: &str, field: &str, default: &str) -> String {
    format!("(has({object}.{field}) ? {object}.{field} : {default})")
}

/// CEL for the `trainjob-ancestor-step` label of the replicated job `r`, or `''`.
fn step(r: &str) -> String {
    let labels = format!("{r}.template.metadata.labels");
    format!(
        "(has({r}.template.metadata) && has({labels}) && '{ANCESTOR_STEP}' in {labels} \
         ? {labels}['{ANCESTOR_STEP}'] : '')"
    )
}

/// CEL for the pods of each Job of the replicated job `r`, as `compile::trainer::pod_count`
/// counts them: the trainer's from `numNodes` (the TrainJob's, else the runtime's; with MPI the
/// runtime's alone), MPI's `node` job's from the TrainJob's `numNodes` (one fewer when the
/// launcher is a node too), any other's its own parallelism. [`digits`] counts any below one as
/// one.
fn pods(r: &str) -> String {
    let parallelism = format!(
        "(has({r}.template.spec) ? {} : 1)",
        or(&format!("{r}.template.spec"), "parallelism", "1")
    );
    format!(
        "({step} == '{TRAINER_STEP}' ? (variables.mpi ? variables.runtimeNodes : \
         variables.hasNumNodes ? variables.numNodes : variables.ml ? variables.runtimeNodes : \
         {parallelism}) : variables.mpi && {r}.name == '{NODE}' && variables.hasNumNodes ? \
         (variables.launcherIsNode ? variables.numNodes - 1 : variables.numNodes) : {parallelism})",
        step = step(r)
    )
}

/// CEL for the Jobs of the replicated job `r`: one for a step Trainer runs once.
fn replicas(r: &str) -> String {
    format!(
        "({} in ['{TRAINER_STEP}', '{DATASET_INITIALIZER}', '{MODEL_INITIALIZER}'] ? 1 : {})",
        step(r),
        or(r, "replicas", "1")
    )
}

/// CEL for the digits of the highest index among `count` (at least one); the one-item list
/// binds `count` to a name, as CEL has no `let`.
fn digits(count: &str) -> String {
    format!("[{count}].map(n, size(string(n > 1 ? n - 1 : 0)))[0]")
}

/// CEL for the length of the longest pod name of the replicated job `r`, as
/// `compile::bounds::pod_names` counts it.
fn longest(r: &str) -> String {
    format!(
        "size(object.metadata.name) + size({r}.name) + {} + {} + {POD_NAME_SEPARATORS}",
        digits(&replicas(r)),
        digits(&pods(r))
    )
}

/// The policy for TrainJobs naming a runtime of kind `K`, and its binding.
fn for_runtime<K: Resource<DynamicType = ()>>() -> [Value; 2] {
    let kind = K::kind(&());
    let name = policy_name(&kind);
    let runtime_ref = "object.spec.runtimeRef";
    let names_this_kind = format!(
        "{} == '{GROUP}' && {} == '{kind}'",
        or(runtime_ref, "apiGroup", &format!("'{GROUP}'")),
        or(runtime_ref, "kind", "'ClusterTrainingRuntime'")
    );
    // The replicated job with the longest pod names: the first, where several tie.
    let reason = pod_names_too_long(
        "' + variables.jobs[variables.lengths.indexOf(variables.lengths.max())].name + '",
        "' + string(variables.lengths.max()) + '",
        &format!("' + string(variables.lengths.max() - {MAX_NAME}) + '"),
    );
    let variable = |name: &str, expression: String| json!({"name": name, "expression": expression});
    let ml_policy = "params.spec.mlPolicy";
    let policy = json!({
        "apiVersion": POLICY_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "paramKind": {"apiVersion": K::api_version(&()), "kind": kind},
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [GROUP],
                    "apiVersions": ["*"],
                    // Only at creation: an update of a job whose runtime changed since (trainset
                    // removing its finalizer, say) must never be refused.
                    "operations": ["CREATE"],
                    "resources": [TrainJob::plural(&())],
                }],
            },
            "matchConditions": [{"name": "names-this-runtime-kind", "expression": names_this_kind}],
            "variables": [
                variable("named", format!("{runtime_ref}.name == params.metadata.name")),
                variable("ml", format!("has({ml_policy})")),
                variable("mpi", format!("variables.ml && has({ml_policy}.mpi)")),
                variable(
                    "launcherIsNode",
                    format!(
                        "variables.mpi && has({ml_policy}.mpi.runLauncherAsNode) && \
                         {ml_policy}.mpi.runLauncherAsNode"
                    ),
                ),
                variable(
                    "runtimeNodes",
                    format!("variables.ml ? {} : 1", or(ml_policy, "numNodes", "1")),
                ),
                variable(
                    "hasNumNodes",
                    "has(object.spec.trainer) && has(object.spec.trainer.numNodes)".to_owned(),
                ),
                variable(
                    "numNodes",
                    "variables.hasNumNodes ? object.spec.trainer.numNodes : 1".to_owned(),
                ),
                variable(
                    "jobs",
                    "has(params.spec.template) && has(params.spec.template.spec) && \
                     has(params.spec.template.spec.replicatedJobs) ? \
                     params.spec.template.spec.replicatedJobs : []"
                        .to_owned(),
                ),
                variable("lengths", format!("variables.jobs.map(r, {})", longest("r"))),
            ],
            "validations": [{
                "expression": format!("!variables.named || variables.lengths.all(l, l <= {MAX_NAME})"),
                "messageExpression": format!("'metadata.name: {reason}'"),
                "reason": "Invalid",
            }],
            // The controller's own check stands behind this one (see the module's comment).
            "failurePolicy": "Ignore",
        },
    });
    let binding = json!({
        "apiVersion": POLICY_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            // Every runtime of the kind (in the TrainJob's namespace, for TrainingRuntimes); the
            // policy looks only at the one the TrainJob names.
            "paramRef": {"selector": {}, "parameterNotFoundAction": "Allow"},
            "validationActions": ["Deny"],
        },
    });
    [policy, binding]
}

/// The policies and their bindings: ClusterTrainingRuntimes', then TrainingRuntimes'.
pub fn objects() -> Vec<Value> {
    let mut objects = Vec::from(for_runtime::<ClusterTrainingRuntime>());
    objects.extend(for_runtime::<TrainingRuntime>());
    objects
}

/// Every object as one YAML stream, as committed in `deploy/trainjob-names.yaml`.
pub fn to_yaml() -> Result<String, PolicyYamlError> {
    let mut out = String::from(
        "# Generated by `trainset trainjob-names`: refuses at creation a TrainJob whose pod names\n\
         # would pass 63 characters (Kubernetes 1.30+).\n\
         # Install: kubectl apply --server-side -f deploy/trainjob-names.yaml\n",
    );
    for object in objects() {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&object)?);
    }
    Ok(out)
}
