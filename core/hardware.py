"""GPU and model specifications: the two tables capacity planning reads.

``GpuSpec`` is what a datasheet says of one GPU (memory, bandwidth, dense 16-bit FLOPs, and
what a CUDA context keeps); ``ModelSpec`` is a decoder-only transformer's architecture (layers,
heads, KV heads, head dimension, dtype), from which weight bytes, KV-cache bytes per token,
prefill FLOPs and activation memory follow. The data lives in ``core/data/gpu_specs.yaml`` and
``core/data/models.yaml`` and is parsed at the edge by ``catalog_from_mappings``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from core.errors import InvalidInput, NotFound

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
}
_T = TypeVar("_T")


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

    def __post_init__(self) -> None:
        positive(f"model {self.name}", params=self.params)
        for field in ("layers", "attention_heads", "kv_heads", "head_dim", "hidden_size"):
            if getattr(self, field) < 1:
                raise InvalidInput(f"model {self.name}: {field} must be ≥ 1")
        if self.attention_heads % self.kv_heads:
            raise InvalidInput(f"model {self.name}: attention heads must be a multiple of KV heads")
        dtype_bytes(self.dtype)

    @property
    def weight_bytes(self) -> float:
        return self.params * dtype_bytes(self.dtype)

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> float:
        """K and V of every layer for one token (GQA stores ``kv_heads``, not all heads)."""
        element = dtype_bytes(kv_dtype or self.dtype)
        return 2 * self.layers * self.kv_heads * self.head_dim * element

    def prefill_flops(self, tokens: int) -> float:
        """FLOPs of one prefill: linear layers, then causal attention (half of n × n)."""
        attention_width = self.attention_heads * self.head_dim
        return 2 * self.params * tokens + 2 * self.layers * tokens * tokens * attention_width

    def activation_bytes(self, batched_tokens: int, sequences: int) -> float:
        """Peak transient memory of one step (an estimate, as vLLM's profiling run measures).

        Per batched token the widest live tensors of a layer (the MLP's gate and up projections,
        the attention's q, k, v and output) in the model's dtype, plus the fp32 logits of every
        sequence that samples a token.
        """
        per_token = (2 * self.intermediate_size + 4 * self.hidden_size) * dtype_bytes(self.dtype)
        return batched_tokens * per_token + sequences * self.vocab_size * 4


@dataclass(frozen=True, slots=True)
class Catalog:
    """The GPU and model tables, by name."""

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]

    def gpu(self, name: str) -> GpuSpec:
        return _lookup("GPU", self.gpus, name)

    def model(self, name: str) -> ModelSpec:
        return _lookup("model", self.models, name)


def _lookup(kind: str, table: Mapping[str, _T], name: str) -> _T:
    key = name.strip().lower()
    if key not in table:
        raise NotFound(f"unknown {kind} {name!r}", details={"known": sorted(table)})
    return table[key]


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
    )


def catalog_from_mappings(gpus: Mapping[str, Any], models: Mapping[str, Any]) -> Catalog:
    """The catalog from the two parsed data files (``gpus:`` and ``models:`` lists)."""
    gpu_list = _entries(gpus, "gpus")
    model_list = _entries(models, "models")
    return Catalog(
        gpus={g.name: g for g in map(gpu_from_mapping, gpu_list)},
        models={m.name: m for m in map(model_from_mapping, model_list)},
    )


def _entries(document: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    entries = document.get(key) if isinstance(document, Mapping) else None
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise InvalidInput(f"the {key} table must be a list of mappings under '{key}:'")
    return entries
