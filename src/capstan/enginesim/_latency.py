"""The step-time model of a simulated vLLM engine and presets drawn from published figures."""

from __future__ import annotations

from dataclasses import dataclass

from capstan.errors import UserError


@dataclass(frozen=True)
class LatencyModel:
    """Duration of one engine step (one forward pass over a continuous batch), in model seconds.

    ``step = step_overhead_s + prefill_tokens * prefill_s_per_token + decoding_seqs * decode_s_per_seq``.

    A lone request whose uncached prompt fits one chunk therefore sees ``TTFT = step_overhead_s + uncached *
    prefill_s_per_token`` and ``ITL = step_overhead_s + decode_s_per_seq``; under load both grow because
    prefill chunks and decoding sequences share steps (vLLM's chunked prefill), and requests queue.
    """

    step_overhead_s: float
    prefill_s_per_token: float
    decode_s_per_seq: float

    def step_time(self, prefill_tokens: int, decoding_seqs: int) -> float:
        return (
            self.step_overhead_s
            + prefill_tokens * self.prefill_s_per_token
            + decoding_seqs * self.decode_s_per_seq
        )


@dataclass(frozen=True)
class Preset:
    """A model/GPU pair: latency model, KV capacity and batch limit, with where each figure comes from."""

    name: str
    latency: LatencyModel
    num_gpu_blocks: int
    max_num_seqs: int
    source: str


# NOTE: KV capacities are in 16-token blocks. Figures marked "published" are quoted in
# /work/shared/research/routing.md; "estimate" marks values chosen to fall inside the published ranges.
_PRESETS: tuple[Preset, ...] = (
    Preset(
        name="llama-3.1-8b-h100",
        latency=LatencyModel(step_overhead_s=0.012, prefill_s_per_token=0.0002, decode_s_per_seq=0.0001),
        num_gpu_blocks=26_800,
        max_num_seqs=256,
        source=(
            "llm-d-inference-sim latency profiles for 7-8B on H100 (published: ITL 10-15 ms, 0.15-0.30 ms per "
            "prompt token); KV = (0.9*80 GB - 16 GB weights) / 128 KiB per token ~ 429k tokens (estimate)"
        ),
    ),
    Preset(
        name="qwen3-32b-h100-tp2",
        latency=LatencyModel(step_overhead_s=0.030, prefill_s_per_token=0.00043, decode_s_per_seq=0.0003),
        num_gpu_blocks=19_208,
        max_num_seqs=256,
        source=(
            "llm-d benchmark 73-capacity: 307,328 KV tokens per pod (published); Red Hat Summit 2026: 10K-token "
            "prompt TTFT 4.3 s cold (published, gives 0.43 ms/token); ITL 63 ms under load in the llm-d guide "
            "(published) fitted with 30 ms + 0.3 ms per decoding sequence (estimate)"
        ),
    ),
    Preset(
        name="llama-3.1-70b-h100-tp4",
        latency=LatencyModel(step_overhead_s=0.025, prefill_s_per_token=0.00025, decode_s_per_seq=0.0002),
        num_gpu_blocks=28_836,
        max_num_seqs=256,
        source=(
            "llm-d benchmark 37-capacity: 461,376 KV tokens per pod (published); step and per-token times "
            "(estimate, scaled from the 8B profile by weights per GPU)"
        ),
    ),
    Preset(
        name="tiny-test",
        latency=LatencyModel(step_overhead_s=0.005, prefill_s_per_token=0.0001, decode_s_per_seq=0.0001),
        num_gpu_blocks=2048,
        max_num_seqs=16,
        source="small, fast engine for tests and demos (no published basis)",
    ),
)


def preset_names() -> list[str]:
    return [p.name for p in _PRESETS]


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an unknown name is a :class:`UserError` listing the known ones."""
    for p in _PRESETS:
        if p.name == name:
            return p
    raise UserError(f"--preset: unknown preset {name!r}; known: {', '.join(preset_names())}")
