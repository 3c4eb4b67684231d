"""The pods analyzer on hand-written snapshots: one test per waiting/terminated reason, probes, init containers and
native sidecars, the log pattern library, and a decoy that must not become the root."""

from __future__ import annotations

import pytest

from capstan.diagnose import Category, Finding, ObjectRef, Severity, Snapshot, Source, diagnose
from capstan.diagnose._pods import analyze_pods, classify_log
from capstan.restarts import RecordedChange

from .kit import configmap, container, event, pod, running, terminated, waiting


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [f.root_cause for f in findings]
    return findings[0]


def test_crash_loop_names_exit_code_signal_and_the_log_line() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=7, last=terminated("Error", 139))])
    snap = Snapshot(
        objects={"Pod": [p]},
        logs={
            ("shop", "web-7d9f8-abcde", "app"): "starting\nloading model\nSegmentation fault (core dumped)\n"
        },
    )
    f = only(analyze_pods(snap))
    assert f.severity is Severity.CRITICAL and f.category is Category.RUNTIME
    assert "exit code 139" in f.root_cause and "SIGSEGV (11)" in f.root_cause
    assert "segmentation fault" in f.root_cause.lower()
    assert f.cause == "CrashLoopBackOff/app"
    assert f.subject == ObjectRef("Pod", "shop", "web-7d9f8-abcde")
    assert ObjectRef("Deployment", "shop", "web") in f.objects  # owner resolved from pod-template-hash
    sources = {(e.source, e.where) for e in f.evidence}
    assert (Source.OBJECT_FIELD, "status.containerStatuses[app].lastState.terminated") in sources
    assert any(e.source is Source.LOG_LINE and "Segmentation fault" in e.text for e in f.evidence)
    assert "--previous" in f.next_check


def test_crash_loop_with_a_reported_signal() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=2, last=terminated("Error", 0, signal=6))])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert "SIGABRT (6)" in f.root_cause


def test_log_pattern_library_sets_the_category() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=3, last=terminated("Error", 1))])
    log = (
        "rank 3 ready\n"
        "[E ProcessGroupNCCL.cpp:1316] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=88, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n"
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, logs={("shop", "web-7d9f8-abcde", "app"): log})))
    assert f.category is Category.GPU
    assert "NCCL collective timed out" in f.root_cause
    cls, lines = classify_log("ok\nKeyError: 'DATABASE_URL'\n")
    assert cls is not None and cls.name == "missing-config" and lines == ["KeyError: 'DATABASE_URL'"]
    assert classify_log("all good\nstill good\n")[0] is None


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("RuntimeError: CUDA error: out of memory", "cuda-oom"),
        (
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)",
            "cuda-oom",
        ),
        ("gpu-7:1234:1290 [3] NCCL WARN NET/IB : Got completion from peer with error 12", "nccl-error"),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, ncclSystemError",
            "nccl-error",
        ),
        ("RuntimeError: NCCL communicator was aborted on rank 5.", "nccl-error"),
        (
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for "
            "1800000 milliseconds before timing out.",
            "nccl-timeout",
        ),
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "gpu-xid"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-error"),
    ],
)
def test_gpu_log_patterns(line: str, name: str) -> None:
    cls, lines = classify_log(f"starting\n{line}\n")
    assert cls is not None and cls.name == name and cls.category is Category.GPU
    assert lines == [line]


def test_a_word_containing_xid_is_not_a_gpu_fault() -> None:
    assert classify_log("oxidation model loaded\n")[0] is None


def test_oom_killed_against_the_memory_limit() -> None:
    c = container(resources={"limits": {"memory": "256Mi"}})
    p = pod(
        containers=[c],
        statuses=[waiting("app", "CrashLoopBackOff", restarts=4, last=terminated("OOMKilled", 137))],
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert f.cause == "OOMKilled/app" and f.severity is Severity.CRITICAL
    assert "OOMKilled" in f.root_cause and "256Mi" in f.root_cause
    assert any(
        e.where == "spec.containers[app].resources.limits.memory" and e.text == "256Mi" for e in f.evidence
    )


def test_oom_without_a_limit_blames_the_node() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=1, last=terminated("OOMKilled", 137))])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert "no memory limit" in f.root_cause and "node-a" in f.next_check


def test_running_after_an_oom_kill_is_a_warning() -> None:
    p = pod(
        containers=[container(resources={"limits": {"memory": "1Gi"}})],
        statuses=[{**running(restarts=1), "lastState": {"terminated": terminated("OOMKilled", 137)}}],
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert f.severity is Severity.WARNING and "1Gi" in f.root_cause


def test_image_pull_back_off_quotes_the_event() -> None:
    p = pod(
        containers=[container(image="registry.example/app:9.9")],
        statuses=[waiting("app", "ImagePullBackOff", 'Back-off pulling image "registry.example/app:9.9"')],
    )
    e = event(
        p,
        "Failed",
        'Failed to pull image "registry.example/app:9.9": rpc error: code = NotFound desc = '
        "registry.example/app:9.9: not found",
    )
    decoy = event(p, "BackOff", 'Back-off pulling image "registry.example/app:9.9"', type="Normal")
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=[e, decoy])))
    assert f.category is Category.STARTUP
    assert "registry.example/app:9.9" in f.root_cause and "does not exist" in f.root_cause
    assert any(ev.source is Source.EVENT and "code = NotFound" in ev.text for ev in f.evidence)


def test_err_image_pull_unauthorized() -> None:
    p = pod(statuses=[waiting("app", "ErrImagePull")])
    e = event(p, "Failed", 'Failed to pull image "registry.example/app:1.0": 401 Unauthorized')
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=[e])))
    assert "credentials" in f.root_cause and f.cause == "ImagePull/app"


def test_create_container_config_error_names_the_missing_key_and_cites_the_rename() -> None:
    c = container(
        env=[{"name": "DB_HOST", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "DB_HOST"}}}]
    )
    message = "couldn't find key DB_HOST in ConfigMap shop/app-config"
    p = pod(containers=[c], statuses=[waiting("app", "CreateContainerConfigError", message)])
    rename = RecordedChange(
        at=100.0,
        kind="ConfigMap",
        namespace="shop",
        name="app-config",
        change="MODIFIED",
        summary="data.DB_HOST removed, data.DATABASE_HOST added",
    )
    other = RecordedChange(at=101.0, kind="ConfigMap", namespace="shop", name="unrelated", change="MODIFIED")
    snap = Snapshot(
        objects={"Pod": [p], "ConfigMap": [configmap("app-config", DATABASE_HOST="db")]},
        changes=[rename, other],
        observed_at=200.0,
    )
    f = only(analyze_pods(snap))
    assert f.category is Category.CONFIGURATION
    assert "ConfigMap shop/app-config has no key DB_HOST" in f.root_cause
    assert "env[DB_HOST].valueFrom.configMapKeyRef" in f.root_cause
    assert ObjectRef("ConfigMap", "shop", "app-config") in f.objects
    assert f.changes == (rename,)
    assert any(e.what == "keys present" and e.text == "DATABASE_HOST" for e in f.evidence)


def test_create_container_config_error_missing_secret() -> None:
    c = container(envFrom=[{"secretRef": {"name": "db-creds"}}])
    p = pod(
        containers=[c], statuses=[waiting("app", "CreateContainerConfigError", 'secret "db-creds" not found')]
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert "Secret shop/db-creds does not exist" in f.root_cause
    assert "envFrom[0].secretRef" in f.root_cause


def test_create_container_config_error_without_a_message_checks_the_references() -> None:
    c = container(env=[{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "mode"}}}])
    p = pod(containers=[c], statuses=[waiting("app", "CreateContainerConfigError")])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p], "ConfigMap": []})))
    assert "ConfigMap shop/flags does not exist" in f.root_cause


def test_init_container_failure_blocks_the_pod() -> None:
    init = [container("migrate")]
    st = {"name": "migrate", "restartCount": 0, "state": {"terminated": terminated("Error", 127)}}
    p = pod(
        init=init,
        init_statuses=[st],
        statuses=[waiting("app", "PodInitializing")],
        phase="Pending",
        restartPolicy="Never",
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert f.cause == "exited/migrate" and f.category is Category.STARTUP
    assert "init container migrate" in f.root_cause and "not found (exit 127)" in f.root_cause


def test_native_sidecar_crash_loop_is_named_as_a_sidecar() -> None:
    init = [container("proxy", restartPolicy="Always")]
    st = waiting("proxy", "CrashLoopBackOff", restarts=5, last=terminated("Error", 1))
    p = pod(init=init, init_statuses=[st])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert "sidecar proxy of pod shop/web-7d9f8-abcde" in f.root_cause
    assert f.cause == "CrashLoopBackOff/proxy"


def test_liveness_probe_kills_are_the_cause_of_the_crash_loop() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=3, last=terminated("Error", 137))])
    events = [
        event(
            p,
            "Unhealthy",
            'Liveness probe failed: Get "http://10.0.0.5:8081/healthz": connection refused',
            count=9,
            field_path="spec.containers{app}",
        ),
        event(
            p,
            "Killing",
            "Container app failed liveness probe, will be restarted",
            type="Normal",
            field_path="spec.containers{app}",
        ),
    ]
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=events)))
    assert f.cause == "liveness/app"
    assert "8081/healthz" in f.root_cause
    assert any(e.source is Source.EVENT and "(×9)" in e.text for e in f.evidence)


def startup_kills(p: dict[str, object]) -> list[dict[str, object]]:
    return [
        event(p, "Unhealthy", 'Startup probe failed: Get "http://10.0.0.9:9200/health": connection refused',
              count=3, field_path="spec.containers{app}"),
        event(p, "Killing", "Container app failed startup probe, will be restarted", type="Normal",
              field_path="spec.containers{app}"),
    ]  # fmt: skip


def test_startup_probe_kills_are_a_startup_fault() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=4, last=terminated("Error", 137))])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=startup_kills(p))))
    assert (f.cause, f.category, f.severity) == ("startup/app", Category.STARTUP, Severity.CRITICAL)
    assert "startup probe" in f.root_cause and "startupProbe" in f.next_check


def test_a_running_container_its_probe_keeps_restarting_is_a_warning() -> None:
    p = pod(statuses=[running(restarts=3, lastState={"terminated": terminated("Error", 137, signal=9)})])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=startup_kills(p))))
    assert (f.cause, f.severity) == ("startup/app", Severity.WARNING)
    assert "has been killing and restarting" in f.root_cause and "3 restart(s)" in f.root_cause
    quiet = pod(statuses=[running(restarts=3, lastState={"terminated": terminated("Error", 137, signal=9)})])
    assert analyze_pods(Snapshot(objects={"Pod": [quiet]})) == []  # no probe Event: nothing to say


def test_a_bad_flag_in_the_log_is_a_configuration_fault() -> None:
    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=2, last=terminated("Error", 2))])
    logs = {("shop", p["metadata"]["name"], "app"): "search-api 2.0\nerror: unknown flag: --legacy-index\n"}
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, logs=logs)))
    assert f.category is Category.CONFIGURATION and "unknown flag: --legacy-index" in f.root_cause


def test_readiness_probe_failure_is_a_warning() -> None:
    p = pod(statuses=[running(ready=False)])
    events = [
        event(
            p,
            "Unhealthy",
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
            field_path="spec.containers{app}",
        )
    ]
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=events)))
    assert f.severity is Severity.WARNING and f.cause == "probe-readiness/app"
    assert "503" in f.root_cause


def test_healthy_pod_has_no_finding() -> None:
    p = pod()
    noise = [event(p, "Unhealthy", "Readiness probe failed: timeout", field_path="spec.containers{app}")]
    assert (
        analyze_pods(Snapshot(objects={"Pod": [p]}, events=noise)) == []
    )  # ready now: an old blip is no root


def test_evicted_pod() -> None:
    p = pod(phase="Failed", statuses=[])
    p["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert f.category is Category.NODE and "low on resource: memory" in f.root_cause


def test_a_decoy_warning_does_not_become_the_root() -> None:
    c = container(
        env=[{"name": "DB_HOST", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "DB_HOST"}}}]
    )
    broken = pod(
        containers=[c],
        statuses=[
            waiting(
                "app", "CreateContainerConfigError", "couldn't find key DB_HOST in ConfigMap shop/app-config"
            )
        ],
    )
    bystander = pod(
        "cache-0",
        labels={"app": "cache"},
        owner=("StatefulSet", "cache"),
        statuses=[running("app", ready=True)],
    )
    decoys = [
        event(
            bystander,
            "Unhealthy",
            "Readiness probe failed: timeout after 1s",
            field_path="spec.containers{app}",
        ),
        event(bystander, "FailedToUpdateEndpoint", "Failed to update endpoint shop/cache: conflict"),
        event(
            broken,
            "DNSConfigForming",
            "Search Line limits were exceeded, some search paths have been omitted",
        ),
    ]
    snap = Snapshot(
        objects={"Pod": [broken, bystander], "ConfigMap": [configmap("app-config")]}, events=decoys
    )
    d = diagnose(snap)
    assert d.findings, d
    assert "has no key DB_HOST" in d.findings[0].root_cause
    assert all("cache-0" not in f.root_cause and "Search Line" not in f.root_cause for f in d.findings)


def test_failed_mount_of_a_missing_configmap() -> None:
    p = pod(statuses=[waiting("app", "ContainerCreating")], phase="Pending")
    p["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "app-config"}}]
    e = event(
        p,
        "FailedMount",
        'MountVolume.SetUp failed for volume "config" : configmap "app-config" not found',
        count=6,
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=[e])))
    assert f.category is Category.CONFIGURATION and f.cause == "mount-missing-ConfigMap/app-config"
    assert "volume config mounts ConfigMap shop/app-config, which does not exist" in f.root_cause
    assert ObjectRef("ConfigMap", "shop", "app-config") in f.objects


def test_failed_attach_is_a_storage_fault() -> None:
    p = pod(statuses=[waiting("app", "ContainerCreating")], phase="Pending")
    e = event(
        p, "FailedAttachVolume", 'AttachVolume.Attach failed for volume "pvc-1" : rpc error: volume is in use'
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]}, events=[e])))
    assert f.category is Category.STORAGE and "volume is in use" in f.root_cause


def test_run_container_error_quotes_the_runtime() -> None:
    msg = 'failed to create containerd task: exec: "/app/serve": stat /app/serve: no such file or directory'
    p = pod(statuses=[waiting("app", "RunContainerError", msg)])
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert f.cause == "RunContainerError/app" and "/app/serve" in f.root_cause


def test_invalid_image_name() -> None:
    p = pod(
        containers=[container(image="registry.example/App:Latest")],
        statuses=[
            waiting(
                "app",
                "InvalidImageName",
                'Failed to apply default image tag "registry.example/App:Latest": '
                "couldn't parse image reference: invalid reference format",
            )
        ],
    )
    f = only(analyze_pods(Snapshot(objects={"Pod": [p]})))
    assert f.cause == "InvalidImageName/app" and "invalid" in f.root_cause


def test_same_fault_same_id_across_snapshots() -> None:
    def build(restarts: int) -> str:
        p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=restarts, last=terminated("Error", 2))])
        return only(analyze_pods(Snapshot(objects={"Pod": [p]}))).id

    assert build(3) == build(30)


def test_a_crash_loop_reading_a_renamed_key_is_the_missing_key_citing_the_rename() -> None:
    env = [{"name": "DB_HOST", "valueFrom": {"configMapKeyRef": {"name": "api-config", "key": "DB_HOST"}}}]
    p = pod(
        containers=[container(env=env)],
        statuses=[waiting("app", "CrashLoopBackOff", restarts=3, last=terminated("Error", 1))],
    )
    snap = Snapshot(
        objects={"Pod": [p], "ConfigMap": [configmap("api-config", DATABASE_HOST="db")]},
        changes=[RecordedChange(5.0, "ConfigMap", "shop", "api-config", "modified", "remove /data/DB_HOST")],
        observed_at=10.0,
    )
    (f,) = diagnose(snap).findings
    assert f.category is Category.CONFIGURATION and f.cause == "missing-ConfigMap/api-config/DB_HOST/app"
    assert "ConfigMap api-config has no key DB_HOST (it has DATABASE_HOST)" in f.root_cause
    assert [c.summary for c in f.changes] == ["remove /data/DB_HOST"]


def test_an_init_container_crash_loop_is_a_startup_fault() -> None:
    p = pod(
        init=[container("migrate")],
        init_statuses=[waiting("migrate", "CrashLoopBackOff", restarts=3, last=terminated("Error", 3))],
        statuses=[waiting("app", "PodInitializing")],
        phase="Pending",
    )
    (f,) = [f for f in diagnose(Snapshot(objects={"Pod": [p]})).findings if f.analyzer == "pods"]
    assert f.cause == "CrashLoopBackOff/migrate" and f.category is Category.STARTUP
