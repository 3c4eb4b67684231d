"""The router's extension points by registry: every filter, scorer and picker type has exactly one implementation,
and an unknown or unwired type fails at start with one line."""

from __future__ import annotations

import random
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field

from capstan.cli.main import main
from capstan.config import Plugin, load_model, plugin_registry, plugin_type, union_models
from capstan.errors import UserError
from capstan.route import Endpoint, EndpointState, RouteConfig, Scheduler, SchedulerConfig
from capstan.route._config import (
    FILTERS,
    PICKERS,
    SCORERS,
    FilterConfig,
    HealthFilterConfig,
    PickerConfig,
    PickerType,
    PrefixScorerConfig,
    ScorerConfig,
)
from capstan.route._plugins import MaxScorePicker, RandomPicker, RoundRobinPicker

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("union", "registry"), [(FilterConfig, FILTERS), (ScorerConfig, SCORERS)])
def test_every_config_type_has_exactly_one_implementation(
    union: object, registry: Mapping[str, Plugin[Any]]
) -> None:
    models = union_models(union)
    assert len(models) >= 3, "the union's models were not found"
    assert sorted(plugin_type(m) for m in models) == sorted(registry)
    for model in models:
        assert registry[plugin_type(model)].config is model


def test_every_picker_type_has_exactly_one_implementation() -> None:
    assert sorted(typing.get_args(PickerType)) == sorted(PICKERS)


def test_a_picker_type_without_an_implementation_fails_when_the_scheduler_is_built() -> None:
    cfg = SchedulerConfig.model_construct(
        **{**dict(SchedulerConfig()), "picker": PickerConfig.model_construct(type="unwired")}  # type: ignore[arg-type]
    )
    with pytest.raises(UserError, match=r"^scheduler.picker: picker type 'unwired' has no implementation"):
        Scheduler(cfg)


def _endpoints(*names: str) -> tuple[EndpointState, ...]:
    return tuple(EndpointState(Endpoint(n, f"http://127.0.0.1:{9000 + i}")) for i, n in enumerate(names))


def test_pickers_choose_from_the_totals_alone() -> None:
    eps = _endpoints("a", "b", "c")
    totals = {"a": 1.0, "b": 3.0, "c": 3.0 - 1e-10}
    one, again = MaxScorePicker(random.Random(7)), MaxScorePicker(random.Random(7))
    draws = [one.pick(eps, totals).name for _ in range(20)]
    assert set(draws) == {"b", "c"}  # within 1e-9 of the best is a tie, drawn with the seeded RNG
    assert draws == [again.pick(eps, totals).name for _ in range(20)]
    assert MaxScorePicker(random.Random(7)).pick(eps, {**totals, "c": 2.0}).name == "b"
    turns = RoundRobinPicker(random.Random(0))
    assert [turns.pick(eps, totals).name for _ in range(4)] == ["a", "b", "c", "a"]
    assert [turns.pick(eps[:2], totals).name for _ in range(2)] == ["a", "b"]  # turns 4 and 5: one counter
    assert {RandomPicker(random.Random(1)).pick(eps, totals).name for _ in range(50)} <= {"a", "b", "c"}


def test_the_scheduler_names_plugins_by_their_config_type() -> None:
    cfg = load_model(
        SchedulerConfig,
        {"filters": [{"type": "health"}, {"type": "role"}], "scorers": [{"type": "session-affinity"}]},
        "test",
    )
    s = Scheduler(cfg)
    assert [name for name, _ in s.filters] == ["health", "role"]
    assert [(w.name, w.weight) for w in s.scorers] == [("session-affinity", 1.0)]


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ({"filters": [{"type": "magic"}]}, "route.yaml: scheduler.filters.0: Input tag 'magic'"),
        ({"scorers": [{"type": "magic"}]}, "route.yaml: scheduler.scorers.0: Input tag 'magic'"),
        ({"picker": {"type": "magic"}}, "route.yaml: scheduler.picker.type: Input should be"),
    ],
)
def test_an_unknown_type_name_fails_at_load_with_one_line(section: dict[str, object], where: str) -> None:
    with pytest.raises(UserError) as err:
        load_model(RouteConfig, {"scheduler": section}, "route.yaml")
    assert str(err.value).startswith(where) and "\n" not in str(err.value)


class _UnwiredScorerConfig(PrefixScorerConfig):
    """A scorer type added to a configuration union without an implementation."""

    type: Literal["unwired"]  # type: ignore[assignment]


class _HealthLookalikeConfig(HealthFilterConfig):
    """A second model claiming an implemented type name: it must not be built as that other plugin."""


class _WithUnwired(SchedulerConfig):
    scorers: list[Annotated[PrefixScorerConfig | _UnwiredScorerConfig, Field(discriminator="type")]]  # type: ignore[assignment]


def test_a_config_type_without_an_implementation_fails_at_load_with_one_line() -> None:
    with pytest.raises(UserError) as err:
        load_model(_WithUnwired, {"scorers": [{"type": "prefix"}, {"type": "unwired"}]}, "route.yaml")
    message = str(err.value)
    assert message.startswith(
        "route.yaml: scorers.1.unwired: Value error, scorer type 'unwired' has no implementation"
    )
    assert "(implemented: prefix, queue," in message and "\n" not in message
    with pytest.raises(
        UserError, match=r"^test: \(top level\): Value error, filter type 'health' has no implementation"
    ):
        load_model(_HealthLookalikeConfig, {"type": "health"}, "test")


def test_a_config_type_without_an_implementation_fails_when_the_scheduler_is_built() -> None:
    # model_construct skips validation, as a config built in code without it would
    unwired = _UnwiredScorerConfig.model_construct(type="unwired", weight=1.0)
    cfg = SchedulerConfig.model_construct(**{**dict(SchedulerConfig()), "scorers": [unwired]})
    with pytest.raises(UserError, match=r"^scheduler.scorers.0: scorer type 'unwired' has no implementation"):
        Scheduler(cfg)
    lookalike = _HealthLookalikeConfig.model_construct(type="health")
    cfg = SchedulerConfig.model_construct(**{**dict(SchedulerConfig()), "filters": [lookalike]})
    with pytest.raises(UserError, match=r"^scheduler.filters.0: filter type 'health' has no implementation"):
        Scheduler(cfg)


def test_route_check_rejects_an_unknown_scorer_type_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "route.yaml"
    bad.write_text(
        "endpoints:\n  - {name: r0, url: 'http://127.0.0.1:8100'}\nscheduler:\n  scorers: [{type: magic}]\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["route", "check", str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "route.yaml: scheduler.scorers.0: Input tag 'magic'" in err[0]


def test_a_registry_refuses_a_type_name_twice_and_a_model_without_one() -> None:
    with pytest.raises(TypeError, match="'health' is registered twice"):
        plugin_registry((HealthFilterConfig, object()), (_HealthLookalikeConfig, object()))
    with pytest.raises(TypeError, match="declares type: Literal"):
        plugin_type(SchedulerConfig)
