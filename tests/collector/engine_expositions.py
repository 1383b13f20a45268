# ruff: noqa: E501 (exposition lines are kept as the engines write them)
"""``/metrics`` bodies of data-parallel servers, as the engines write them.

vLLM V1 (``vllm/v1/metrics/loggers.py``) labels every series ``model_name`` and ``engine``
(the engine index) in that order, through ``prometheus_client`` (counters with ``_total`` and
``_created``, ``le`` last). SGLang's schedulers label theirs ``model_name``, ``engine_type``,
``tp_rank``, ``pp_rank`` and, with data parallelism, ``dp_rank``; with DP attention every
tensor-parallel worker of a rank writes the same scheduler figures. Its request and token
counters come from the tokenizer process, without ``dp_rank``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"

#: Two vLLM engines (``--data-parallel-size 2``): KV usage 0.41 and 0.55.
VLLM_TWO_ENGINES = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 5.0
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 1.0
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 0.41
vllm:kv_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 0.55
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 1000.0
vllm:prefix_cache_queries_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 3000.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 1.764578e+09
vllm:prefix_cache_queries_created{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 1.764578e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 200.0
vllm:prefix_cache_hits_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 1200.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 3.0
vllm:num_preemptions_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 4.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 12000.0
vllm:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 13000.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 3400.0
vllm:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 3600.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0",finished_reason="stop"} 90.0
vllm:request_success_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0",finished_reason="length"} 8.0
vllm:request_success_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0",finished_reason="abort"} 2.0
vllm:request_success_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1",finished_reason="stop"} 95.0
vllm:request_success_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1",finished_reason="length"} 4.0
vllm:request_success_total{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1",finished_reason="abort"} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0",le="0.1"} 60.0
vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0",le="0.25"} 98.0
vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0",le="+Inf"} 100.0
vllm:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 100.0
vllm:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"} 9.5
vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1",le="0.1"} 55.0
vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1",le="0.25"} 97.0
vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1",le="+Inf"} 100.0
vllm:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 100.0
vllm:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct",engine="1"} 10.5
"""


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
    lines: list[str] = []
    gauges = (
        ("sglang:num_running_reqs", "The number of running requests.", "running"),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "queued"),
        ("sglang:token_usage", "The token usage.", "token_usage"),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", "cache_hit_rate"),
    )
    for name, doc, field in gauges:
        lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        for dp, rank in enumerate(ranks):
            for tp in range(dp * tp_per_rank, (dp + 1) * tp_per_rank):
                labels = (
                    f'model_name="{model}",engine_type="unified",tp_rank="{tp}",'
                    f'pp_rank="0",dp_rank="{dp}"'
                )
                lines.append(f"{name}{{{labels}}} {float(getattr(rank, field))!r}")
    for name, doc, value in (
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", 50000.0),
        ("sglang:generation_tokens", "Number of generation tokens processed.", 9000.0),
        ("sglang:num_requests", "The number of processed requests.", 400.0),
        ("sglang:num_aborted_requests", "Number of requests aborted.", 3.0),
    ):
        lines += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
        lines.append(f'{name}_total{{model_name="{model}",engine_type="unified"}} {value!r}')
    lines += [
        "# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE sglang:time_to_first_token_seconds histogram",
        f'sglang:time_to_first_token_seconds_bucket{{model_name="{model}",engine_type="unified",le="0.1"}} 300.0',
        f'sglang:time_to_first_token_seconds_bucket{{model_name="{model}",engine_type="unified",le="+Inf"}} 400.0',
        f'sglang:time_to_first_token_seconds_count{{model_name="{model}",engine_type="unified"}} 400.0',
        f'sglang:time_to_first_token_seconds_sum{{model_name="{model}",engine_type="unified"}} 41.0',
    ]
    return "\n".join(lines) + "\n"


SGLANG_TWO_RANKS = (Rank(6, 1, 0.31, 0.20), Rank(8, 3, 0.35, 0.30))
#: Four ranks, one of them hot: the instance mean is calm, the hottest engine is not.
SGLANG_FOUR_RANKS = (
    Rank(9, 12, 0.97, 0.10),
    Rank(4, 0, 0.30, 0.40),
    Rank(5, 1, 0.35, 0.50),
    Rank(3, 0, 0.26, 0.60),
)
