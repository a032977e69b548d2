"""The kubeflow-training SDK 1.9.4's gang-scheduling e2e test (training-operator v1.9.4,
sdk/python/test/e2e, `test_sdk_e2e_with_gang_scheduling` of each kind), in our words, against
trainset started with a gang scheduler: a job whose `minAvailable` is larger than the job is
created and held, none of its pods placed; `update_job` brings `minAvailable` within the job, and
it runs and succeeds, as with training-operator.

Run by `e2e/sdk/run training-gang scheduler-plugins|volcano`, with that scheduler running
(`e2e/cluster gang … start`).
"""

import os
import time

from kubeflow.training import TrainingClient
from kubeflow.training import models as m
from polling import WAIT, wait_until
from v1_jobs import (EVERY_KIND, build, jobset_exists, namespace, pod_count, pods_of,  # noqa: F401
                     succeeded, training_client, update)

# The scheduler the pods name, as the SDK's test names it for its gang scheduler.
SCHEDULER = os.environ["TRAINSET_SDK_GANG_SCHEDULER_NAME"]
# How long the held job is watched for a placed pod, once all its pods exist.
HELD = 10


def placed(pods):
    return [p.metadata.name for p in pods if p.spec.node_name]


def test_a_gang_larger_than_its_job_is_held_until_update_job_shrinks_it(
        namespace, training_client):
    # All six kinds at once, each step over all of them: one held window instead of six.
    clients = {kind: TrainingClient(job_kind=kind) for kind in EVERY_KIND}
    names = {kind: f"{kind.lower()}-gang" for kind in EVERY_KIND}
    for kind, tc in clients.items():
        job = build(kind, names[kind], namespace, m.KubeflowOrgV1SchedulingPolicy(min_available=10),
                    scheduler_name=SCHEDULER)
        tc.create_job(job=job, namespace=namespace)

    for kind, tc in clients.items():
        name = names[kind]
        tc.wait_for_job_conditions(name, namespace, kind, expected_conditions={"Created"},
                                   wait_timeout=WAIT, polling_interval=1)
        total = pod_count(kind)
        wait_until(f"{total} pods of {name}", lambda: len(pods_of(namespace, name)) == total)
    # Held: over HELD seconds no pod is placed, and every job stays Created, never Running.
    deadline = time.monotonic() + HELD
    while time.monotonic() < deadline:
        for kind, tc in clients.items():
            name = names[kind]
            assert not placed(pods_of(namespace, name)), f"{name}: placed though its gang is 10"
            held = tc.get_job(name, namespace, kind)
            assert tc.is_job_created(job_kind=kind, job=held), name
            assert not tc.is_job_running(job_kind=kind, job=held), (name, held.status.conditions)
        time.sleep(1)

    def schedulable(job):
        job.spec.run_policy.scheduling_policy.min_available = 2
    for kind, tc in clients.items():
        update(tc, names[kind], namespace, kind, schedulable)

    for kind, tc in clients.items():
        succeeded(tc, names[kind], namespace, kind)
        tc.delete_job(names[kind], namespace, kind)
    for name in names.values():
        wait_until(f"{name}, its JobSet and pods to be gone",
                   lambda: not jobset_exists(namespace, name) and not pods_of(namespace, name))
