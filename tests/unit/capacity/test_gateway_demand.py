"""A gateway's request rate as replicas announced ahead (pure): the counter read from a metrics page, the rate over
a window (restarts, staleness), the replicas beyond the Deployment's, shaped like its pod template."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.capacity import AllAnnounced, Pod, TraceLead
from capstan.capacity.live import MAX_GATEWAY_REPLICAS, GatewayDemand, GatewayError, requests_total

pytestmark = pytest.mark.unit

PAGE = """# HELP capstan_route_requests_total Requests forwarded, per endpoint
# TYPE capstan_route_requests_total counter
capstan_route_requests_total{endpoint="a"} 30.0
capstan_route_requests_total{endpoint="b"} 30.0
# TYPE capstan_route_responses_total counter
capstan_route_responses_total{status="200"} 40.0
capstan_route_responses_total{status="503"} 7.0
capstan_route_responses_total{status="502"} 1.0
capstan_route_responses_total{status="499"} 1.0
capstan_route_responses_total{status="400"} 100.0
capstan_route_responses_total{status="404"} 100.0
capstan_route_responses_created{status="200"} 1.7e9
# TYPE capstan_route_rejected_total counter
capstan_route_rejected_total{status="503",reason="no_healthy_endpoint"} 5.0
capstan_route_rejected_total{status="503",reason="no_endpoint"} 2.0
capstan_route_rejected_total{status="400",reason="invalid_request"} 100.0
capstan_route_rejected_total{status="404",reason="model_not_found"} 100.0
capstan_route_rejected_total{status="502",reason="upstream_error"} 1.0
# TYPE capstan_route_prompt_tokens_total counter
capstan_route_prompt_tokens_total 999.0
"""


def deployment(replicas: int | None = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {"app": "llm"}},
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "resources": {"requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}},
                    }
                ]
            },
        }
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {"metadata": {"name": "llm", "namespace": "serve"}, "spec": spec}


def test_each_client_request_counts_once_and_a_bad_page_is_named() -> None:
    # answers relayed (200, a client gone: 499), refusals for want of a replica (503) and a request every endpoint
    # failed (502: the replicas were there but failing); not bad requests or unknown models, not the _created
    # samples or tokens, and not the forwards: 60 of them for these 49 requests, since a request retried on
    # another endpoint is forwarded once per endpoint tried
    assert requests_total(PAGE) == 40.0 + 1.0 + 1.0 + 5.0 + 2.0
    # a gateway that has answered nothing yet exports the counter with no sample
    empty = "# HELP capstan_route_responses_total x\n# TYPE capstan_route_responses_total counter\n"
    assert requests_total(empty) == 0.0
    refused = (
        'capstan_route_responses_total{status="503"} 4.0\n'
        'capstan_route_rejected_total{status="503",reason="no_endpoint"} 4.0\n'
    )
    assert (
        requests_total(empty + refused) == 4.0
    )  # a Deployment at zero replicas: its refusals are its demand
    with pytest.raises(GatewayError, match="no capstan_route_responses_total"):
        requests_total("other_metric_total 3\n")
    with pytest.raises(GatewayError, match="no capstan_route_responses_total"):
        requests_total('capstan_route_requests_total{endpoint="a"} 3\n')  # forwards alone: not the count
    with pytest.raises(GatewayError, match="not a Prometheus metrics page"):
        requests_total("capstan_route_responses_total{status= 3\n")


def test_the_rate_spans_the_window_survives_a_restart_and_goes_stale() -> None:
    d = GatewayDemand("serve/llm", 2.0, window_s=60.0, refresh_s=5.0)
    assert d.rate(0.0) is None
    d.observe(100.0, 0.0)
    assert d.rate(0.0) is None  # one scrape: no rate yet
    d.observe(160.0, 30.0)
    assert d.rate(30.0) == pytest.approx(2.0)
    d.observe(40.0, 60.0)  # the gateway restarted: 40 requests since
    assert d.rate(60.0) == pytest.approx((60.0 + 40.0) / 60.0)
    for t in range(65, 200, 5):  # a steady 1 request/s: the window forgets the old samples
        d.observe(40.0 + (t - 60), float(t))
    assert d.rate(195.0) == pytest.approx(1.0)
    assert len(d._samples) <= 60 / 5 + 2
    assert d.rate(195.0 + d.stale_after_s + 1) is None  # no scrape for too long: no rate, no replicas
    d.observe(0.0, 150.0)  # out of order: ignored
    assert d.rate(195.0) == pytest.approx(1.0)


def test_replicas_beyond_the_deployment_s_are_announced_shaped_like_its_pods() -> None:
    d = GatewayDemand("serve/llm", 2.0, window_s=10.0, refresh_s=5.0)
    d.follow({"serve/llm": deployment(replicas=1)})
    assert d.announced(0.0) == ((), 5.0)  # no rate yet
    d.observe(0.0, 0.0)
    d.observe(70.0, 10.0)  # 7 requests/s at 2 a replica: 4 replicas, 1 there
    pods, again = d.announced(10.0)
    assert again == 15.0
    assert [p.name for p in pods] == ["serve/llm-gateway-0", "serve/llm-gateway-1", "serve/llm-gateway-2"]
    assert all(isinstance(p, Pod) and p.num_gpu == 1 and p.cpu_milli == 8000 for p in pods)
    assert all(p.arrival == 10.0 and p.service == "serve/llm" for p in pods)
    d.follow({"serve/llm": deployment(replicas=4)})  # the autoscaler caught up: nothing left to announce
    assert d.announced(10.0)[0] == ()
    d.follow({"serve/llm": deployment(replicas=None)})  # no replicas field: Kubernetes' default, 1
    assert len(d.announced(10.0)[0]) == 3
    assert not d.missing
    d.follow({})  # no such Deployment: nothing, and it says so
    assert d.announced(10.0)[0] == () and d.missing
    d.follow({"serve/llm": deployment(replicas=0)})
    d.observe(70.0 + 10_000.0, 20.0)  # a flood is a hint, not a promise: bounded
    assert len(d.announced(20.0)[0]) == MAX_GATEWAY_REPLICAS


def test_bad_settings_are_refused() -> None:
    for bad in ("llm", "/llm", "serve/", "a/b/c"):
        with pytest.raises(ValueError, match="namespace/name"):
            GatewayDemand(bad, 1.0)
    for rps in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="replica_rps"):
            GatewayDemand("serve/llm", rps)


def test_announcements_from_several_sources_are_joined() -> None:
    pods = (Pod("p0", 100.0, 1000, 1024), Pod("p1", 500.0, 1000, 1024))
    d = GatewayDemand("serve/llm", 1.0, window_s=10.0, refresh_s=5.0)
    d.follow({"serve/llm": deployment(replicas=0)})
    d.observe(0.0, 0.0)
    d.observe(10.0, 10.0)
    joined, at = AllAnnounced(TraceLead(pods, 200.0), d).announced(10.0)
    assert [p.name for p in joined] == ["p0", "serve/llm-gateway-0"]
    assert at == 15.0  # the gateway's refresh, before p1's announcement at 300
    assert AllAnnounced().announced(0.0) == ((), None)
