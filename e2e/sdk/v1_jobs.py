"""The v1 jobs the kubeflow-training SDK suites build, with the SDK's own model classes, and what
they read back. Shared by test_training_client.py and test_training_gang.py."""

import uuid

import pytest
from polling import WAIT
from kubeflow.training import TrainingClient
from kubeflow.training import models as m
from kubeflow.training.constants import constants
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
KWOK_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


@pytest.fixture(scope="module")
def namespace(training_client):
    # The client has loaded KUBECONFIG for the kubernetes module too.
    core = k8s.CoreV1Api()
    name = f"sdk-{uuid.uuid4().hex[:6]}"
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def training_client():
    # Loads KUBECONFIG, as a user's notebook would.
    return TrainingClient()


def pod_template(container, seconds, scheduler_name=None):
    """A pod KWOK completes after `seconds`, sent to `scheduler_name` if given."""
    delay = f"{seconds}s"
    return k8s.V1PodTemplateSpec(
        metadata=k8s.V1ObjectMeta(annotations={KWOK_DELAY: delay, KWOK_JITTER: delay}),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name=container, image="busybox")],
                           scheduler_name=scheduler_name),
    )


def replica(count, container, seconds, restart_policy="OnFailure", scheduler_name=None):
    return m.KubeflowOrgV1ReplicaSpec(
        replicas=count,
        restart_policy=restart_policy,
        template=pod_template(container, seconds, scheduler_name),
    )


# Per kind: the model classes, the replica-specs field, the replica types (name, count, seconds a
# pod runs) and which pod v1 labels job-role=master. The coordinator outlives the others by a few
# seconds, so every pod has finished when the job succeeds; TFJob's parameter server runs on past
# the end, as parameter servers do.
KINDS = {
    "TFJob": (m.KubeflowOrgV1TFJob, m.KubeflowOrgV1TFJobSpec, "tf_replica_specs",
              [("PS", 1, 600), ("Worker", 2, 12)], ("worker", "0")),
    "PyTorchJob": (m.KubeflowOrgV1PyTorchJob, m.KubeflowOrgV1PyTorchJobSpec, "pytorch_replica_specs",
                   [("Master", 1, 16), ("Worker", 2, 10)], ("master", "0")),
    "XGBoostJob": (m.KubeflowOrgV1XGBoostJob, m.KubeflowOrgV1XGBoostJobSpec, "xgb_replica_specs",
                   [("Master", 1, 16), ("Worker", 2, 10)], ("master", "0")),
    "PaddleJob": (m.KubeflowOrgV1PaddleJob, m.KubeflowOrgV1PaddleJobSpec, "paddle_replica_specs",
                  [("Master", 1, 16), ("Worker", 2, 10)], ("master", "0")),
    "JAXJob": (m.KubeflowOrgV1JAXJob, m.KubeflowOrgV1JAXJobSpec, "jax_replica_specs",
               [("Worker", 2, 12)], ("worker", "0")),
}
# training-operator v1's MPIJob: the launcher (the master, with no replica index) succeeds; the
# workers sleep until it is done, as v1's do, and go when the job ends.
MPIJOB = (m.KubeflowOrgV1MPIJob, m.KubeflowOrgV1MPIJobSpec, "mpi_replica_specs",
          [("Launcher", 1, 16), ("Worker", 2, 600)], ("launcher", None))
EVERY_KIND = {**KINDS, "MPIJob": MPIJOB}


def pod_count(kind):
    return sum(n for _, n, _ in EVERY_KIND[kind][3])


def build(kind, name, namespace, scheduling_policy=None, scheduler_name=None):
    """The job as a user builds it with the SDK's own model classes."""
    job_class, spec_class, field, types, _ = EVERY_KIND[kind]
    container = constants.JOB_PARAMETERS[kind]["container"]
    restart_policy = "Never" if kind == "MPIJob" else "OnFailure"
    specs = {t: replica(n, container, s, restart_policy, scheduler_name) for t, n, s in types}
    run_policy = m.KubeflowOrgV1RunPolicy(clean_pod_policy="None",
                                          scheduling_policy=scheduling_policy)
    extra = {"slots_per_worker": 2, "main_container": container} if kind == "MPIJob" else {}
    return job_class(
        api_version=f"{constants.GROUP}/{constants.VERSION}",
        kind=kind,
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        spec=spec_class(run_policy=run_policy, **{field: specs}, **extra),
    )


def jobset_exists(namespace, name):
    try:
        k8s.CustomObjectsApi().get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name)
        return True
    except ApiException as e:
        if e.status == 404:
            return False
        raise


def pods_of(namespace, name):
    return k8s.CoreV1Api().list_namespaced_pod(
        namespace, label_selector=f"{JOB_NAME_LABEL}={name}").items


def live(pods):
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def label(pod, key):
    return (pod.metadata.labels or {}).get(key)


def succeeded(tc, name, namespace, kind):
    """The SDK's own e2e check: Created and Succeeded, not Running, Restarting or Failed, and at
    least two conditions."""
    job = tc.wait_for_job_conditions(name, namespace, kind, wait_timeout=WAIT, polling_interval=1)
    conditions = tc.get_job_conditions(job_kind=kind, job=job)
    assert len(conditions) >= 2, conditions
    assert tc.is_job_created(job_kind=kind, job=job)
    assert tc.is_job_succeeded(job_kind=kind, job=job)
    assert not tc.is_job_running(job_kind=kind, job=job), conditions
    assert not tc.is_job_restarting(job_kind=kind, job=job)
    assert not tc.is_job_failed(job_kind=kind, job=job)
    assert tc.is_job_succeeded(name, namespace, kind)
    return job


def update(tc, name, namespace, kind, change):
    """get_job, change, update_job: the SDK's update is a merge patch carrying the
    resourceVersion read, so a status write in between is a conflict; read again then."""
    for _ in range(5):
        job = tc.get_job(name, namespace, kind)
        change(job)
        try:
            return tc.update_job(job, name, namespace, kind)
        except RuntimeError as e:
            if "Conflict" not in str(e):
                raise
    raise AssertionError(f"update_job of {name} conflicted five times")
