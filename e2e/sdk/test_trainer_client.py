"""The Kubeflow SDK (`kubeflow` 0.5.0 from PyPI, unchanged; `kubeflow.trainer.TrainerClient`)
against trainset on the local control plane: a Trainer v2 user's calls, on the runtimes trainset
ships (deploy/runtimes). KWOK runs the pods: they succeed after a second, and the cluster's
kubelet-logs endpoint serves their (empty) logs.

Run by e2e/sdk/run trainer, which makes the venv, installs the CRDs and runtimes, starts trainset
and sets KUBECONFIG.
"""

import uuid

import pytest
from polling import WAIT, wait_until
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer.options import (
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    PodTemplatePatch,
    ReplicatedJobPatch,
    RuntimePatch,
    TrainingRuntimeSpecPatch,
)
from kubeflow.trainer import (
    BuiltinTrainer,
    CustomTrainer,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    LoraConfig,
    TorchTuneConfig,
    TrainerClient,
    TrainerType,
)
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

SHIPPED = {
    "torch-distributed",
    "jax-distributed",
    "xgboost-distributed",
    "deepspeed-distributed",
    "mlx-distributed",
    "torchtune-llama3.2-1b",
    "torchtune-llama3.2-3b",
    "torchtune-qwen2.5-1.5b",
}


@pytest.fixture(scope="module")
def namespace():
    k8s_config.load_kube_config()
    name = f"sdk2-{uuid.uuid4().hex[:6]}"
    core = k8s.CoreV1Api()
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def trainer_client(namespace):
    # As a notebook user would, for one namespace.
    return TrainerClient(KubernetesBackendConfig(namespace=namespace))


def train_fn():
    print("training")


def test_the_public_configmap_says_which_trainer_api_the_cluster_serves():
    k8s_config.load_kube_config()
    public = k8s.CoreV1Api().read_namespaced_config_map("kubeflow-trainer-public", "kubeflow-system")
    assert public.data["kubeflow_trainer_version"] == "v2.3.0"


def test_list_runtimes_shows_the_shipped_runtimes(trainer_client):
    runtimes = {r.name: r for r in trainer_client.list_runtimes()}
    assert SHIPPED <= set(runtimes), sorted(runtimes)
    assert runtimes["torch-distributed"].trainer.framework == "torch"
    assert runtimes["xgboost-distributed"].trainer.framework == "xgboost"
    # The SDK offers torchtune runtimes for BuiltinTrainer fine-tuning, by their framework label.
    tune = runtimes["torchtune-qwen2.5-1.5b"].trainer
    assert tune.trainer_type == TrainerType.BUILTIN_TRAINER, tune
    assert tune.device == "gpu" and float(tune.device_count) == 2, tune


def test_train_on_torch_distributed_runs_to_complete_and_delete_removes_it(trainer_client, namespace):
    name = trainer_client.train(
        runtime="torch-distributed",
        trainer=CustomTrainer(func=train_fn, num_nodes=2, resources_per_node={"cpu": 1}),
    )
    job = trainer_client.wait_for_job_status(name, {"Complete"}, timeout=WAIT, polling_interval=1)
    assert job.status == "Complete"
    assert job.num_nodes == 2
    assert job.runtime.name == "torch-distributed"
    # One step per node, named as the SDK names them, each pod having succeeded.
    steps = {step.name: step.status for step in trainer_client.get_job(name).steps}
    assert steps == {"node-0": "Succeeded", "node-1": "Succeeded"}, steps
    # KWOK's pods print nothing; the call must work all the same.
    logs = list(trainer_client.get_job_logs(name))
    assert all(isinstance(line, str) for line in logs), logs
    reasons = {event.reason for event in trainer_client.get_job_events(name)}
    assert "JobSetCreated" in reasons, reasons
    assert name in {j.name for j in trainer_client.list_jobs()}

    trainer_client.delete_job(name)
    custom = k8s.CustomObjectsApi()
    core = k8s.CoreV1Api()

    def gone():
        try:
            custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
            return False
        except ApiException as error:
            if error.status != 404:
                raise
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        return not core.list_namespaced_pod(namespace, label_selector=selector).items

    wait_until(f"the JobSet and pods of {name} to go", gone)


@pytest.mark.parametrize("runtime", ["jax-distributed", "xgboost-distributed"])
def test_train_on_the_other_shipped_runtimes_completes(trainer_client, runtime):
    name = trainer_client.train(
        runtime=runtime,
        trainer=CustomTrainer(func=train_fn, num_nodes=2, resources_per_node={"cpu": 1}),
    )
    job = trainer_client.wait_for_job_status(name, {"Complete"}, timeout=WAIT, polling_interval=1)
    assert job.status == "Complete"
    trainer_client.delete_job(name)


def kwok_run_time(seconds):
    """Pod annotations making KWOK's pods of a replicated job run `seconds` before they succeed
    (the jitter bound is the total delay)."""
    delay = f"{seconds}s"
    return {
        "annotations": {
            "pod-complete.stage.kwok.x-k8s.io/delay": delay,
            "pod-complete.stage.kwok.x-k8s.io/jitter-delay": delay,
        }
    }


def test_train_on_an_mpi_runtime_completes_with_the_launcher_as_node_0(trainer_client):
    # As on a real cluster: the `node` pods (sshd) run until the launcher (mpirun) is done; here
    # the launcher runs 10 s and the nodes would run 10 min.
    pods = [
        ReplicatedJobPatch(
            name=job,
            template=JobTemplatePatch(spec=JobSpecPatch(template=PodTemplatePatch(metadata=metadata))),
        )
        for job, metadata in [("node", kwok_run_time(600)), ("launcher", kwok_run_time(10))]
    ]
    patch = RuntimePatch(
        training_runtime_spec=TrainingRuntimeSpecPatch(
            template=JobSetTemplatePatch(spec=JobSetSpecPatch(replicated_jobs=pods))
        )
    )
    name = trainer_client.train(
        runtime="deepspeed-distributed",
        trainer=CustomTrainer(func=train_fn, num_nodes=3, resources_per_node={"cpu": 1}),
        options=[patch],
    )
    # The SDK names an mpirun job's launcher node-0 and the `node` pods node-1, node-2.
    wait_until(
        f"the three steps of {name}",
        lambda: {step.name for step in trainer_client.get_job(name).steps}
        == {"node-0", "node-1", "node-2"},
    )
    logs = list(trainer_client.get_job_logs(name))
    assert all(isinstance(line, str) for line in logs), logs
    job = trainer_client.wait_for_job_status(name, {"Complete"}, timeout=WAIT, polling_interval=1)
    assert job.status == "Complete"
    assert job.num_nodes == 3
    # The launcher's success completes the JobSet (its successPolicy), which ends the nodes.
    wait_until(
        f"only the launcher's step of {name}",
        lambda: {step.name: step.status for step in trainer_client.get_job(name).steps}
        == {"node-0": "Succeeded"},
    )
    trainer_client.delete_job(name)


@pytest.fixture
def initializer_volume():
    """A PersistentVolume for the PVC the JobSet controller makes from a torchtune runtime's
    volumeClaimPolicies (a real cluster's storage class would provision one)."""
    k8s_config.load_kube_config()
    core = k8s.CoreV1Api()
    name = f"sdk2-initializer-{uuid.uuid4().hex[:6]}"
    volume = k8s.V1PersistentVolume(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1PersistentVolumeSpec(
            capacity={"storage": "20Gi"},
            access_modes=["ReadWriteOnce"],
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",
            host_path=k8s.V1HostPathVolumeSource(path=f"/tmp/{name}"),
        ),
    )
    core.create_persistent_volume(volume)
    yield name
    core.delete_persistent_volume(name)


def test_a_builtin_trainer_fine_tunes_on_a_torchtune_runtime_after_its_initializers(
    trainer_client, namespace, initializer_volume
):
    name = trainer_client.train(
        runtime="torchtune-llama3.2-1b",
        initializer=Initializer(
            dataset=HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"),
            model=HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct"),
        ),
        trainer=BuiltinTrainer(
            config=TorchTuneConfig(
                epochs=1,
                batch_size=2,
                peft_config=LoraConfig(lora_rank=8, lora_attn_modules=["q_proj", "v_proj"]),
                resources_per_node={"gpu": 2},
            )
        ),
    )
    job = trainer_client.wait_for_job_status(name, {"Complete"}, timeout=WAIT, polling_interval=1)
    assert job.status == "Complete"
    # The initializers ran, then the trainer (the JobSet's dependsOn).
    steps = {step.name: step.status for step in trainer_client.get_job(name).steps}
    assert steps == {
        "dataset-initializer": "Succeeded",
        "model-initializer": "Succeeded",
        "node-0": "Succeeded",
    }, steps
    # The command trainset assembled: LoRA over the node's two GPUs, the runtime's paths.
    jobset = k8s.CustomObjectsApi().get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name
    )
    node = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "node")
    container = node["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == [
        "tune",
        "run",
        f"--rdzv_endpoint={name}-node-0-0.{name}:29500",
        "lora_finetune_distributed",
        "--config",
        "llama3_2/1B_lora",
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ], container["command"]
    assert "model.lora_attn_modules=[q_proj,v_proj]" in container["args"], container["args"]
    # The initializers' volume is the PVC made from the runtime's volumeClaimPolicies.
    claim = k8s.CoreV1Api().read_namespaced_persistent_volume_claim(f"initializer-{name}", namespace)
    assert claim.status.phase == "Bound" and claim.spec.volume_name == initializer_volume, claim.status
    trainer_client.delete_job(name)
