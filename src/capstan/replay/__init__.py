"""Workloads and replay: a documented request-file format, generators for it, and an async HTTP replayer.

* Format (JSONL; its fields are documented in ``src/capstan/replay/_format.py``): :class:`ReplayRequest`,
  :func:`read_requests`, :func:`write_requests`, :func:`expand_body` (a request's OpenAI body).
* Generators: :func:`mooncake_requests` (Mooncake traces, prompts as compact ``prompt_ref``),
  :func:`agentic_requests` (:class:`AgenticConfig`), :func:`shared_prefix_requests` (:class:`SharedPrefixConfig`),
  the last two drawing text from :class:`Words` (seeded, an exact token count).
* Replayer: :func:`replay` with :class:`ReplayConfig` → :class:`ReplayReport` (per-request
  :class:`RequestResult`: TTFT, e2e, cached tokens, errors; :class:`BackendCounters`; ``summary``), and
  :func:`result_rows` for its JSON lines.

It lives apart from the engine simulator because it drives any OpenAI-compatible server: the simulated replicas,
Capstan's router, or a peer router in front of them.
"""

from capstan.replay._format import ReplayRequest, expand_body, read_requests, write_requests
from capstan.replay._generators import (
    AgenticConfig,
    SharedPrefixConfig,
    Words,
    agentic_requests,
    mooncake_requests,
    shared_prefix_requests,
)
from capstan.replay._replayer import (
    BackendCounters,
    ReplayConfig,
    ReplayReport,
    RequestResult,
    replay,
    result_rows,
)

__all__ = [
    "AgenticConfig",
    "BackendCounters",
    "ReplayConfig",
    "ReplayReport",
    "ReplayRequest",
    "RequestResult",
    "SharedPrefixConfig",
    "Words",
    "agentic_requests",
    "expand_body",
    "mooncake_requests",
    "read_requests",
    "replay",
    "result_rows",
    "shared_prefix_requests",
    "write_requests",
]
