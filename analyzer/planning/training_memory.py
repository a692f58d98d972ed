"""Training memory estimate: weights, gradients, optimizer state, activations; sharding; LoRA/QLoRA.

Byte counts per parameter follow the ZeRO paper (Rajbhandari et al. 2020): mixed precision keeps
16-bit weights (2 bytes) and gradients (2) plus K bytes of optimizer state, K = 12 for Adam
(fp32 master weights, momentum, variance). Activations per transformer layer follow Korthikanti
et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"):
s*b*h*(34 + 5*a*s/h) bytes at 16 bits without recomputation, 2*s*b*h with full activation
checkpointing (the layer input only; one layer is recomputed at a time). Decimal GB.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzer.analysis.thresholds import MEMORY_USABLE
from analyzer.errors import GpuAnalyzeError
from analyzer.machine.datasheet import GPUS

#: Ranges the estimate accepts: beyond them an input is a typo, not a model.
MAX_PARAMS = 1e15
MAX_GPUS = 1 << 20
PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16", "fp8-mixed")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw", "adam-8bit")
SHARDING = ("none", "zero1", "zero2", "zero3", "fsdp")
#: bytes per parameter: weights, gradients, master weights (fp32 copy kept by the optimizer)
_PRECISION_BYTES = {
    "fp32": (4, 4, 0),
    "bf16-mixed": (2, 2, 4),
    "fp16-mixed": (2, 2, 4),
    "bf16": (2, 2, 0),
    "fp8-mixed": (1, 2, 4),
}
_OPTIMIZER_BYTES = {"sgd": 0, "sgd-momentum": 4, "adam": 8, "adamw": 8, "adam-8bit": 2}
QLORA_BYTES = 0.5 + 0.0625  # 4-bit NF4 weights plus ~0.5 bit of quantisation constants per parameter


@dataclass(frozen=True, slots=True)
class ModelShape:
    params: float
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    source: str = "--params"


@dataclass(kw_only=True, slots=True)
class MemoryInputs:
    """What is trained and how."""

    model: ModelShape
    """Parameter count and (for activations and LoRA) the transformer shape."""
    precision: str = "bf16-mixed"
    """fp32, bf16-mixed, fp16-mixed, bf16 (pure), fp8-mixed."""
    optimizer: str = "adamw"
    """sgd, sgd-momentum, adam, adamw, adam-8bit."""
    batch: int | None = None
    """Micro-batch per GPU (activations need it and seq_len)."""
    seq_len: int | None = None
    """Tokens per sample."""
    checkpointing: bool = False
    """Full activation checkpointing."""
    sharding: str = "none"
    """none, zero1 (optimizer), zero2 (+gradients), zero3 / fsdp (+weights)."""
    gpus: int = 1
    """GPUs the states are sharded over."""
    lora_rank: int | None = None
    """LoRA rank: base weights frozen; adapters on the 4 attention projections of every layer."""
    qlora: bool = False
    """Base weights in 4-bit (needs lora_rank)."""

    def __post_init__(self) -> None:
        for name, allowed in (("precision", PRECISIONS), ("optimizer", OPTIMIZERS), ("sharding", SHARDING)):
            if getattr(self, name) not in allowed:
                raise GpuAnalyzeError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if not 0 < self.model.params <= MAX_PARAMS:
            raise GpuAnalyzeError(
                f"the parameter count must be a positive number up to {MAX_PARAMS:.0e}, not {self.model.params!r}"
            )
        if not 1 <= self.gpus <= MAX_GPUS:
            raise GpuAnalyzeError(f"gpus must be between 1 and {MAX_GPUS}")
        for name in ("batch", "seq_len", "lora_rank"):
            value = getattr(self, name)
            if value is not None and not 1 <= value <= 1 << 24:
                raise GpuAnalyzeError(f"{name} must be a positive whole number up to {1 << 24}, not {value!r}")
        if self.qlora and not self.lora_rank:
            raise GpuAnalyzeError("qlora needs lora_rank")
        if self.lora_rank and not (self.model.layers and self.model.hidden):
            raise GpuAnalyzeError("LoRA needs the model shape: pass a config.json instead of --params")


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    weights_gb: float
    gradients_gb: float
    optimizer_gb: float
    """Optimizer state including the fp32 master weights of mixed precision."""
    activations_gb: float | None
    total_gb: float
    """Per GPU, after sharding."""
    trainable_params: float
    fits: dict[str, bool]
    assumptions: tuple[str, ...]


def estimate(inp: MemoryInputs) -> MemoryEstimate:
    p = inp.model.params
    w_bytes, g_bytes, master = _PRECISION_BYTES[inp.precision]
    notes = [
        f"{p / 1e9:.2f} B parameters ({inp.model.source}); {inp.precision}: {w_bytes} B weights, "
        f"{g_bytes} B gradients, {master} B master weights per trainable parameter; {inp.optimizer}: "
        f"{_OPTIMIZER_BYTES[inp.optimizer]} B state"
    ]
    trainable = p
    weights = p * w_bytes
    if inp.lora_rank:
        assert inp.model.hidden and inp.model.layers  # MemoryInputs checked LoRA has the shape
        trainable = 2 * inp.lora_rank * inp.model.hidden * 4 * inp.model.layers
        weights = p * (QLORA_BYTES if inp.qlora else w_bytes) + trainable * w_bytes
        notes.append(
            f"LoRA rank {inp.lora_rank} on q,k,v,o: {trainable / 1e6:.1f} M trainable parameters; base weights "
            + ("in 4-bit NF4" if inp.qlora else "frozen")
        )
    grads = trainable * g_bytes
    optim = trainable * (master + _OPTIMIZER_BYTES[inp.optimizer])
    n = inp.gpus
    if inp.sharding in ("zero1", "zero2", "zero3", "fsdp"):
        optim /= n
    if inp.sharding in ("zero2", "zero3", "fsdp"):
        grads /= n
    if inp.sharding in ("zero3", "fsdp"):
        weights /= n
    if inp.sharding != "none":
        notes.append(f"{inp.sharding} over {n} GPUs")
    acts = _activations(inp, notes)
    total = weights + grads + optim + (acts or 0.0)
    gb = 1e9
    fits = {g.name: total / gb <= MEMORY_USABLE.value * g.memory_gb for g in GPUS}  # the measured fit's margin
    return MemoryEstimate(
        weights / gb,
        grads / gb,
        optim / gb,
        None if acts is None else acts / gb,
        total / gb,
        trainable,
        fits,
        tuple(notes),
    )


def _activations(inp: MemoryInputs, notes: list[str]) -> float | None:
    m = inp.model
    if not (inp.batch and inp.seq_len and m.layers and m.hidden and m.heads):
        notes.append("activations not estimated (needs batch, seq_len and a config with the model shape)")
        return None
    s, b, h, a, L = inp.seq_len, inp.batch, m.hidden, m.heads, m.layers
    per_layer = s * b * h * (34 + 5 * a * s / h)
    scale = 2.0 if inp.precision == "fp32" else 1.0
    if inp.checkpointing:
        total = (L * 2 * s * b * h + per_layer) * scale
        notes.append("full activation checkpointing: layer inputs kept, one layer recomputed at a time")
    else:
        total = L * per_layer * scale
    notes.append("activations per Korthikanti et al. 2022 (no sequence/tensor parallelism)")
    return total
