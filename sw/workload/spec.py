"""The model spec of a training workload: named presets or a JSON file with the same fields, validated up front.

Sizes follow a transformer: a layer has attention (4 h^2 parameters) and an FFN (8 h^2); an MoE layer has
``experts`` FFNs of which each token uses ``top_k``.  Bytes and FLOPs are those of the real model times ``scale``
(a stated factor so a step fits the emulation); the GPU is slowed by the same factor as the emulated link
(link rate / ``nic_gbps``), so the compute : communication ratio is the real system's.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

ATTN_PARAMS_PER_H2 = 4
FFN_PARAMS_PER_H2 = 8
FLOPS_PER_PARAM_TOKEN_FWD = 2
"""Forward FLOPs per active parameter and token (a multiply and an add); backward is twice the forward."""
BWD_PER_FWD = 2
OPTIMIZER_FLOPS_PER_PARAM = 10
"""Adam's element-wise update, a few FLOPs per parameter the rank holds."""


class WorkloadSpecError(ValueError):
    """A bad model spec: the message names the field (and file), the value and what is allowed."""

    is_user_error = True


@dataclass(frozen=True)
class ModelSpec:
    """One model and its parallelism.  ``dp``/``ep`` None: every rank of the job.  ``params`` None: derived."""

    name: str
    layers: int
    hidden: int
    tokens_per_step: int
    gpu_tflops: float
    scale: float
    nic_gbps: float = 100.0
    experts: int = 0
    top_k: int = 0
    params: int | None = None
    dp: int | None = None
    ep: int | None = None
    bytes_per_param: int = 2
    bucket_mb: float = 25.0

    @property
    def moe(self) -> bool:
        return self.experts > 0

    def dense_params_per_layer(self) -> int:
        """Parameters of one layer every data-parallel rank replicates (their gradients are allreduced)."""
        if self.params is not None and not self.moe:
            return self.params // self.layers
        h2 = self.hidden * self.hidden
        return ATTN_PARAMS_PER_H2 * h2 + (self.hidden * self.experts if self.moe else FFN_PARAMS_PER_H2 * h2)

    def expert_params_per_layer(self, ep: int) -> int:
        """Expert FFN parameters one rank holds in one MoE layer (experts / ep of them; no allreduce at dp = ep)."""
        return (self.experts // ep) * FFN_PARAMS_PER_H2 * self.hidden * self.hidden if self.moe else 0

    def total_params(self) -> int:
        if self.params is not None:
            return self.params
        return self.layers * (self.dense_params_per_layer() + self.experts * FFN_PARAMS_PER_H2 * self.hidden ** 2)

    def active_params_per_layer(self) -> int:
        """Parameters one token goes through in one layer (attention + top_k experts for MoE)."""
        if self.moe:
            return self.dense_params_per_layer() + self.top_k * FFN_PARAMS_PER_H2 * self.hidden * self.hidden
        return self.dense_params_per_layer()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_params": self.total_params()}


PRESETS: dict[str, ModelSpec] = {
    "gpt-small": ModelSpec(name="gpt-small", layers=12, hidden=768, tokens_per_step=65536, gpu_tflops=100.0,
                           scale=1e-2, nic_gbps=100.0),
    "gpt-medium": ModelSpec(name="gpt-medium", layers=24, hidden=1024, tokens_per_step=65536, gpu_tflops=100.0,
                            scale=1e-2, nic_gbps=100.0),
    "moe-small": ModelSpec(name="moe-small", layers=8, hidden=1024, tokens_per_step=16384, gpu_tflops=100.0,
                           scale=1e-2, nic_gbps=100.0, experts=8, top_k=2),
    "moe-1k": ModelSpec(name="moe-1k", layers=8, hidden=2048, tokens_per_step=4 * 1024 * 1024, gpu_tflops=100.0,
                        scale=1e-2, nic_gbps=100.0, experts=1024, top_k=8),
}
"""Named models: dense GPT-like and a Mixtral-like MoE (every layer MoE), shrunk by ``scale`` 1e-2 (so most
messages are larger than the local throttle's 64 KiB idle burst, which smaller ones leave faster than the line).
``moe-1k`` is a fine-grained MoE sized for 1,024 expert-parallel GPUs (1,024 experts, top-8, 4,096 tokens per GPU
there), for ``starpulse train --backend sim``: on a few emulated ranks its step moves hundreds of MB per rank."""

_INT_FIELDS = {"layers": (1, 1024), "hidden": (8, 1 << 16), "tokens_per_step": (1, 1 << 30), "experts": (0, 4096),
               "top_k": (0, 64), "params": (1, 1 << 50), "dp": (1, 1 << 20), "ep": (1, 1 << 20),
               "bytes_per_param": (1, 8)}
_FLOAT_FIELDS = {"gpu_tflops": (1e-6, 1e6), "scale": (1e-9, 1.0), "nic_gbps": (1e-3, 1e5), "bucket_mb": (1e-6, 1e5)}


def _check_field(name: str, value: Any, where: str) -> Any:
    if name in _INT_FIELDS:
        lo, hi = _INT_FIELDS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise WorkloadSpecError(f"{where}{name} {value!r}: expected an integer in {lo}..{hi}")
    elif name in _FLOAT_FIELDS:
        lo, hi = _FLOAT_FIELDS[name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or not lo <= value <= hi:
            raise WorkloadSpecError(f"{where}{name} {value!r}: expected a number in {lo:g}..{hi:g}")
    elif name == "name" and (not isinstance(value, str) or not value):
        raise WorkloadSpecError(f"{where}name {value!r}: expected a non-empty string")
    return value


def validate(spec: ModelSpec, where: str = "") -> ModelSpec:
    """Every field in its range and the MoE fields consistent; ``where`` prefixes messages (``FILE: ``)."""
    for f in fields(spec):
        value = getattr(spec, f.name)
        if value is not None or f.name not in ("params", "dp", "ep"):
            _check_field(f.name, value, where)
    if spec.moe:
        if not 1 <= spec.top_k <= spec.experts:
            raise WorkloadSpecError(f"{where}top_k {spec.top_k}: expected 1..experts ({spec.experts})")
        if spec.params is not None:
            raise WorkloadSpecError(f"{where}params: derived for an MoE model (from hidden and experts); omit it")
        if spec.ep is not None and spec.experts % spec.ep:
            raise WorkloadSpecError(f"{where}experts {spec.experts}: not divisible by ep {spec.ep} "
                                    "(each expert-parallel rank holds experts / ep experts)")
    elif spec.top_k or spec.ep is not None:
        raise WorkloadSpecError(f"{where}{'top_k' if spec.top_k else 'ep'}: needs experts > 0 (a dense model)")
    return spec


def resolve_for_world(spec: ModelSpec, world: int) -> ModelSpec:
    """The spec with dp/ep filled for a job of ``world`` ranks; both must span every rank (the communicator
    has no sub-groups), and the experts must divide over them."""
    dp = spec.dp if spec.dp is not None else world
    if dp != world:
        raise WorkloadSpecError(f"dp {dp}: must equal the job's ranks ({world}): every rank is data parallel")
    ep = spec.ep if spec.ep is not None else world
    if spec.moe and ep != world:
        raise WorkloadSpecError(f"ep {ep}: must equal the job's ranks ({world}): all-to-all spans every rank")
    if spec.moe and spec.experts % ep:
        raise WorkloadSpecError(f"experts {spec.experts}: not divisible by the {ep} expert-parallel ranks")
    if spec.tokens_per_step % dp:
        raise WorkloadSpecError(f"tokens_per_step {spec.tokens_per_step}: not divisible by dp {dp}")
    return replace(spec, dp=dp, ep=ep if spec.moe else None)


def load_spec(text: str) -> ModelSpec:
    """A preset name, or a JSON file with ModelSpec's fields (``preset`` may name a base to override)."""
    if text in PRESETS:
        return validate(PRESETS[text])
    path = Path(text)
    if not path.suffix and "/" not in text:
        raise WorkloadSpecError(f"--model {text}: unknown preset (presets: {', '.join(PRESETS)}; or a JSON file)")
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise WorkloadSpecError(f"--model {text}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise WorkloadSpecError(f"{text}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})") from None
    where = f"{text}: "
    if not isinstance(data, dict):
        raise WorkloadSpecError(f"{where}expected a JSON object of model fields")
    known = {f.name for f in fields(ModelSpec)}
    base: dict[str, Any] = {}
    if "preset" in data:
        preset = data.pop("preset")
        if preset not in PRESETS:
            raise WorkloadSpecError(f"{where}preset {preset!r}: unknown (presets: {', '.join(PRESETS)})")
        base = asdict(PRESETS[preset])
    unknown = sorted(set(data) - known)
    if unknown:
        raise WorkloadSpecError(f"{where}{unknown[0]}: unknown field (fields: {', '.join(sorted(known))})")
    merged = {"name": path.stem, **base, **data}
    missing = [f.name for f in fields(ModelSpec) if f.name not in merged and f.default is not None
               and f.name in ("layers", "hidden", "tokens_per_step", "gpu_tflops", "scale")]
    if missing:
        raise WorkloadSpecError(f"{where}{missing[0]}: missing (required: layers, hidden, tokens_per_step, "
                                "gpu_tflops, scale)")
    for name, value in merged.items():
        if value is not None:
            _check_field(name, value, where)
    return validate(ModelSpec(**merged), where)
