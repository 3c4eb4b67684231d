"""Reading vLLM's /metrics page into load signals (pure)."""

from __future__ import annotations

import pytest

from capstan.route._endpoints import parse_vllm_metrics

pytestmark = pytest.mark.unit

PAGE = """\
# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 160.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m"} 400.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="26800",enable_prefix_caching="True"} 1.0
"""


def test_sums_queues_and_takes_the_fullest_kv_cache() -> None:
    s = parse_vllm_metrics(PAGE)
    assert s.healthy and s.waiting == 4 and s.running == 7 and s.kv_usage == 0.5
    assert (s.prefix_hits, s.prefix_queries) == (160, 400)
    assert (s.block_size, s.num_gpu_blocks) == (16, 26800)


def test_older_vllm_name_and_missing_metrics() -> None:
    s = parse_vllm_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.75\n')
    assert s.kv_usage == 0.75 and s.waiting == 0 and s.block_size is None
    empty = parse_vllm_metrics("")
    assert empty.kv_usage == 0 and empty.running == 0
