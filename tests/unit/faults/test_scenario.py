"""The scenario format: a good file loads, every shipped scenario loads, and each kind of bad input is one line
naming the file and the line of the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.errors import UserError
from capstan.faults import builtin_dir, load_scenario, load_scenarios

GOOD = """\
name: renamed-key
description: A key is renamed, the pod crash-loops.
category: configuration
tags: [history, decoy]
nodes:
  - name: worker
    gpu: 2
    gpu_product: NVIDIA-L4
manifests:
  - apiVersion: v1
    kind: Pod
    metadata: {name: api}
    spec:
      nodeSelector: {kubernetes.io/hostname: "${node.worker}"}
      containers: [{name: app, image: example.com/app:1}]
edits:
  - patch: {kind: ConfigMap, name: cfg}
    body: {data: {B: "1"}}
  - wait: {seconds: 1}
inject:
  - restart_container:
      pod: api
      container: app
      termination: {reason: Error, exit_code: 1}
      previous_log: ["missing ${namespace}"]
      times: 2
  - node_condition: {node: worker, condition: Ready, status: "False", reason: KubeletNotReady}
decoy:
  objects: [{kind: Pod, name: other}]
  inject:
    - event: {object: {kind: Pod, name: other}, reason: Unhealthy, message: blip}
expect:
  object: {kind: Pod, name: api}
  category: configuration
  keywords: [cfg]
  evidence: [ConfigMap/cfg]
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_scenario_loads(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, GOOD))
    assert s.name == "renamed-key" and s.category == "configuration"
    assert [n.name for n in s.nodes] == ["worker"] and s.nodes[0].gpu == 2
    assert s.manifests[0]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "${node.worker}"}
    assert [st.action[0] for st in s.inject] == ["restart_container", "node_condition"]
    assert s.edits[0].changes is not None and s.edits[0].changes.name == "cfg"
    assert [k.name for k in s.decoy_objects] == ["other"]
    assert s.expect.evidence == ["ConfigMap/cfg"]
    assert s.gpu is False and s.path.endswith("s.yaml")


def test_every_shipped_scenario_loads() -> None:
    scenarios = load_scenarios()
    assert len(scenarios) >= 60
    assert builtin_dir().is_dir()
    assert sum(1 for s in scenarios if s.gpu) >= 10
    assert sum(1 for s in scenarios if "decoy" in s.tags) >= 10
    for s in scenarios:
        assert Path(s.path).name == f"{s.name}.yaml"


@pytest.mark.parametrize(
    ("edit", "line", "problem"),
    [
        # YAML that does not parse
        (("  keywords: [cfg]", "  keywords: [cfg"), 36, "invalid YAML"),
        # a key given twice
        (("category: configuration\n", "category: configuration\ncategory: runtime\n"), 4, "duplicate key"),
        # an unknown key in a nested mapping
        (
            ("      times: 2", "      times: 2\n      tries: 3"),
            27,
            "inject.0.restart_container.tries: Extra inputs",
        ),
        # a bad value deep down
        (("      times: 2", "      times: many"), 26, "inject.0.restart_container.times"),
        # an unknown category
        (
            ("  category: configuration\n  keywords", "  category: misc\n  keywords"),
            34,
            "'misc' is not a category",
        ),
        # a step that names no action
        (
            ("  - node_condition: {node: worker", "  - node_cond: {node: worker"),
            27,
            "inject.1.node_cond: Extra inputs",
        ),
        # a step on a node the scenario does not own
        (("{node: worker, condition", "{node: gpu-l4-0, condition"), 27, "not one of the scenario's nodes"),
        # a manifest without a name
        (
            ("    metadata: {name: api}", "    metadata: {labels: {a: b}}"),
            10,
            "manifests.0: a manifest needs metadata.name",
        ),
        # an unknown placeholder
        (("missing ${namespace}", "missing ${nodes.worker}"), 25, "unknown placeholder ${nodes.worker}"),
        # a missing required section
        (("expect:\n", "expected:\n"), 1, "expect: Field required"),
    ],
)
def test_bad_input_names_file_and_line(
    tmp_path: Path, edit: tuple[str, str], line: int, problem: str
) -> None:
    old, new = edit
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(UserError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert problem in message
    assert "\n" not in message


def test_not_a_mapping_and_not_utf8(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"s\.yaml:1: a scenario is a mapping"):
        load_scenario(write(tmp_path, "- a\n- b\n"))
    bad = tmp_path / "b.yaml"
    bad.write_bytes(b"name: x\ndescription: \xff\n")
    with pytest.raises(UserError, match=r"b\.yaml:2: not UTF-8"):
        load_scenario(bad)
    with pytest.raises(UserError, match="file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_two_scenarios_with_one_name(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "a.yaml")
    write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(UserError, match=r"b\.yaml:1: scenario name 'renamed-key' is also used by .*a\.yaml"):
        load_scenarios(tmp_path)
    with pytest.raises(UserError, match="not a directory"):
        load_scenarios(tmp_path / "missing")
