"""The Kubeflow Training Operator's Python SDK (kubeflow-training 1.9.4, from PyPI, unchanged)
against trainset on the local control plane: every call a user of the v1 operator makes, for
each of the six kubeflow.org/v1 kinds the SDK and trainset share (MPIJob is training-operator
v1's), plus the assertions of the SDK's own e2e tests (training-operator v1.9.4,
sdk/python/test/e2e) in our words.

Run by e2e/sdk/run training, which makes the venv, starts trainset and sets KUBECONFIG.
"""

import pytest
from polling import WAIT, wait_until
from kubeflow.training import TrainingClient
from kubeflow.training.constants import constants
from kubernetes import client as k8s
from v1_jobs import (KINDS, build, jobset_exists, label, live, namespace, pod_count,  # noqa: F401
                     pods_of, succeeded, training_client, update)


def set_suspend(tc, name, namespace, kind, suspend):
    def change(job):
        job.spec.run_policy.suspend = suspend
    return update(tc, name, namespace, kind, change)

@pytest.mark.parametrize("kind", list(KINDS))
def test_every_call_on_each_kind(kind, namespace, training_client):
    # One client per kind, as the SDK's own e2e tests make them.
    tc = TrainingClient(job_kind=kind)
    name = f"{kind.lower()}-sdk"
    types = KINDS[kind][3]
    master_type, master_index = KINDS[kind][4]
    total = sum(n for _, n, _ in types)
    container = constants.JOB_PARAMETERS[kind]["container"]

    tc.create_job(job=build(kind, name, namespace), namespace=namespace)
    tc.wait_for_job_conditions(name, namespace, kind, expected_conditions={"Running"},
                               wait_timeout=WAIT, polling_interval=1)

    # Pods, as the SDK selects them (v1's labels, per pod).
    pods = wait_until(f"{total} pods of {name}",
                      lambda: (lambda p: p if len(p) == total else None)(
                          live(tc.get_job_pods(name, namespace))))
    masters = tc.get_job_pods(name, namespace, is_master=True)
    assert [(label(p, "training.kubeflow.org/replica-type"),
             label(p, "training.kubeflow.org/replica-index")) for p in masters] == \
        [(master_type, master_index)], "exactly the pod v1 marks as master"
    for replica_type, count, _ in types:
        of_type = tc.get_job_pods(name, namespace, replica_type=replica_type.lower())
        assert len(of_type) == count, (replica_type, [p.metadata.name for p in of_type])
        for index in range(count):
            names = tc.get_job_pod_names(name, namespace, replica_type=replica_type.lower(),
                                         replica_index=index)
            assert len(names) == 1, (replica_type, index, names)
    assert sorted(tc.get_job_pod_names(name, namespace)) == sorted(p.metadata.name for p in pods)

    # Suspend and resume through update_job: the pods go, then come back.
    set_suspend(tc, name, namespace, kind, True)
    # The SDK's waits know no Suspended condition (v1.9.4 has one); read the conditions instead.
    wait_until(f"{name} to be Suspended", lambda: any(
        c.type == "Suspended" and c.status == "True"
        for c in tc.get_job_conditions(name, namespace, kind)))
    wait_until(f"the pods of suspended {name} to go", lambda: not live(pods_of(namespace, name)))
    set_suspend(tc, name, namespace, kind, False)
    wait_until(f"{name} to run again", lambda: len(live(pods_of(namespace, name))) == total)

    job = succeeded(tc, name, namespace, kind)

    # Logs: the master's by default, any pod's by type and index.
    logs, _ = tc.get_job_logs(name, namespace, kind)
    assert len(logs) == 1, logs
    ((pod_name, text),) = logs.items()
    assert f"/{pod_name} container {container}: replica type {master_type}, index {master_index}" \
        in text, text
    logs, _ = tc.get_job_logs(name, namespace, kind, is_master=False,
                              replica_type=types[-1][0].lower(), replica_index=1)
    assert len(logs) == 1 and f"replica type {types[-1][0].lower()}, index 1" in \
        next(iter(logs.values())), logs

    if kind == "TFJob":
        # JobSet deletes the Jobs still active when a JobSet finishes: the parameter server that
        # was still running is gone (v1 kept it), and counted succeeded (docs/compatibility.md).
        wait_until("the parameter server to be deleted",
                   lambda: not live(tc.get_job_pods(name, namespace, replica_type="ps")))
        ps = tc.get_job(name, namespace, kind).status.replica_statuses["PS"]
        assert (ps.active or 0, ps.succeeded) == (0, 1), ps
    else:
        # Every pod finished before the job did: all are kept (cleanPodPolicy None).
        assert len(live(tc.get_job_pods(name, namespace))) == total

    assert name in [j.metadata.name for j in tc.list_jobs(namespace, kind)]

    tc.delete_job(name, namespace, kind)
    wait_until(f"{name}, its JobSet and pods to be gone",
               lambda: not jobset_exists(namespace, name) and not pods_of(namespace, name))


def test_create_job_from_a_function(namespace, training_client):
    """The SDK's create-from-function e2e: a PyTorchJob of num_workers pods that succeeds."""
    tc = training_client
    name = "pytorch-from-func"

    def train_func():
        for epoch in range(3):
            print(f"epoch {epoch}")

    num_workers = 3
    tc.create_job(name=name, namespace=namespace, train_func=train_func, num_workers=num_workers,
                  job_kind="PyTorchJob")
    # Upstream counts the pods after success and expects one named <name>-worker-0. Under JobSet
    # pods are named <name>-<type>-<job index>-<pod index>-<suffix>, and a worker still running
    # when the master succeeds is deleted with its Job (docs/compatibility.md), so count them while
    # the job runs: one master and num_workers - 1 workers.
    wait_until(f"{num_workers} pods of {name}",
               lambda: len(tc.get_job_pod_names(name, namespace)) == num_workers)
    assert len(tc.get_job_pod_names(name, namespace, is_master=True)) == 1
    assert len(tc.get_job_pod_names(name, namespace, replica_type="worker")) == num_workers - 1
    succeeded(tc, name, namespace, "PyTorchJob")
    tc.delete_job(name, namespace, "PyTorchJob")


def test_a_job_applied_without_run_policy_is_readable(namespace, training_client):
    """kubectl apply of a manifest without runPolicy: the SDK's models require one, and the CRD
    default gives it."""
    tc = training_client
    name = "no-run-policy"
    manifest = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
            "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]}}}}},
    }
    k8s.CustomObjectsApi().create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", manifest)
    job = tc.get_job(name, namespace, "PyTorchJob")
    assert job.spec.run_policy is not None
    assert name in [j.metadata.name for j in tc.list_jobs(namespace, "PyTorchJob")]
    succeeded(tc, name, namespace, "PyTorchJob")
    tc.delete_job(name, namespace, "PyTorchJob")


def test_managed_by(namespace, training_client):
    """The SDK's managedBy e2e: trainset's own value runs the job, MultiKueue's is left alone,
    any other value is refused at create."""
    tc = training_client
    values = {"mb-default": "kubeflow.org/training-operator",
              "mb-multikueue": "kueue.x-k8s.io/multikueue",
              "mb-invalid": "kueue.x-k8s.io/other-controller"}
    for name, managed_by in values.items():
        job = build("PyTorchJob", name, namespace)
        job.spec.run_policy.managed_by = managed_by
        if name == "mb-invalid":
            with pytest.raises(RuntimeError, match=f"Failed to create PyTorchJob: {namespace}/{name}"):
                tc.create_job(job=job, namespace=namespace)
        else:
            tc.create_job(job=job, namespace=namespace)
    names = sorted(j.metadata.name for j in tc.list_jobs(namespace, "PyTorchJob")
                   if j.metadata.name.startswith("mb-"))
    assert names == ["mb-default", "mb-multikueue"]
    succeeded(tc, "mb-default", namespace, "PyTorchJob")
    assert not tc.get_job_conditions("mb-multikueue", namespace, "PyTorchJob")
    assert not jobset_exists(namespace, "mb-multikueue")
    for name in names:
        tc.delete_job(name, namespace, "PyTorchJob")


def test_every_call_on_an_mpijob(namespace, training_client):
    """training-operator v1's MPIJob, as the SDK builds it: the launcher is the master, and
    v1.9.4 labels neither launcher nor workers with a replica index. The workers sleep until the
    launcher is done, as v1's do; here they outlive it and go when the job ends."""
    kind = "MPIJob"
    tc = TrainingClient(job_kind=kind)
    name = "mpijob-sdk"
    container = constants.JOB_PARAMETERS[kind]["container"]
    job = build(kind, name, namespace)
    tc.create_job(job=job, namespace=namespace)
    tc.wait_for_job_conditions(name, namespace, kind, expected_conditions={"Running"},
                               wait_timeout=WAIT, polling_interval=1)

    total = pod_count(kind)
    pods = wait_until(f"{total} pods of {name}",
                      lambda: (lambda p: p if len(p) == total else None)(
                          live(tc.get_job_pods(name, namespace))))
    masters = tc.get_job_pods(name, namespace, is_master=True)
    assert [label(p, "training.kubeflow.org/replica-type") for p in masters] == ["launcher"]
    for replica_type, count in [("launcher", 1), ("worker", 2)]:
        of_type = tc.get_job_pods(name, namespace, replica_type=replica_type)
        assert len(of_type) == count, (replica_type, [p.metadata.name for p in of_type])
    assert sorted(tc.get_job_pod_names(name, namespace)) == sorted(p.metadata.name for p in pods)
    # The workers' logs while they run (they go when the job ends).
    logs, _ = tc.get_job_logs(name, namespace, kind, is_master=False, replica_type="worker")
    assert len(logs) == 2 and all("replica type worker" in t for t in logs.values()), logs

    set_suspend(tc, name, namespace, kind, True)
    wait_until(f"{name} to be Suspended", lambda: any(
        c.type == "Suspended" and c.status == "True"
        for c in tc.get_job_conditions(name, namespace, kind)))
    wait_until(f"the pods of suspended {name} to go", lambda: not live(pods_of(namespace, name)))
    set_suspend(tc, name, namespace, kind, False)
    wait_until(f"{name} to run again", lambda: len(live(pods_of(namespace, name))) == total)

    succeeded(tc, name, namespace, kind)

    # The launcher's log by default: the master's.
    logs, _ = tc.get_job_logs(name, namespace, kind)
    assert len(logs) == 1, logs
    ((pod_name, text),) = logs.items()
    assert f"/{pod_name} container {container}: replica type launcher" in text, text

    # v1's objects beside the JobSet, owned by the job.
    core = k8s.CoreV1Api()
    hostfile = core.read_namespaced_config_map(f"{name}-config", namespace).data["hostfile"]
    assert hostfile == f"{name}-worker-0 slots=2\n{name}-worker-1 slots=2\n", hostfile
    core.read_namespaced_service_account(f"{name}-launcher", namespace)

    assert name in [j.metadata.name for j in tc.list_jobs(namespace, kind)]
    tc.delete_job(name, namespace, kind)
    wait_until(f"{name}, its JobSet and pods to be gone",
               lambda: not jobset_exists(namespace, name) and not pods_of(namespace, name))
