//! `mlPolicy.mpi` (OpenMPI, the one implementation Trainer v2.3.0 accepts): the `launcher`
//! replicated job runs `mpirun` over a hostfile listing the pods of the `node` replicated job (and
//! the launcher's own with `runLauncherAsNode`), which it reaches by SSH with the key pair of the
//! Secret `<trainjob>-mpi-ssh-auth`.

use std::collections::BTreeMap;

use jobset_types::{JobSetSpec, ReplicatedJob};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, KeyToPath, PodSpec, SecretVolumeSource, Volume, VolumeMount,
};

use super::policy::{Beside, MlPolicy, Node, NodeCounts};
use super::resources::merged_resources;
use super::{DATASET_INITIALIZER, MODEL_INITIALIZER, NODE, TRAINER_STEP, container, step, upsert};
use crate::api::limits::MAX_TOTAL_REPLICAS;
use crate::api::trainer::MPIMLPolicySource;
use crate::compile::CompileError;
use crate::compile::env;
use crate::compile::meta::{MANAGED_BY, Owner, TRAINSET};
use crate::compile::ssh::{
    HOSTFILE, SSH_ARGS, SSH_PRIVATE_KEY, SSH_PUBLIC_KEY, SshKeyPair, ssh_auth_secret,
};

/// The replicated job that runs `mpirun`.
const LAUNCHER: &str = "launcher";
const SSH_AUTH_VOLUME: &str = "mpi-ssh-auth";
const HOSTFILE_VOLUME: &str = "mpi-hostfile";
const DEFAULT_SSH_PATH: &str = "/root/.ssh";
const HOSTFILE_ENV: &str = "OMPI_MCA_orte_default_hostfile";
const RSH_ARGS_ENV: &str = "OMPI_MCA_plm_rsh_args";
const KEEP_FQDN_ENV: &str = "OMPI_MCA_orte_keep_fqdn_hostnames";
const DEFAULT_SLOTS_ENV: &str = "OMPI_MCA_orte_set_default_slots";
const RESERVED: &[&str] = &[HOSTFILE_ENV, RSH_ARGS_ENV, KEEP_FQDN_ENV, DEFAULT_SLOTS_ENV];

/// `<trainjob>-mpi-ssh-auth`.
fn ssh_auth_name(job: &str) -> String {
    format!("{job}-mpi-ssh-auth")
}

/// `<trainjob>-mpi-hostfile`.
fn hostfile_name(job: &str) -> String {
    format!("{job}-mpi-hostfile")
}

pub struct Mpi<'a> {
    source: &'a MPIMLPolicySource,
}

impl MlPolicy for Mpi<'_> {
    fn reserved(&self) -> &'static [&'static str] {
        RESERVED
    }

    /// The trainer's replicated job (the launcher) keeps the runtime's count, as the nodes are
    /// the `node` job's: `trainer.numNodes` of them, one fewer when the launcher is a node too.
    fn pod_count(&self, replicated: &ReplicatedJob, counts: &NodeCounts) -> Option<i32> {
        if step(replicated) == Some(TRAINER_STEP) {
            Some(counts.runtime.unwrap_or(1))
        } else if replicated.name == NODE {
            counts.requested.map(|n| {
                if self.launcher_is_node() {
                    (n - 1).max(1)
                } else {
                    n
                }
            })
        } else {
            None
        }
    }

    /// The SSH key's volume on the `node` and `launcher` pods, mounted in their `node`
    /// containers; on the launcher also the hostfile, at `/etc/mpi`, and OpenMPI's env. With
    /// `runLauncherAsNode` the `node` pods are trainers too: the trainer's resources and env
    /// reach them (kubeflow/trainer#3602).
    fn pod_spec(&self, spec: &mut JobSetSpec, node: &Node<'_>) -> Result<(), CompileError> {
        let slots = self.slots(node);
        for replicated in &mut spec.replicated_jobs {
            if replicated.name == LAUNCHER || replicated.name == NODE {
                self.attach(replicated, node.job, slots);
            }
            let trains_too = replicated.name == NODE
                && self.launcher_is_node()
                && !matches!(
                    step(replicated),
                    Some(TRAINER_STEP | DATASET_INITIALIZER | MODEL_INITIALIZER)
                );
            if let (true, Some(trainer), Some(container)) =
                (trains_too, node.trainer, container(replicated, NODE))
            {
                container.resources = merged_resources(container.resources.as_ref(), trainer)?;
                upsert(container, &trainer.env);
            }
        }
        Ok(())
    }

    fn ssh_secret(&self, job: &str) -> Option<String> {
        Some(ssh_auth_name(job))
    }

    /// The hostfile ConfigMap, and the SSH Secret when given a key.
    fn build(
        &self,
        spec: &JobSetSpec,
        owner: &Owner,
        node: &Node<'_>,
        ssh_key: Option<&SshKeyPair>,
    ) -> Result<Beside, CompileError> {
        let labels = BTreeMap::from([(MANAGED_BY.to_owned(), TRAINSET.to_owned())]);
        Ok(Beside {
            config_map: Some(self.hostfile(spec, owner, self.slots(node))?),
            secret: ssh_key.map(|key| {
                ssh_auth_secret(owner.object_meta(ssh_auth_name(&owner.name), labels), key)
            }),
        })
    }
}

impl<'a> Mpi<'a> {
    /// The policy, refusing an implementation other than OpenMPI.
    pub fn new(source: &'a MPIMLPolicySource) -> Result<Self, CompileError> {
        match source.mpi_implementation.as_deref() {
            None | Some("" | "OpenMPI") => Ok(Self { source }),
            Some(other) => Err(CompileError::invalid(
                "spec.runtimeRef",
                format!(
                    "the runtime's mlPolicy.mpi.mpiImplementation {other:?} is not supported (OpenMPI is)"
                ),
            )),
        }
    }

    /// Whether the launcher is also a node of the hostfile.
    fn launcher_is_node(&self) -> bool {
        self.source.run_launcher_as_node == Some(true)
    }

    /// Slots per node: `trainer.numProcPerNode`, else the runtime's (default 1); a 1 becomes the
    /// GPU count when a node has more than one.
    fn slots(&self, node: &Node<'_>) -> i32 {
        match node.trainer.and_then(|t| t.num_proc_per_node) {
            Some(count) => count,
            None => match self.source.num_proc_per_node.unwrap_or(1) {
                1 if node.gpus > 1 => i32::try_from(node.gpus).unwrap_or(i32::MAX),
                count => count,
            },
        }
    }

    /// The key's volume and mount on a `node` or `launcher` pod; on the launcher also the
    /// hostfile's and OpenMPI's env.
    fn attach(&self, replicated: &mut ReplicatedJob, job: &str, slots: i32) {
        let ssh_path = self
            .source
            .ssh_auth_mount_path
            .clone()
            .unwrap_or_else(|| DEFAULT_SSH_PATH.to_owned());
        let (hostfile_dir, hostfile_key) =
            HOSTFILE.rsplit_once('/').unwrap_or(("/etc/mpi", HOSTFILE));
        let launcher = replicated.name == LAUNCHER;
        let Some(pod) = pod_spec(replicated) else {
            return;
        };
        upsert_volume(pod, ssh_auth_volume(job));
        if launcher {
            upsert_volume(pod, hostfile_volume(job, hostfile_key));
        }
        for container in pod.containers.iter_mut().filter(|c| c.name == NODE) {
            upsert_mount(container, SSH_AUTH_VOLUME, &ssh_path);
            if launcher {
                upsert_mount(container, HOSTFILE_VOLUME, hostfile_dir);
                upsert(
                    container,
                    &[
                        env::value(HOSTFILE_ENV, HOSTFILE),
                        env::value(KEEP_FQDN_ENV, "true"),
                        env::value(DEFAULT_SLOTS_ENV, slots.to_string()),
                        env::value(RSH_ARGS_ENV, SSH_ARGS),
                    ],
                );
            }
        }
    }

    /// The hostfile ConfigMap: `<pod address> slots=<n>` for every pod of the `node` replicated
    /// job (and of the launcher's when it is a node), in the JobSet's order; at most
    /// [`MAX_TOTAL_REPLICAS`] lines.
    fn hostfile(
        &self,
        spec: &JobSetSpec,
        owner: &Owner,
        slots: i32,
    ) -> Result<ConfigMap, CompileError> {
        let job = owner.name.as_str();
        let subdomain = spec
            .network
            .as_ref()
            .and_then(|n| n.subdomain.clone())
            .unwrap_or_else(|| job.to_owned());
        let listed =
            |r: &&ReplicatedJob| r.name == NODE || (self.launcher_is_node() && r.name == LAUNCHER);
        let pods = |r: &ReplicatedJob| {
            r.template
                .spec
                .as_ref()
                .and_then(|s| s.parallelism)
                .unwrap_or(1)
        };
        let hosts = spec
            .replicated_jobs
            .iter()
            .filter(listed)
            .try_fold(0i64, |sum, r| {
                sum.checked_add(i64::from(r.replicas.unwrap_or(1)) * i64::from(pods(r)))
            });
        if hosts.is_none_or(|hosts| hosts > i64::from(MAX_TOTAL_REPLICAS)) {
            return Err(CompileError::invalid(
                "spec.trainer.numNodes",
                format!("the MPI hostfile may list at most {MAX_TOTAL_REPLICAS} pods"),
            ));
        }
        let mut text = String::new();
        for replicated in spec.replicated_jobs.iter().filter(listed) {
            let pods = pods(replicated);
            for index in 0..replicated.replicas.unwrap_or(1) {
                for pod in 0..pods {
                    text.push_str(&format!(
                        "{job}-{}-{index}-{pod}.{subdomain} slots={slots}\n",
                        replicated.name
                    ));
                }
            }
        }
        let (_, key) = HOSTFILE.rsplit_once('/').unwrap_or(("", HOSTFILE));
        let labels = BTreeMap::from([(MANAGED_BY.to_owned(), TRAINSET.to_owned())]);
        Ok(ConfigMap {
            metadata: owner.object_meta(hostfile_name(job), labels),
            data: Some(BTreeMap::from([(key.to_owned(), text)])),
            ..ConfigMap::default()
        })
    }
}

fn pod_spec(replicated: &mut ReplicatedJob) -> Option<&mut PodSpec> {
    replicated.template.spec.as_mut()?.template.spec.as_mut()
}

fn upsert_volume(pod: &mut PodSpec, volume: Volume) {
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    match volumes.iter_mut().find(|v| v.name == volume.name) {
        Some(own) => *own = volume,
        None => volumes.push(volume),
    }
}

fn upsert_mount(container: &mut k8s_openapi::api::core::v1::Container, name: &str, path: &str) {
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    let mount = VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..VolumeMount::default()
    };
    match mounts.iter_mut().find(|m| m.mount_path == path) {
        Some(own) => *own = mount,
        None => mounts.push(mount),
    }
}

fn item(key: &str, path: &str, mode: i32) -> KeyToPath {
    KeyToPath {
        key: key.to_owned(),
        path: path.to_owned(),
        mode: Some(mode),
        user: None,
    }
}

/// The key pair, owner-readable by default; the private key also group-readable, the public
/// ones world-readable (Trainer's modes).
fn ssh_auth_volume(job: &str) -> Volume {
    Volume {
        name: SSH_AUTH_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(ssh_auth_name(job)),
            default_mode: Some(0o400),
            items: Some(vec![
                item(SSH_PRIVATE_KEY, "id_rsa", 0o640),
                item(SSH_PUBLIC_KEY, "id_rsa.pub", 0o644),
                item(SSH_PUBLIC_KEY, "authorized_keys", 0o644),
            ]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn hostfile_volume(job: &str, key: &str) -> Volume {
    Volume {
        name: HOSTFILE_VOLUME.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: hostfile_name(job),
            items: Some(vec![item(key, key, 0o444)]),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }
}
