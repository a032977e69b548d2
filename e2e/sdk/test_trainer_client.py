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
from kubeflow.trainer import CustomTrainer, TrainerClient
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

SHIPPED = {
    "torch-distributed",
    "jax-distributed",
    "xgboost-distributed",
    "deepspeed-distributed",
    "mlx-distributed",
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


def test_train_on_an_mpi_runtime_completes_with_the_launcher_as_node_0(trainer_client):
    name = trainer_client.train(
        runtime="deepspeed-distributed",
        trainer=CustomTrainer(func=train_fn, num_nodes=3, resources_per_node={"cpu": 1}),
    )
    job = trainer_client.wait_for_job_status(name, {"Complete"}, timeout=WAIT, polling_interval=1)
    assert job.status == "Complete"
    assert job.num_nodes == 3
    # The SDK names an mpirun job's launcher node-0 and the `node` pods node-1, node-2.
    steps = {step.name: step.status for step in trainer_client.get_job(name).steps}
    assert steps == {"node-0": "Succeeded", "node-1": "Succeeded", "node-2": "Succeeded"}, steps
    logs = list(trainer_client.get_job_logs(name))
    assert all(isinstance(line, str) for line in logs), logs
    trainer_client.delete_job(name)
