//! MPIJob `kubeflow.org/v2beta1`, as mpi-operator runs it: a launcher reaching its workers over
//! SSH, with a hostfile ConfigMap (`<name>-config`) and an SSH key Secret (`<name>-ssh`) that
//! trainset creates.

use std::collections::BTreeMap;

use jobset_types::{DependsOn, DependsOnStatus, ReplicatedJob};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EnvVar, KeyToPath, PodSpec, SecretVolumeSource, Volume,
    VolumeMount,
};

use super::mpi_config::{CONFIG_MOUNT, CONFIG_VOLUME, config_map_name, slots};
use super::{CompileError, Context, Extra, Framework, Group, Options, Success, env, gang};
use crate::api::{LauncherCreationPolicy, MPIImplementation, MPIJob, RestartPolicy};
use crate::compile::gang::requests::{BadQuantity, Limits, container_requests};
use crate::compile::gang::{Convention, Gang, QUEUE_NAME_ANNOTATION};
use crate::compile::meta::{JOB_NAME, JOB_ROLE, MANAGED_BY, TRAINSET};
use crate::compile::ssh::{HOSTFILE, SSH_ARGS, SSH_PRIVATE_KEY, SSH_PUBLIC_KEY, ssh_auth_secret};
use crate::quantity::{ResourceSums, add_to};

const DEFAULT_SSH_PATH: &str = "/root/.ssh";
const SSH_VOLUME: &str = "ssh-auth";

/// What the launcher and the first `min_member - 1` workers ask for (all of them when they fit):
/// each container's requests, and its limits of what it requests nothing of.
fn launcher_and_workers_requests(
    ctx: &Context<'_, MPIJob>,
    min_member: i32,
) -> Result<ResourceSums, BadQuantity> {
    let launchers = ctx.group("Launcher").map_or(0, |g| g.replicas);
    let workers = ctx.group("Worker").map_or(0, |g| g.replicas);
    let counted_workers = if launchers.saturating_add(workers) > min_member {
        min_member - 1
    } else {
        workers
    };
    let mut sums = ResourceSums::new();
    for group in &ctx.groups {
        let pods = if group.replica_type == "Worker" {
            counted_workers
        } else {
            group.replicas
        };
        let Some(pod) = group.spec.template.as_ref().and_then(|t| t.spec.as_ref()) else {
            continue;
        };
        let field = gang::template_field::<MPIJob>(group);
        for (name, quantity) in container_requests(pod, &field, Limits::OfUnrequested)? {
            add_to(&mut sums, &name, quantity.times(i64::from(pods)));
        }
    }
    Ok(sums)
}

/// The MPIJob's SSH key Secret: `<name>-ssh`, as mpi-operator.
fn ssh_secret_name(job: &str) -> String {
    format!("{job}-ssh")
}

pub struct MpiSsh;

impl Framework for MpiSsh {
    type Job = MPIJob;
    const FRAMEWORK: &'static str = "mpi";
    const DETAILED_FAILURE_REASON: bool = true;
    const OPERATOR_NAME: &'static str = "mpi-operator";
    const PORT: Option<(&'static str, i32)> = None;
    const NEEDS_SSH_KEY: bool = true;

    fn default_restart_policy(replica_type: &str) -> RestartPolicy {
        if replica_type == "Launcher" {
            RestartPolicy::OnFailure
        } else {
            RestartPolicy::Never
        }
    }

    fn default_replicas(replica_type: &str) -> i32 {
        i32::from(replica_type.eq_ignore_ascii_case("launcher"))
    }

    /// A JobSet dependency must name an earlier replicated job, so a launcher that waits for its
    /// workers comes after them.
    fn order(job: &MPIJob) -> &'static [&'static str] {
        match job.spec.launcher_creation_policy {
            Some(LauncherCreationPolicy::WaitForWorkersReady) => &["Worker", "Launcher"],
            _ => &["Launcher", "Worker"],
        }
    }

    /// mpi-operator's roles: `launcher` and `worker`.
    fn role_labels(
        _ctx: &Context<'_, MPIJob>,
        group: &Group<'_>,
    ) -> Vec<(&'static str, &'static str)> {
        match group.replica_type {
            "Launcher" => vec![(JOB_ROLE, "launcher")],
            _ => vec![(JOB_ROLE, "worker")],
        }
    }

    /// mpi-operator numbers only workers, unless the launcher is a worker too: then it is index
    /// 0 and the workers count from 1.
    fn replica_index_offset(ctx: &Context<'_, MPIJob>, group: &Group<'_>) -> Option<i32> {
        let launcher_is_worker = ctx.job.spec.run_launcher_as_worker == Some(true);
        match (group.replica_type, launcher_is_worker) {
            ("Launcher", false) => None,
            ("Launcher", true) => Some(0),
            (_, launcher_is_worker) => Some(i32::from(launcher_is_worker)),
        }
    }

    fn env(ctx: &Context<'_, MPIJob>, group: &Group<'_>) -> Vec<EnvVar> {
        if group.replica_type != "Launcher" {
            return vec![env::value("K_MPI_JOB_ROLE", "worker")];
        }
        let slots = slots(ctx.job).to_string();
        let mut vars = vec![env::value("K_MPI_JOB_ROLE", "launcher")];
        match ctx
            .job
            .spec
            .mpi_implementation
            .unwrap_or(MPIImplementation::OpenMPI)
        {
            MPIImplementation::OpenMPI => vars.extend([
                env::value("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                env::value("OMPI_MCA_orte_default_hostfile", HOSTFILE),
                env::value("OMPI_MCA_plm_rsh_args", SSH_ARGS),
                env::value("OMPI_MCA_orte_set_default_slots", slots),
            ]),
            MPIImplementation::Intel => vars.extend([
                env::value("I_MPI_HYDRA_HOST_FILE", HOSTFILE),
                env::value("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", SSH_ARGS),
                env::value("I_MPI_PERHOST", slots),
            ]),
            MPIImplementation::Mpich => vars.extend([
                env::value("HYDRA_HOST_FILE", HOSTFILE),
                env::value("HYDRA_LAUNCH_EXTRA_ARGS", SSH_ARGS),
            ]),
        }
        if ctx.job.spec.run_launcher_as_worker != Some(true) {
            // A launcher that runs no ranks must not grab the node's GPUs.
            vars.extend([
                env::value("NVIDIA_VISIBLE_DEVICES", ""),
                env::value("NVIDIA_DRIVER_CAPABILITIES", ""),
            ]);
        }
        vars
    }

    fn success(_ctx: &Context<'_, MPIJob>) -> Success {
        Success::all_of(&["launcher"])
    }

    fn depends_on(ctx: &Context<'_, MPIJob>, group: &Group<'_>) -> Vec<DependsOn> {
        let waits = ctx.job.spec.launcher_creation_policy
            == Some(LauncherCreationPolicy::WaitForWorkersReady);
        if waits && group.replica_type == "Launcher" && ctx.group("Worker").is_some() {
            vec![DependsOn {
                name: "worker".to_owned(),
                status: DependsOnStatus::Ready,
            }]
        } else {
            Vec::new()
        }
    }

    /// mpi-operator v0.8.2's gang: the workers and the launcher unless `minAvailable` says
    /// otherwise; the queue from the policy, else the job's `scheduling.volcano.sh/queue-name`
    /// annotation; the priority class from the policy, else the launcher's pods', else the
    /// workers'; `minResources` as given, else the launcher and as many workers as `minMember`
    /// leaves room for; scheduler-plugins' timeout 0 unless set. mpi-operator orders the two by
    /// their PriorityClasses' values; trainset reads none and counts them as equal, as
    /// mpi-operator does when the pods name no class.
    fn gang(
        ctx: &Context<'_, MPIJob>,
        replicated_jobs: &[ReplicatedJob],
    ) -> Result<Gang, CompileError> {
        let policy = gang::policy(ctx);
        let replicas = |replica_type| ctx.group(replica_type).map_or(0, |g| g.replicas);
        let min_member = match policy.and_then(|p| p.min_available) {
            Some(min) => min,
            None => replicas("Worker").saturating_add(1),
        };
        let non_empty = |s: &String| !s.is_empty();
        let pod_priority = |replica_type| {
            let pod = ctx
                .group(replica_type)?
                .spec
                .template
                .as_ref()?
                .spec
                .as_ref()?;
            pod.priority_class_name.clone().filter(non_empty)
        };
        let annotations = ctx.job.metadata.annotations.as_ref();
        let gang = Gang {
            min_member,
            queue: policy
                .and_then(|p| p.queue.clone())
                .filter(non_empty)
                .or_else(|| annotations?.get(QUEUE_NAME_ANNOTATION).cloned()),
            priority_class: policy
                .and_then(|p| p.priority_class.clone())
                .filter(non_empty)
                .or_else(|| pod_priority("Launcher"))
                .or_else(|| pod_priority("Worker")),
            schedule_timeout_seconds: Some(
                policy.and_then(|p| p.schedule_timeout_seconds).unwrap_or(0),
            ),
            ..gang::base(ctx, replicated_jobs, Convention::MpiOperator)
        };
        let min_resources = match gang::given_resources(policy)? {
            Some(given) => given,
            None => launcher_and_workers_requests(ctx, min_member)?,
        };
        Ok(Gang {
            min_resources: Some(min_resources),
            ..gang
        })
    }

    /// Mounts the SSH keys on container 0 of every pod and the hostfile on the launcher; workers
    /// without a command run sshd.
    fn finish_pod(ctx: &Context<'_, MPIJob>, group: &Group<'_>, pod: &mut PodSpec) {
        let ssh_path = ctx
            .job
            .spec
            .ssh_auth_mount_path
            .clone()
            .unwrap_or_else(|| DEFAULT_SSH_PATH.to_owned());
        let item = |key: &str, path: &str, mode: Option<i32>| KeyToPath {
            key: key.to_owned(),
            path: path.to_owned(),
            mode,
            user: None,
        };
        let mut volumes = vec![Volume {
            name: SSH_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(ssh_secret_name(ctx.name())),
                // OpenSSH refuses keys others can read; only root's default path is known to be
                // owned by the user, as mpi-operator does.
                default_mode: (ssh_path == DEFAULT_SSH_PATH).then_some(0o600),
                items: Some(vec![
                    item(SSH_PRIVATE_KEY, "id_rsa", None),
                    item(SSH_PUBLIC_KEY, "id_rsa.pub", None),
                    item(SSH_PUBLIC_KEY, "authorized_keys", None),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }];
        let mut mounts = vec![VolumeMount {
            name: SSH_VOLUME.to_owned(),
            mount_path: ssh_path,
            ..Default::default()
        }];
        if group.replica_type == "Launcher" {
            volumes.push(Volume {
                name: CONFIG_VOLUME.to_owned(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map_name(ctx.name()),
                    items: Some(vec![
                        item("hostfile", "hostfile", Some(0o444)),
                        item("discover_hosts.sh", "discover_hosts.sh", Some(0o555)),
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            });
            mounts.push(VolumeMount {
                name: CONFIG_VOLUME.to_owned(),
                mount_path: CONFIG_MOUNT.to_owned(),
                ..Default::default()
            });
        }
        pod.volumes.get_or_insert_with(Vec::new).extend(volumes);
        if let Some(container) = pod.containers.first_mut() {
            container
                .volume_mounts
                .get_or_insert_with(Vec::new)
                .extend(mounts);
            if group.replica_type == "Worker"
                && container.command.as_ref().is_none_or(Vec::is_empty)
            {
                container.command = Some(vec!["/usr/sbin/sshd".to_owned(), "-De".to_owned()]);
            }
        }
    }

    fn extra_objects(
        ctx: &Context<'_, MPIJob>,
        options: &Options<'_>,
    ) -> Result<Extra, CompileError> {
        let key = options.ssh_key.ok_or_else(|| CompileError::MissingSshKey {
            name: ctx.name().to_owned(),
        })?;
        let labels = BTreeMap::from([
            (MANAGED_BY.to_owned(), TRAINSET.to_owned()),
            (JOB_NAME.to_owned(), ctx.owner.job_name_label()),
        ]);
        let hosts = hosts(ctx);
        let slots = slots(ctx.job);
        let hostfile: String = hosts
            .iter()
            .map(|host| {
                match ctx
                    .job
                    .spec
                    .mpi_implementation
                    .unwrap_or(MPIImplementation::OpenMPI)
                {
                    MPIImplementation::OpenMPI => format!("{host} slots={slots}\n"),
                    MPIImplementation::Intel | MPIImplementation::Mpich => {
                        format!("{host}:{slots}\n")
                    }
                }
            })
            .collect();
        let mut discover = String::from("#!/bin/sh\n");
        for host in &hosts {
            discover.push_str(&format!("echo {host}\n"));
        }
        let config_map = ConfigMap {
            metadata: ctx
                .owner
                .object_meta(config_map_name(ctx.name()), labels.clone()),
            data: Some(BTreeMap::from([
                ("hostfile".to_owned(), hostfile),
                ("discover_hosts.sh".to_owned(), discover),
            ])),
            ..Default::default()
        };
        let metadata = ctx.owner.object_meta(ssh_secret_name(ctx.name()), labels);
        Ok(Extra {
            config_map: Some(config_map),
            secret: Some(ssh_auth_secret(metadata, key)),
            launcher_access: None,
        })
    }
}

/// Every host that runs ranks, fully qualified: the launcher first when it is a worker too.
fn hosts(ctx: &Context<'_, MPIJob>) -> Vec<String> {
    let mut hosts = Vec::new();
    if ctx.job.spec.run_launcher_as_worker == Some(true)
        && let Some(launcher) = ctx.group("Launcher")
    {
        hosts.push(ctx.service_address(launcher, 0));
    }
    if let Some(worker) = ctx.group("Worker") {
        hosts.extend((0..worker.replicas).map(|i| ctx.service_address(worker, i)));
    }
    hosts
}
