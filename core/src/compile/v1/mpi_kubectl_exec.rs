//! MPIJob `kubeflow.org/v1`, as training-operator v1.9.4 runs it: no SSH and no Service. The
//! launcher starts the ranks on its workers through the API server: its MPI calls
//! `/etc/mpi/kubexec.sh <host> <command>`, which runs `kubectl exec` (the `kubectl` an init
//! container copies into `/opt/kube`) as the launcher's own ServiceAccount, whose Role lets it
//! read the namespace's pods and exec into this job's workers alone.
//!
//! The hostfile names the hosts as v1 did, `<job>-worker-<i>` (and `<job>-launcher` when the
//! launcher has a GPU), but under JobSet a pod's name ends in random characters. `kubexec.sh`
//! and `discover_hosts.sh` therefore find a host's pod by the labels JobSet and the Job
//! controller give it: the JobSet, the replicated job and the completion index, running.

use std::collections::BTreeMap;

use jobset_types::{DependsOn, DependsOnStatus, keys};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, EmptyDirVolumeSource, EnvVar, KeyToPath, PodSpec,
    ResourceRequirements, ServiceAccount, Volume, VolumeMount,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::mpi_config::{CONFIG_MOUNT, CONFIG_VOLUME, config_map_name, slots};
use super::{CompileError, Context, Extra, Framework, Group, MasterRole, Options, Success, env};
use crate::api::{MPIJob, RestartPolicy};
use crate::compile::meta::{JOB_NAME, MANAGED_BY, TRAINSET};
use crate::compile::{DEFAULT_KUBECTL_DELIVERY_IMAGE, LauncherAccess};

const HOSTFILE: &str = "hostfile";
const KUBEXEC: &str = "kubexec.sh";
const DISCOVER_HOSTS: &str = "discover_hosts.sh";
/// Where the init container puts `kubectl`, and the emptyDir that carries it.
const KUBECTL_DIR: &str = "/opt/kube";
const KUBECTL_VOLUME: &str = "mpi-job-kubectl";
const KUBECTL_DELIVERY: &str = "kubectl-delivery";
/// v1's label on the job's ConfigMap, ServiceAccount, Role and RoleBinding.
const APP: &str = "app";
const SCRIPT_MODE: i32 = 0o555;
const HOSTFILE_MODE: i32 = 0o444;
/// What a GPU resource's name contains, for v1's rule that a launcher with a GPU limit runs
/// ranks too (`nvidia.com/gpu`, `amd.com/gpu`, ...).
const GPU: &str = "gpu";

/// The launcher's name, its ServiceAccount's (unless the template names one), its Role's and
/// its host's in the hostfile.
pub fn launcher_name(job: &str) -> String {
    format!("{job}-launcher")
}

/// v1.9.4's `training.kubeflow.org/operator-name` on an MPIJob's pods: the controller keeps the
/// names of the pods with it (and no others) for the launchers' Roles.
pub const OPERATOR: &str = "mpijob-controller";

/// The replicated job whose pods the launcher runs its commands in.
pub const EXEC_TARGETS: &str = "worker";

/// The launcher Role's rules: read the namespace's pods (`kubexec.sh` finds a host's pod by its
/// labels), and exec into `pods`, the job's workers, by name. RBAC cannot name pods by label,
/// and a worker's pod name ends in random characters, so the plan keeps the names up to date as
/// the workers come and go; with none, there is no exec rule at all (an empty list of names
/// would mean every pod).
pub fn launcher_rules(pods: &[String]) -> Vec<PolicyRule> {
    let core = || Some(vec![String::new()]);
    let mut rules = vec![PolicyRule {
        api_groups: core(),
        resources: Some(vec!["pods".to_owned()]),
        verbs: vec!["get".to_owned(), "list".to_owned(), "watch".to_owned()],
        ..Default::default()
    }];
    if !pods.is_empty() {
        rules.push(PolicyRule {
            api_groups: core(),
            resources: Some(vec!["pods/exec".to_owned()]),
            resource_names: Some(pods.to_vec()),
            verbs: vec!["create".to_owned()],
            ..Default::default()
        });
    }
    rules
}

/// v1's rule: the launcher runs ranks too when one of its containers has a GPU limit.
fn launcher_has_gpu(ctx: &Context<'_, MPIJob>) -> bool {
    let Some(pod) = ctx
        .group("Launcher")
        .and_then(|g| g.spec.template.as_ref())
        .and_then(|t| t.spec.as_ref())
    else {
        return false;
    };
    pod.containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref())
        .flat_map(|limits| limits.keys())
        .any(|resource| resource.contains(GPU))
}

/// A container name, as Kubernetes allows it (a DNS label): `mainContainer` goes into a shell
/// script, and only such a name is safe there unquoted.
fn is_container_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 63
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The label selector of the running pods of replicated job `replicated` of JobSet `job`.
fn pods_of(job: &str, replicated: &str) -> String {
    format!(
        "{}={job},{}={replicated}",
        keys::label::JOBSET_NAME,
        keys::label::REPLICATED_JOB_NAME
    )
}

/// `kubexec.sh <host> <command...>`: finds the host's pod and runs the command in it.
fn kubexec(job: &str, main_container: Option<&str>) -> String {
    let container = main_container.map_or(String::new(), |c| format!(" --container={c}"));
    let launcher = launcher_name(job);
    format!(
        "#!/bin/sh\n\
         # kubexec.sh HOST COMMAND...: runs COMMAND in HOST, a name of the hostfile, through the\n\
         # API server. HOST's pod is the running one of its replicated job and index.\n\
         set -x\n\
         host=\"$1\"\n\
         shift\n\
         case \"$host\" in\n\
         {launcher}) replicated=launcher; index=0 ;;\n\
         {job}-worker-*) replicated=worker; index=\"${{host#{job}-worker-}}\" ;;\n\
         *) echo \"kubexec.sh: $host is not a host of MPIJob {job}\" >&2; exit 1 ;;\n\
         esac\n\
         pod=$({KUBECTL_DIR}/kubectl get pods --selector=\"{selector},{index_label}=$index\" \\\n\
         \x20   --field-selector=status.phase=Running --output='jsonpath={{.items[0].metadata.name}}')\n\
         if [ -z \"$pod\" ]; then echo \"kubexec.sh: no running pod for $host\" >&2; exit 1; fi\n\
         exec {KUBECTL_DIR}/kubectl exec \"$pod\"{container} -- /bin/sh -c \"$*\"\n",
        selector = pods_of(job, "$replicated"),
        index_label = keys::JOB_COMPLETION_INDEX,
    )
}

/// `discover_hosts.sh`: `<host>:<slots>` for the launcher when it runs ranks, then for each
/// running worker, as the hostfile names them (Horovod's elastic discovery).
fn discover_hosts(job: &str, slots: i32, launcher_has_gpu: bool) -> String {
    let mut script = String::from(
        "#!/bin/sh\n\
         # Prints HOST:SLOTS for each host that runs ranks, by the names of the hostfile.\n",
    );
    if launcher_has_gpu {
        script.push_str(&format!("echo {}:{slots}\n", launcher_name(job)));
    }
    let index_label = keys::JOB_COMPLETION_INDEX.replace('.', "\\.");
    script.push_str(&format!(
        "{KUBECTL_DIR}/kubectl get pods --selector=\"{selector}\" \\\n\
         \x20   --field-selector=status.phase=Running \\\n\
         \x20   --output='jsonpath={{range .items[*]}}{{.metadata.labels.{index_label}}}{{\"\\n\"}}{{end}}' |\n\
         \x20   sort -n -u | while read -r index; do echo \"{job}-worker-$index:{slots}\"; done\n",
        selector = pods_of(job, "worker"),
    ));
    script
}

fn hostfile(job: &str, workers: i32, slots: i32, launcher_has_gpu: bool) -> String {
    let mut hosts = String::new();
    if launcher_has_gpu {
        hosts.push_str(&format!("{} slots={slots}\n", launcher_name(job)));
    }
    for index in 0..workers {
        hosts.push_str(&format!("{job}-worker-{index} slots={slots}\n"));
    }
    hosts
}

fn config_volume(job: &str, items: &[(&str, i32)]) -> Volume {
    Volume {
        name: CONFIG_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map_name(job),
            items: Some(
                items
                    .iter()
                    .map(|(key, mode)| KeyToPath {
                        key: (*key).to_owned(),
                        path: (*key).to_owned(),
                        mode: Some(*mode),
                        user: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        ..Default::default()
    }
}

/// v1's init container that copies `kubectl` into the launcher, with v1's resources.
fn kubectl_delivery(image: &str, namespace: &str) -> Container {
    let resources = BTreeMap::from([
        ("cpu".to_owned(), Quantity("100m".to_owned())),
        ("memory".to_owned(), Quantity("512Mi".to_owned())),
        ("ephemeral-storage".to_owned(), Quantity("5Gi".to_owned())),
    ]);
    Container {
        name: KUBECTL_DELIVERY.to_owned(),
        image: Some(image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        env: Some(vec![
            env::value("TARGET_DIR", KUBECTL_DIR),
            env::value("NAMESPACE", namespace),
        ]),
        volume_mounts: Some(vec![
            mount(KUBECTL_VOLUME, KUBECTL_DIR),
            mount(CONFIG_VOLUME, CONFIG_MOUNT),
        ]),
        resources: Some(ResourceRequirements {
            limits: Some(resources.clone()),
            requests: Some(resources),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The launcher's variables on its first container: v1's OpenMPI and Intel MPI agents (the
/// Intel ones only where the user set none) and, unless it has a GPU, no GPU.
fn launcher_env(container: &Container, has_gpu: bool) -> Vec<EnvVar> {
    let script = |name: &str| format!("{CONFIG_MOUNT}/{name}");
    let mut vars = vec![
        env::value("OMPI_MCA_plm_rsh_agent", script(KUBEXEC)),
        env::value("OMPI_MCA_orte_default_hostfile", script(HOSTFILE)),
    ];
    if !has_gpu {
        vars.extend([
            env::value("NVIDIA_VISIBLE_DEVICES", ""),
            env::value("NVIDIA_DRIVER_CAPABILITIES", ""),
        ]);
    }
    let user_sets = |name: &str| container.env.iter().flatten().any(|var| var.name == name);
    for (name, value) in [
        ("I_MPI_HYDRA_BOOTSTRAP", "rsh".to_owned()),
        ("I_MPI_HYDRA_BOOTSTRAP_EXEC", script(KUBEXEC)),
    ] {
        if !user_sets(name) {
            vars.push(env::value(name, value));
        }
    }
    vars
}

pub struct MpiKubectlExec;

impl Framework for MpiKubectlExec {
    type Job = MPIJob;
    const FRAMEWORK: &'static str = "mpi";
    const OPERATOR_NAME: &'static str = OPERATOR;
    const PORT: Option<(&'static str, i32)> = None;
    const DNS_HOSTNAMES: bool = false;

    fn default_restart_policy(_replica_type: &str) -> RestartPolicy {
        RestartPolicy::Never
    }

    fn default_replicas(replica_type: &str) -> i32 {
        i32::from(replica_type.eq_ignore_ascii_case("launcher"))
    }

    /// The launcher waits for its workers ([`Framework::depends_on`]), and a JobSet dependency
    /// must name an earlier replicated job.
    fn order(_job: &MPIJob) -> &'static [&'static str] {
        &["Worker", "Launcher"]
    }

    fn master_role(_ctx: &Context<'_, MPIJob>, group: &Group<'_>) -> MasterRole {
        MasterRole::type_is(group, "Launcher")
    }

    /// v1 labelled its workers with their index, and its launcher with none.
    fn replica_index_offset(_ctx: &Context<'_, MPIJob>, group: &Group<'_>) -> Option<i32> {
        (group.replica_type == "Worker").then_some(0)
    }

    /// Only the launcher's first container gets variables ([`Framework::finish_pod`]).
    fn env(_ctx: &Context<'_, MPIJob>, _group: &Group<'_>) -> Vec<EnvVar> {
        Vec::new()
    }

    fn success(_ctx: &Context<'_, MPIJob>) -> Success {
        Success::all_of(&["launcher"])
    }

    /// v1 started the launcher at once, and MPI failed on workers not yet running; here it
    /// starts once every worker is ready.
    fn depends_on(ctx: &Context<'_, MPIJob>, group: &Group<'_>) -> Vec<DependsOn> {
        let workers = ctx.group("Worker").is_some_and(|g| g.replicas > 0);
        if group.replica_type == "Launcher" && workers {
            vec![DependsOn {
                name: "worker".to_owned(),
                status: DependsOnStatus::Ready,
            }]
        } else {
            Vec::new()
        }
    }

    /// The launcher gets its ServiceAccount, its host name, `kubectl` and the scripts; a worker
    /// gets `kubexec.sh` and, without a command, sleeps.
    fn finish_pod(ctx: &Context<'_, MPIJob>, group: &Group<'_>, pod: &mut PodSpec) {
        let job = ctx.name();
        if group.replica_type == "Launcher" {
            let has_gpu = launcher_has_gpu(ctx);
            if pod
                .service_account_name
                .as_deref()
                .is_none_or(str::is_empty)
            {
                pod.service_account_name = Some(launcher_name(job));
            }
            // The hostfile's name for it: MPI runs its own ranks here, not through kubexec.sh.
            if pod.hostname.is_none() {
                pod.hostname = Some(launcher_name(job));
            }
            let image = ctx
                .kubectl_delivery_image
                .as_deref()
                .unwrap_or(DEFAULT_KUBECTL_DELIVERY_IMAGE);
            pod.init_containers
                .get_or_insert_with(Vec::new)
                .push(kubectl_delivery(image, ctx.namespace()));
            pod.volumes.get_or_insert_with(Vec::new).extend([
                Volume {
                    name: KUBECTL_VOLUME.to_owned(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
                config_volume(
                    job,
                    &[
                        (KUBEXEC, SCRIPT_MODE),
                        (HOSTFILE, HOSTFILE_MODE),
                        (DISCOVER_HOSTS, SCRIPT_MODE),
                    ],
                ),
            ]);
            if let Some(container) = pod.containers.first_mut() {
                let vars = launcher_env(container, has_gpu);
                env::inject(container, &vars);
                container
                    .volume_mounts
                    .get_or_insert_with(Vec::new)
                    .extend([
                        mount(KUBECTL_VOLUME, KUBECTL_DIR),
                        mount(CONFIG_VOLUME, CONFIG_MOUNT),
                    ]);
            }
        } else {
            pod.volumes
                .get_or_insert_with(Vec::new)
                .push(config_volume(job, &[(KUBEXEC, SCRIPT_MODE)]));
            if let Some(container) = pod.containers.first_mut() {
                if container.command.as_ref().is_none_or(Vec::is_empty) {
                    container.command = Some(vec!["sleep".to_owned()]);
                    container.args = Some(vec!["365d".to_owned()]);
                }
                container
                    .volume_mounts
                    .get_or_insert_with(Vec::new)
                    .push(mount(CONFIG_VOLUME, CONFIG_MOUNT));
            }
        }
    }

    fn extra_objects(
        ctx: &Context<'_, MPIJob>,
        _options: &Options<'_>,
    ) -> Result<Extra, CompileError> {
        let job = ctx.name();
        let main_container = ctx.job.spec.main_container.as_deref();
        if let Some(name) = main_container.filter(|name| !is_container_name(name)) {
            return Err(CompileError::invalid(
                "spec.mainContainer",
                format!("Invalid value: {name:?}: must be a container name (a DNS label)"),
            ));
        }
        let labels = BTreeMap::from([
            (APP.to_owned(), job.to_owned()),
            (MANAGED_BY.to_owned(), TRAINSET.to_owned()),
            (JOB_NAME.to_owned(), ctx.owner.job_name_label()),
        ]);
        let meta = |name: String| ctx.owner.object_meta(name, labels.clone());
        let has_gpu = launcher_has_gpu(ctx);
        let slots = slots(ctx.job);
        let workers = ctx.group("Worker").map_or(0, |g| g.replicas);
        let config_map = ConfigMap {
            metadata: meta(config_map_name(job)),
            data: Some(BTreeMap::from([
                (HOSTFILE.to_owned(), hostfile(job, workers, slots, has_gpu)),
                (KUBEXEC.to_owned(), kubexec(job, main_container)),
                (
                    DISCOVER_HOSTS.to_owned(),
                    discover_hosts(job, slots, has_gpu),
                ),
            ])),
            ..Default::default()
        };
        let own_account = ctx
            .group("Launcher")
            .and_then(|g| g.spec.template.as_ref()?.spec.as_ref())
            .and_then(|pod| pod.service_account_name.clone())
            .filter(|name| !name.is_empty());
        let account = own_account.clone().unwrap_or_else(|| launcher_name(job));
        let access = LauncherAccess {
            service_account: own_account.is_none().then(|| ServiceAccount {
                metadata: meta(launcher_name(job)),
                ..Default::default()
            }),
            role: Role {
                metadata: meta(launcher_name(job)),
                rules: Some(launcher_rules(&[])),
            },
            role_binding: RoleBinding {
                metadata: meta(launcher_name(job)),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".to_owned()),
                    kind: "Role".to_owned(),
                    name: launcher_name(job),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".to_owned(),
                    name: account,
                    namespace: Some(ctx.namespace().to_owned()),
                    ..Default::default()
                }]),
            },
        };
        Ok(Extra {
            config_map: Some(config_map),
            secret: None,
            launcher_access: Some(access),
        })
    }
}
