"""A broken or missing kubeconfig gives one line naming the file and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.errors import UserError
from capstan.kube import KubeClient

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "file not found"),
        ("clusters: [\n  - a: b\n bad", "invalid YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "no clusters defined"),
        (
            "clusters: [{name: c, cluster: {server: https://127.0.0.1:1}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n",
            "no current-context set",
        ),
        (
            "clusters: [{name: c, cluster: {server: https://127.0.0.1:1}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
            "current-context: missing\n",
            "missing",
        ),
    ],
)
async def test_bad_kubeconfig(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError) as info:
        await KubeClient.from_kubeconfig(path)
    message = str(info.value)
    assert str(path) in message and problem in message
    assert "\n" not in message
