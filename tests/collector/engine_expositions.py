# ruff: noqa: E501 (the families' help texts are kept as the engines write them)
"""``/metrics`` bodies of data-parallel servers, as the engines write them.

vLLM V1 (``vllm/v1/metrics/loggers.py``) labels every series ``model_name`` and ``engine``
(the engine index) in that order, through ``prometheus_client`` (counters with ``_total`` and
``_created``, ``le`` last). SGLang's schedulers label theirs ``model_name``, ``engine_type``,
``tp_rank``, ``pp_rank`` and, with data parallelism, ``dp_rank``; with DP attention every
tensor-parallel worker of a rank writes the same scheduler figures. Its request and token
counters come from the tokenizer process, without ``dp_rank``.

Both bodies are written line for line as ``prometheus_client`` writes them (``family``: the
``HELP`` and ``TYPE`` lines, then the samples, values as Go formats them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client.utils import floatToGoString

#: One sample of a family: the name's suffix (``_bucket``, ``_count``…), labels, value.
Sample = tuple[str, str, float]


def family(name: str, doc: str, kind: str, samples: Iterable[Sample]) -> list[str]:
    """One metric family's lines: ``HELP``, ``TYPE`` and a line per sample."""
    lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{suffix}{{{labels}}} {floatToGoString(v)}" for suffix, labels, v in samples]
    return lines


VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
_QUERIES = "Prefix cache queries, in terms of number of queried tokens."
#: vLLM's families with one series per engine: name, type, help text, ``VllmEngine`` field.
_VLLM_FAMILIES = (
    ("num_requests_running", "gauge", "Number of requests in model execution batches.", "running"),
    ("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "waiting"),
    ("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "kv_cache_usage"),
    ("prefix_cache_queries_total", "counter", _QUERIES, "prefix_queries"),
    ("prefix_cache_queries_created", "gauge", _QUERIES, "created"),
    ("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", "prefix_hits"),
    ("num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", "preemptions"),
    ("prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens"),
    ("generation_tokens_total", "counter", "Number of generation tokens processed.", "generation_tokens"),
)  # fmt: skip


@dataclass(frozen=True)
class VllmEngine:
    """One vLLM engine's figures (``--data-parallel-size`` makes several)."""

    running: float
    waiting: float
    kv_cache_usage: float
    prefix_queries: float
    prefix_hits: float
    preemptions: float
    prompt_tokens: float
    generation_tokens: float
    #: finished_reason → requests.
    finished: tuple[tuple[str, float], ...]
    #: ``le`` → cumulative count of the TTFT histogram, ``+Inf`` last.
    ttft_buckets: tuple[tuple[str, float], ...]
    ttft_sum: float
    #: When the engine's counters were created.
    created: float = 1.764578e09


def vllm_body(engines: Sequence[VllmEngine], model: str = VLLM_MODEL) -> str:
    """A vLLM V1 ``/metrics`` body with one series per engine of each family."""
    each = [(f'model_name="{model}",engine="{i}"', e) for i, e in enumerate(engines)]
    lines: list[str] = []
    for name, kind, doc, field in _VLLM_FAMILIES:
        samples = [("", label, getattr(engine, field)) for label, engine in each]
        lines += family(f"vllm:{name}", doc, kind, samples)
    finished = [
        ("", f'{label},finished_reason="{reason}"', count)
        for label, engine in each
        for reason, count in engine.finished
    ]
    success = "Count of successfully processed requests."
    lines += family("vllm:request_success_total", success, "counter", finished)
    ttft: list[Sample] = []
    for label, engine in each:
        ttft += [("_bucket", f'{label},le="{le}"', count) for le, count in engine.ttft_buckets]
        ttft += [("_count", label, engine.ttft_buckets[-1][1]), ("_sum", label, engine.ttft_sum)]
    doc = "Histogram of time to first token in seconds."
    lines += family("vllm:time_to_first_token_seconds", doc, "histogram", ttft)
    return "\n".join(lines) + "\n"


#: Two vLLM engines (``--data-parallel-size 2``): KV usage 0.41 and 0.55.
VLLM_ENGINES = (
        VllmEngine(
            running=5, waiting=1, kv_cache_usage=0.41, prefix_queries=1000, prefix_hits=200,
            preemptions=3, prompt_tokens=12000, generation_tokens=3400,
            finished=(("stop", 90), ("length", 8), ("abort", 2)),
            ttft_buckets=(("0.1", 60), ("0.25", 98), ("+Inf", 100)), ttft_sum=9.5,
        ),
        VllmEngine(
            running=7, waiting=2, kv_cache_usage=0.55, prefix_queries=3000, prefix_hits=1200,
            preemptions=4, prompt_tokens=13000, generation_tokens=3600,
            finished=(("stop", 95), ("length", 4), ("abort", 1)),
            ttft_buckets=(("0.1", 55), ("0.25", 97), ("+Inf", 100)), ttft_sum=10.5,
        ),
)  # fmt: skip
VLLM_TWO_ENGINES = vllm_body(VLLM_ENGINES)


@dataclass(frozen=True)
class Rank:
    """One SGLang data-parallel rank's scheduler figures."""

    running: float
    queued: float
    token_usage: float
    cache_hit_rate: float


def sglang_body(ranks: Sequence[Rank], tp_per_rank: int = 1, model: str = "qwen") -> str:
    """An SGLang ``/metrics`` body with ``len(ranks)`` data-parallel ranks, each written by
    ``tp_per_rank`` tensor-parallel workers (DP attention: ``dp_rank = tp_rank // tp_per_rank``)."""
    unified = f'model_name="{model}",engine_type="unified"'
    workers = [
        (f'{unified},tp_rank="{tp}",pp_rank="0",dp_rank="{dp}"', rank)
        for dp, rank in enumerate(ranks)
        for tp in range(dp * tp_per_rank, (dp + 1) * tp_per_rank)
    ]
    lines: list[str] = []
    for name, doc, field in (
        ("sglang:num_running_reqs", "The number of running requests.", "running"),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "queued"),
        ("sglang:token_usage", "The token usage.", "token_usage"),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", "cache_hit_rate"),
    ):
        lines += family(name, doc, "gauge", [("", w, getattr(r, field)) for w, r in workers])
    for name, doc, value in (
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", 50000.0),
        ("sglang:generation_tokens", "Number of generation tokens processed.", 9000.0),
        ("sglang:num_requests", "The number of processed requests.", 400.0),
        ("sglang:num_aborted_requests", "Number of requests aborted.", 3.0),
    ):
        lines += family(f"{name}_total", doc, "counter", [("", unified, value)])
    ttft = [
        ("_bucket", f'{unified},le="0.1"', 300.0),
        ("_bucket", f'{unified},le="+Inf"', 400.0),
        ("_count", unified, 400.0),
        ("_sum", unified, 41.0),
    ]
    doc = "Histogram of time to first token in seconds."
    lines += family("sglang:time_to_first_token_seconds", doc, "histogram", ttft)
    return "\n".join(lines) + "\n"


SGLANG_TWO_RANKS = (Rank(6, 1, 0.31, 0.20), Rank(8, 3, 0.35, 0.30))
#: Four ranks, one of them hot: the instance mean is calm, the hottest engine is not.
SGLANG_FOUR_RANKS = (
    Rank(9, 12, 0.97, 0.10),
    Rank(4, 0, 0.30, 0.40),
    Rank(5, 1, 0.35, 0.50),
    Rank(3, 0, 0.26, 0.60),
)
