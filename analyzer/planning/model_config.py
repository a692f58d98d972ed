"""A model's size and shape from a Hugging Face style config.json (for the PaLM FLOPs of `--model-config`),
validated field by field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import msgspec

from analyzer.errors import GpuAnalyzeError
from analyzer.planning.toml_config import read_small

_Dim = Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]


class HfConfig(msgspec.Struct, kw_only=True, frozen=True):
    """The fields of a Hugging Face config.json that size a decoder-only transformer (others ignored)."""

    hidden_size: _Dim
    num_hidden_layers: _Dim
    num_attention_heads: _Dim
    vocab_size: Annotated[int, msgspec.Meta(ge=1, le=1 << 24)] = 32000
    intermediate_size: _Dim | None = None
    num_key_value_heads: _Dim | None = None
    hidden_act: str = ""
    model_type: str = ""
    tie_word_embeddings: bool = False


@dataclass(frozen=True, slots=True)
class ModelShape:
    params: float
    layers: int
    hidden: int
    heads: int


def shape_from_hf_config(path: str | Path) -> ModelShape:
    """Parameters and shape from a Hugging Face style config.json (decoder-only transformer)."""
    path = Path(path)
    raw = read_small(path, "model config")
    try:
        cfg = msgspec.json.decode(raw, type=HfConfig)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as exc:
        raise GpuAnalyzeError(
            f"{path}: not a Hugging Face transformer config ({str(exc)[:160]}; needs hidden_size, "
            "num_hidden_layers, num_attention_heads as positive integers)"
        ) from exc
    h, layers, heads = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads
    if h % heads or (cfg.num_key_value_heads and heads % cfg.num_key_value_heads):
        raise GpuAnalyzeError(
            f"{path}: hidden_size must divide into num_attention_heads (and those into num_key_value_heads)"
        )
    inter = cfg.intermediate_size or 4 * h
    gated = cfg.hidden_act.lower() in ("silu", "swiglu", "geglu") or "llama" in cfg.model_type
    kv_heads = cfg.num_key_value_heads or heads
    attn = 2 * h * h + 2 * h * (h * kv_heads // heads)
    mlp = (3 if gated else 2) * h * inter
    embed = cfg.vocab_size * h * (1 if cfg.tie_word_embeddings else 2)
    return ModelShape(float(layers * (attn + mlp) + embed), layers, h, heads)
