"""The ``logs`` tool: the pure excerpt (error lines and their blocks, repeats, head + tail, fallback, grep), and the
tool through the official SDK's in-memory client over a fixed snapshot and a fake log reader: workload → pods,
unreadable containers as lines, a bad grep as a JSON-RPC error, planted secrets never served, budgets kept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from capstan.diagnose import Snapshot
from capstan.kube import ApiError
from capstan.mcp import FixedSource, create_server
from capstan.mcp._logs import MAX_PODS, compile_grep, excerpt, pods_of
from capstan.mcp._tool import BadArgument, Unavailable
from capstan.redact import Redactor
from capstan.tokens import count_tokens

# ---- the pure excerpt ----------------------------------------------------------------------------------------------


def test_repeats_collapse_into_their_first_occurrence_with_a_count() -> None:
    text = "\n".join(
        [
            "2026-12-01T10:00:00Z INFO starting",
            *(f"2026-12-01T10:00:{i:02d}Z ERROR request {1000 + i} failed: db down" for i in range(1, 6)),
            "2026-12-01T10:01:00Z INFO still here",
        ]
    )
    cut = excerpt(text, grep=None, errors_only=True)
    assert cut["lines"] == ["2026-12-01T10:00:01Z ERROR request 1001 failed: db down (repeated ×5)"]
    assert (cut["matched"], cut["repeats_collapsed"], cut["omitted"], cut["read"]) == (5, 4, 0, 7)
    assert "fallback" not in cut


def test_head_and_tail_are_kept_and_the_rest_counted() -> None:
    text = "\n".join(f"ERROR failure {'x' * i}" for i in range(100))  # 100 distinct lines
    cut = excerpt(text, grep=None, errors_only=True, head=30, tail=20)
    assert len(cut["lines"]) == 51 and cut["omitted"] == 50
    assert cut["lines"][0] == "ERROR failure " and cut["lines"][29] == "ERROR failure " + "x" * 29
    assert cut["lines"][30] == "… 50 lines omitted …"
    assert cut["lines"][-1] == "ERROR failure " + "x" * 99


def test_nothing_matching_falls_back_to_the_last_lines_and_says_so() -> None:
    text = "\n".join(f"INFO step {i}" for i in range(50))
    cut = excerpt(text, grep=None, errors_only=True, tail=20)
    assert cut["matched"] == 0 and cut["fallback"] == "nothing matched; the last 20 lines"
    assert cut["lines"][0] == "INFO step 30" and cut["lines"][-1] == "INFO step 49"
    assert excerpt("", grep=None, errors_only=True)["lines"] == []


def test_a_traceback_keeps_its_frames_and_the_exception_line() -> None:
    text = "\n".join(
        [
            "INFO loading config",
            "Traceback (most recent call last):",
            '  File "/app/main.py", line 9, in <module>',
            "    main()",
            '  File "/app/main.py", line 5, in main',
            "    cfg = load()",
            "KeyError: 'DB_HOST'",
            "INFO shutting down",
        ]
    )
    cut = excerpt(text, grep=None, errors_only=True)
    assert cut["lines"] == text.splitlines()[1:7]


def test_a_go_panic_keeps_its_goroutine_frames() -> None:
    text = "\n".join(
        [
            "panic: runtime error: invalid memory address or nil pointer dereference",
            "goroutine 1 [running]:",
            "main.handler(0x0)",
            "\t/src/main.go:42 +0x1d",
            "exit status 2",
        ]
    )
    assert excerpt(text, grep=None, errors_only=True)["lines"] == text.splitlines()[:4]


@pytest.mark.parametrize(
    "line",
    [
        "E1201 FATAL cannot bind :8080",
        'level=error msg="upstream closed"',
        "[warn] slow request",
        "WARNING: low disk",
        "java.lang.IllegalStateException: no leader",
        "Segmentation fault (core dumped)",
        "Killed",
        "RuntimeError: CUDA error: out of memory",
        "node-3:1234:1234 [0] NCCL WARN Call to connect returned Connection refused",
        "torch.OutOfMemoryError: CUDA out of memory",
    ],
)
def test_error_and_crash_markers_are_kept(line: str) -> None:
    cut = excerpt(f"INFO ok\n{line}\nINFO ok again", grep=None, errors_only=True)
    assert cut["lines"] == [line] and cut["matched"] == 1


def test_prose_about_errors_is_not_an_error_line() -> None:
    cut = excerpt("INFO no errors found\nINFO warnings disabled", grep=None, errors_only=True)
    assert cut["matched"] == 0 and "fallback" in cut


def test_grep_keeps_only_matching_lines_and_errors_only_false_keeps_all() -> None:
    text = "GET /a 200\nGET /b 500\nPOST /c 503\nERROR boom"
    assert excerpt(text, grep=r" 5\d\d$", errors_only=True)["lines"] == ["GET /b 500", "POST /c 503"]
    assert excerpt(text, grep=None, errors_only=False)["lines"] == text.splitlines()


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("(unclosed", "not a regular expression"),
        ("x" * 201, "at most 200"),
        ("(a+)+$", "repeated group"),
        ("(a|aa)+", "repeated group"),
        ("((a+)b)*", "repeated group"),
    ],
)
def test_a_bad_grep_is_an_argument_error_naming_grep(pattern: str, says: str) -> None:
    with pytest.raises(BadArgument) as err:
        compile_grep(pattern)
    assert err.value.argument == "grep" and says in err.value.message
    with pytest.raises(BadArgument):
        excerpt("ERROR x", grep=pattern, errors_only=True)


def test_a_100k_line_log_is_cut_to_a_bounded_excerpt() -> None:
    text = "\n".join(f"2026-12-01T10:00:00Z ERROR worker {i} {'z' * (i % 97)} failed" for i in range(100_000))
    cut = excerpt(text, grep=None, errors_only=True)
    assert len(cut["lines"]) == 51 and cut["matched"] == 100_000
    assert all(len(line) <= 400 + len(" (repeated ×100)") for line in cut["lines"])


# ---- the tool, through the SDK's in-memory client ----------------------------------------------------------------

SECRET_LINES = (
    "ERROR login failed password=hunter2 for admin",
    "ERROR upstream said 401 to Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789",
    "ERROR git clone with token ghp_" + "A1b2C3d4E5" * 4,
)
PLANTED = ("hunter2", "abcdefghijklmnopqrstuvwxyz0123456789", "ghp_A1b2C3d4E5")


class FakeLogs:
    """A :class:`~capstan.mcp._state.LogReader` over fixed texts keyed by (pod, container, previous); anything
    else answers what the API server would (404)."""

    def __init__(
        self, texts: dict[tuple[str, str, bool], str], refuse: dict[str, ApiError] | None = None
    ) -> None:
        self.texts = texts
        self.refuse = refuse or {}
        self.calls: list[tuple[str, str, bool, int]] = []

    async def read(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        previous: bool,
        tail_lines: int,
        since_seconds: int | None = None,
    ) -> str:
        self.calls.append((pod, container, previous, tail_lines))
        if pod in self.refuse:
            raise self.refuse[pod]
        text = self.texts.get((pod, container, previous))
        if text is None:
            raise ApiError(
                404, "NotFound", f"previous terminated container {container!r} in pod {pod!r} not found"
            )
        return "\n".join(text.splitlines()[-tail_lines:])


def pod(
    name: str,
    *,
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
    containers: tuple[str, ...] = ("app",),
    failed_init: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": f"uid-{name}", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {"kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}", "controller": True}
        ]
    spec: dict[str, Any] = {"containers": [{"name": c, "image": "x"} for c in containers]}
    status: dict[str, Any] = {
        "containerStatuses": [{"name": c, "ready": True, "restartCount": 0} for c in containers]
    }
    if failed_init:
        spec["initContainers"] = [{"name": failed_init, "image": "x"}, {"name": "fine-init", "image": "x"}]
        status["initContainerStatuses"] = [
            {"name": failed_init, "state": {"terminated": {"exitCode": 1}}, "restartCount": 3},
            {"name": "fine-init", "state": {"terminated": {"exitCode": 0}}},
        ]
    return {"kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def workload(kind: str, name: str, *, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {"kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}", "controller": True}
        ]
    return {"kind": kind, "metadata": meta, "spec": {"selector": {"matchLabels": {"app": name}}}}


def shop() -> Snapshot:
    return Snapshot(
        objects={
            "Deployment": [workload("web", "web")],
            "ReplicaSet": [
                workload("ReplicaSet", "web-7d9c", owner=("Deployment", "web")),
                workload("ReplicaSet", "web-5f6a", owner=("Deployment", "web")),
            ],
            "StatefulSet": [workload("StatefulSet", "db")],
            "Pod": [
                pod("web-7d9c-a", owner=("ReplicaSet", "web-7d9c")),
                pod("web-5f6a-b", owner=("ReplicaSet", "web-5f6a")),
                pod("db-0", labels={"app": "db"}, containers=("db", "exporter"), failed_init="migrate"),
                pod("other", labels={"app": "other"}),
            ],
        }
    )


def payload(result: Any) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


async def call(snap: Snapshot, logs: FakeLogs, **arguments: Any) -> tuple[dict[str, Any], bool]:
    async with Client(create_server(FixedSource(snap), logs, redactor=Redactor())) as client:
        result = await client.call_tool("logs", arguments)
    return payload(result), bool(result.is_error)


def test_a_deployment_resolves_to_its_replica_sets_pods_and_others_through_owner_or_selector() -> None:
    snap = shop()
    assert [p["metadata"]["name"] for p in pods_of(snap, "Deployment", "shop", "web")] == [
        "web-5f6a-b",
        "web-7d9c-a",
    ]
    assert [p["metadata"]["name"] for p in pods_of(snap, "StatefulSet", "shop", "db")] == ["db-0"]  # selector
    assert pods_of(snap, "Pod", "shop", "other")[0]["metadata"]["name"] == "other"
    with pytest.raises(Unavailable, match="no Deployment shop/nope"):
        pods_of(snap, "Deployment", "shop", "nope")


async def test_pods_with_the_same_error_are_merged_and_secrets_never_served() -> None:
    crash = "\n".join(["INFO start", *SECRET_LINES, "INFO bye"])
    logs = FakeLogs(
        {("web-7d9c-a", "app", True): crash, ("web-5f6a-b", "app", True): crash.replace("start", "go")}
    )
    answer, error = await call(shop(), logs, kind="Deployment", name="web", namespace="shop", previous=True)
    assert not error and answer["pods"] == 2 and answer["total"] == 1
    (entry,) = answer["containers"]
    assert (entry["pod"], entry["container"], entry["same_in"]) == ("web-5f6a-b", "app", ["web-7d9c-a"])
    assert len(entry["lines"]) == 3 and all("ERROR" in line for line in entry["lines"])
    text = json.dumps(answer)
    for planted in PLANTED:
        assert planted not in text
    assert {c[2] for c in logs.calls} == {True} and {c[3] for c in logs.calls} == {500}


async def test_an_unreadable_container_is_a_line_and_an_unknown_object_one_line() -> None:
    logs = FakeLogs(
        {
            ("db-0", "db", False): "FATAL: data directory has wrong ownership\n",
            ("db-0", "migrate", False): "ok",
        }
    )
    answer, error = await call(shop(), logs, kind="StatefulSet", name="db", namespace="shop", previous=False)
    assert not error
    by_container = {e["container"]: e for e in answer["containers"]}
    assert list(by_container) == ["migrate", "db", "exporter"]  # the failed init first, the fine one left out
    assert by_container["db"]["lines"] == ["FATAL: data directory has wrong ownership"]
    assert by_container["exporter"]["unreadable"].startswith("404 NotFound")
    assert by_container["migrate"]["fallback"] == "nothing matched; the last 1 lines"

    answer, error = await call(shop(), logs, name="ghost", namespace="shop")
    assert error and answer["error"] == "logs: no Pod shop/ghost in the cluster state"
    answer, error = await call(shop(), logs, name="db-0", namespace="shop", container="nope")
    assert error and "no container 'nope'" in answer["error"] and "exporter" in answer["error"]

    forbidden = FakeLogs({}, refuse={"other": ApiError(403, "Forbidden", "pods/log is forbidden")})
    answer, error = await call(shop(), forbidden, name="other", namespace="shop")
    assert not error and answer["containers"][0]["unreadable"] == "403 Forbidden: pods/log is forbidden"


async def test_a_bad_grep_is_a_json_rpc_error_naming_grep() -> None:
    async with Client(create_server(FixedSource(shop()), FakeLogs({}), redactor=Redactor())) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("logs", {"name": "other", "namespace": "shop", "grep": "(oops"})
    assert "argument 'grep'" in str(err.value) and "not a regular expression" in str(err.value)


async def test_a_100k_line_log_stays_within_the_budget_and_many_pods_are_capped() -> None:
    big = "\n".join(f"ERROR request {i} failed {'q' * (i % 300)} password=hunter2" for i in range(100_000))
    pods = [pod(f"job-{i:02d}", owner=("Job", "batch")) for i in range(MAX_PODS + 5)]
    snap = Snapshot(objects={"Job": [workload("Job", "batch")], "Pod": pods})
    texts = {(p["metadata"]["name"], "app", False): big for p in pods}
    logs = FakeLogs(texts)
    answer, error = await call(snap, logs, kind="Job", name="batch", namespace="shop", tail_lines=5000)
    assert not error and answer["pods"] == MAX_PODS + 5 and answer["pods_skipped"] == 5
    assert len(logs.calls) == MAX_PODS
    assert count_tokens(json.dumps(answer, separators=(",", ":"), ensure_ascii=False)) <= 2500
    assert answer["tokens"] <= 2500 and "hunter2" not in json.dumps(answer)
    seen = answer["total"]
    assert seen == 1  # the same excerpt in every pod: one entry naming the others
    assert len(answer["containers"][0]["same_in"]) == MAX_PODS - 1


@pytest.mark.parametrize(
    "pattern", ["(GET|POST) /api", "(a+)?x", "[(+)]+", r"\(a+\)+", "(ab){3}", r"after \d+s"]
)
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    assert compile_grep(pattern) is not None
