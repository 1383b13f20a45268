"""GPU and model specifications: the two tables capacity planning reads.

``GpuSpec`` is what a datasheet says of one GPU (memory, bandwidth, dense 16-bit FLOPs, and
what a CUDA context keeps); ``ModelSpec`` is a decoder-only transformer's architecture (layers,
heads, KV heads, head dimension, dtype), from which weight bytes, KV-cache bytes per token,
prefill FLOPs and activation memory follow. The data lives in ``core/data/gpu_specs.yaml`` and
``core/data/models.yaml`` and is parsed at the edge by ``catalog_from_mappings``.

``Catalog.model`` takes the id a server reports (``meta-llama/Llama-3.1-8B-Instruct``) as well as
a catalogue name: the organisation, letter case, a leading ``Meta-``, a chat/instruct suffix and a
quantisation suffix (``-AWQ``, ``-FP8``, ``-GPTQ-Int4``…) are looked through. Quantisation keeps
the architecture and changes only the bytes a weight takes: the entry comes back with
``weight_dtype`` set to the suffix's (every weight, embeddings included — a slight
underestimate for checkpoints that keep those in 16 bits); the KV cache stays in ``dtype``.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from infersight.core.cost import gpu_words
from infersight.core.errors import InvalidInput, NotFound

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = ["GIB", "MIB", "Catalog", "GpuSpec", "ModelSpec", "catalog_from_mappings", "positive"]

MIB: Final = 1024 * 1024
GIB: Final = 1024 * MIB
#: Bytes per element of the dtypes weights and KV caches are stored in.
DTYPE_BYTES: Final = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
    # OCP microscaling FP4: 4-bit elements with one 8-bit scale per block of 32 (4.25 bits).
    "mxfp4": 4.25 / 8,
}


def dtype_bytes(dtype: str) -> float:
    try:
        return DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise InvalidInput(
            f"unknown dtype {dtype!r}", details={"known": sorted(DTYPE_BYTES)}
        ) from None


def positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not math.isfinite(value) or value <= 0:
            raise InvalidInput(f"{owner}: {name} must be a positive number", details={name: value})


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: what capacity planning needs of its datasheet."""

    name: str
    product: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    dense_flops: float
    cuda_context_bytes: float
    #: Other names of the board (``A100 80GB``): their words match it as its name's do.
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        positive(
            f"gpu {self.name}",
            memory_bytes=self.memory_bytes,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            dense_flops=self.dense_flops,
        )
        if not 0 <= self.cuda_context_bytes < self.memory_bytes:
            raise InvalidInput(f"gpu {self.name}: cuda_context must be within its memory")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's architecture parameters."""

    name: str
    hf_id: str
    params: float
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    dtype: str
    #: Bytes per weight when not ``dtype``'s (FP8, AWQ/GPTQ int4 checkpoints).
    weight_dtype: str = ""
    #: Mixture of experts: routed experts per layer, those a token uses, parameters it uses.
    experts: int = 0
    experts_per_token: int = 0
    active_params: float = 0.0
    #: Bytes per expert weight when not ``weight_dtype``'s (gpt-oss keeps its experts in MXFP4).
    expert_dtype: str = ""
    #: Multi-head latent attention (DeepSeek-V3) caches one latent vector a layer, this wide.
    kv_latent_dim: int = 0
    context_length: int = 0
    source: str = ""
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        positive(f"model {self.name}", params=self.params)
        for field in ("layers", "attention_heads", "kv_heads", "head_dim", "hidden_size"):
            if getattr(self, field) < 1:
                raise InvalidInput(f"model {self.name}: {field} must be ≥ 1")
        if self.attention_heads % self.kv_heads:
            raise InvalidInput(f"model {self.name}: attention heads must be a multiple of KV heads")
        for dtype in (self.dtype, self.weight_dtype, self.expert_dtype):
            if dtype:
                dtype_bytes(dtype)
        if self.experts or self.experts_per_token or self.active_params:
            if not 1 <= self.experts_per_token < self.experts:
                raise InvalidInput(f"model {self.name}: experts per token must be 1 ≤ k < experts")
            if not 0 < self.active_params < self.params:
                raise InvalidInput(f"model {self.name}: active params must be below params")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def _moe_split(self) -> tuple[float, float]:
        """(dense parameters, expert parameters), from total and active counts.

        A token uses all dense weights and ``k / E`` of the expert weights: dense + experts =
        params, dense + k/E × experts = active_params.
        """
        if not self.is_moe:
            return self.params, 0.0
        share = self.experts_per_token / self.experts
        expert = (self.params - self.active_params) / (1 - share)
        return self.params - expert, expert

    def _bytes_of(self, dense: float, expert: float) -> float:
        weight = dtype_bytes(self.weight_dtype or self.dtype)
        expert_weight = dtype_bytes(self.expert_dtype) if self.expert_dtype else weight
        return dense * weight + expert * expert_weight

    @property
    def weight_bytes(self) -> float:
        return self._bytes_of(*self._moe_split())

    def decode_weight_bytes(self, sequences: int = 1) -> float:
        """Weight bytes one decode step of ``sequences`` reads: all of a dense model; of a
        mixture of experts the dense part and the experts at least one sequence routes to
        (expected fraction 1 − (1 − k/E)^sequences, routing taken as uniform)."""
        dense, expert = self._moe_split()
        if not self.is_moe:
            return self.weight_bytes
        touched = 1 - (1 - self.experts_per_token / self.experts) ** max(1, sequences)
        return self._bytes_of(dense, expert * touched)

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """K and V of every layer for one token (GQA stores ``kv_heads``, not all heads; MLA
        one latent vector of ``kv_latent_dim``)."""
        element = dtype_bytes(kv_dtype or self.dtype)
        if self.kv_latent_dim:
            return self.layers * self.kv_latent_dim * element
        return 2 * self.layers * self.kv_heads * self.head_dim * element

    def prefill_flops(self, tokens: int) -> float:
        """FLOPs of one prefill: linear layers (the active ones of a mixture of experts), then
        causal attention (half of n × n)."""
        attention_width = self.attention_heads * self.head_dim
        linear = self.active_params if self.is_moe else self.params
        return 2 * linear * tokens + 2 * self.layers * tokens * tokens * attention_width

    def activation_bytes(self, batched_tokens: int, sequences: int) -> float:
        """Peak transient memory of one step (an estimate, as vLLM's profiling run measures).

        Per batched token the widest live tensors of a layer (the MLP's gate and up projections,
        the attention's q, k, v and output) in the model's dtype, plus the fp32 logits of every
        sequence that samples a token.
        """
        per_token = (2 * self.intermediate_size + 4 * self.hidden_size) * dtype_bytes(self.dtype)
        return batched_tokens * per_token + sequences * self.vocab_size * 4


#: Trailing words of a served model id that name a quantisation, and the weight dtype they mean.
_QUANT_WORDS: Final = {
    "awq": "int4",
    "gptq": "int4",
    "int4": "int4",
    "w4a16": "int4",
    "4bit": "int4",
    "bnb": "",
    "nf4": "int4",
    "int8": "int8",
    "w8a8": "int8",
    "w8a16": "int8",
    "8bit": "int8",
    "fp8": "fp8",
    "dynamic": "",
    "static": "",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "mxfp4",
    "quantized": "",
}
#: Trailing words of a served model id that name a fine-tune of the same architecture.
_VARIANT_WORDS: Final = ("instruct", "chat", "it", "hf", "base")


def _normal(name: str) -> str:
    """Lower case, no organisation, no leading ``meta-`` (``Meta-Llama-3-8B`` → ``llama-3-8b``)."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    key = re.sub(r"[\s_]+", "-", key)
    return key.removeprefix("meta-")


def _strip_quant(key: str) -> tuple[str, str]:
    """(the id without quantisation words at its end, the weight dtype they name or "")."""
    words, dtype = key.split("-"), ""
    while len(words) > 1 and words[-1] in _QUANT_WORDS:
        named = _QUANT_WORDS[words.pop()]
        dtype = dtype or named
    return "-".join(words), dtype


def _strip_variant(key: str) -> str:
    words = key.split("-")
    while len(words) > 1 and words[-1] in _VARIANT_WORDS:
        words.pop()
    return "-".join(words)


@dataclass(frozen=True, slots=True)
class Catalog:
    """The GPU and model tables, by name."""

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]

    def gpu(self, name: str) -> GpuSpec:
        """The entry of a catalogue name, or of a GPU name as the cost model matches one.

        The name as given (case aside), else the entry whose words (of its name or an alias,
        ``core.cost.gpu_words``: vendor left out) are all among the given name's, the most
        words winning: ``H100``, ``NVIDIA H100 80GB HBM3`` → h100; ``NVIDIA A100-SXM4-40GB``
        → a100-40gb. Every GPU the cost model prices therefore plans too. An unknown name is
        answered with the known ones.
        """
        key = name.strip().lower()
        if key in self.gpus:
            return self.gpus[key]
        words = gpu_words(name)
        best: tuple[int, str] | None = None
        for spec in self.gpus.values():
            for other in (spec.name.replace("-", " "), *spec.aliases):
                need = gpu_words(other)
                if need and need <= words and (best is None or len(need) > best[0]):
                    best = (len(need), spec.name)
        if best is not None:
            return self.gpus[best[1]]
        known = ", ".join(self.gpus)
        raise NotFound(
            f"unknown GPU {name!r}; known: {known} (infersight capacity gpus lists their specs)",
            details={"known": sorted(self.gpus)},
        )

    def model(self, name: str) -> ModelSpec:
        """The entry of a catalogue name or a served (Hugging Face) model id.

        Tried in turn: the name as given (case aside); without organisation and ``Meta-``;
        without quantisation words at the end (the entry then stores its weights in their
        dtype); without chat/instruct words at the end. Each key names one entry (the table
        refuses a key claimed twice); an id that matches none is answered with the entries
        whose keys are closest.
        """
        index = _model_index(self.models)
        key = name.strip().lower()
        normal = _normal(name)
        stem, quant = _strip_quant(normal)
        for candidate in (key, normal, stem, _strip_variant(stem)):
            if candidate in index:
                spec = self.models[index[candidate]]
                if quant and candidate in (stem, _strip_variant(stem)):
                    spec = replace(spec, weight_dtype=quant, expert_dtype="")
                return spec
        close = difflib.get_close_matches(_strip_variant(stem), index, n=8, cutoff=0.6)
        matches = list(dict.fromkeys(index[c] for c in close))[:5]
        hint = f"; close matches: {', '.join(matches)}" if matches else ""
        raise NotFound(
            f"unknown model {name!r}{hint} (see infersight capacity models)",
            details={"close_matches": matches, "known": sorted(self.models)},
        )


def _model_index(models: Mapping[str, ModelSpec]) -> dict[str, str]:
    """Every key that names an entry (name, Hugging Face id, aliases; normalised) → its name."""
    index: dict[str, str] = {}
    for spec in models.values():
        keys = {spec.name}
        for other in (spec.hf_id, *spec.aliases):
            if other:
                keys |= {other.strip().lower(), _normal(other)}
        for key in keys:
            if index.setdefault(key, spec.name) != spec.name:
                raise InvalidInput(
                    f"models {index[key]} and {spec.name} both claim the id {key!r}",
                    details={"key": key},
                )
    return index


def _field(entry: Mapping[str, Any], name: str, kind: type) -> Any:
    value = entry.get(name)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be a {kind.__name__}", details={name: repr(value)[:64]})
    return value


def gpu_from_mapping(entry: Mapping[str, Any]) -> GpuSpec:
    return GpuSpec(
        name=_field(entry, "name", str).lower(),
        product=str(entry.get("product", "")),
        memory_bytes=_field(entry, "memory_mib", float) * MIB,
        bandwidth_bytes_per_s=_field(entry, "bandwidth_gbps", float) * 1e9,
        dense_flops=_field(entry, "dense_tflops_16bit", float) * 1e12,
        cuda_context_bytes=float(entry.get("cuda_context_mib", 512)) * MIB,
        aliases=tuple(str(a) for a in entry.get("aliases", ()) or ()),
    )


def model_from_mapping(entry: Mapping[str, Any]) -> ModelSpec:
    return ModelSpec(
        name=_field(entry, "name", str).lower(),
        hf_id=str(entry.get("hf_id", "")),
        params=_field(entry, "params_b", float) * 1e9,
        layers=_field(entry, "layers", int),
        attention_heads=_field(entry, "attention_heads", int),
        kv_heads=_field(entry, "kv_heads", int),
        head_dim=_field(entry, "head_dim", int),
        hidden_size=_field(entry, "hidden_size", int),
        intermediate_size=_field(entry, "intermediate_size", int),
        vocab_size=_field(entry, "vocab_size", int),
        dtype=_field(entry, "dtype", str).lower(),
        weight_dtype=str(entry.get("weight_dtype", "")).lower(),
        experts=_optional(entry, "experts", int, 0),
        experts_per_token=_optional(entry, "experts_per_token", int, 0),
        active_params=_optional(entry, "active_params_b", float, 0.0) * 1e9,
        expert_dtype=str(entry.get("expert_dtype", "")).lower(),
        kv_latent_dim=_optional(entry, "kv_latent_dim", int, 0),
        context_length=_optional(entry, "context_length", int, 0),
        source=str(entry.get("source", "")),
        aliases=tuple(str(a) for a in entry.get("aliases", ()) or ()),
    )


def _optional(entry: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    return default if entry.get(name) is None else _field(entry, name, kind)


def catalog_from_mappings(gpus: Mapping[str, Any], models: Mapping[str, Any]) -> Catalog:
    """The catalog from the two parsed data files (``gpus:`` and ``models:`` lists)."""
    gpu_list = _entries(gpus, "gpus")
    model_list = _entries(models, "models")
    catalog = Catalog(
        gpus={g.name: g for g in map(gpu_from_mapping, gpu_list)},
        models={m.name: m for m in map(model_from_mapping, model_list)},
    )
    _model_index(catalog.models)  # refuses an id two entries claim
    return catalog


def _entries(document: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    entries = document.get(key) if isinstance(document, Mapping) else None
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise InvalidInput(f"the {key} table must be a list of mappings under '{key}:'")
    return entries
