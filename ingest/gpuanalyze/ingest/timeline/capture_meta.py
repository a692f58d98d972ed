"""The run metadata of a Kineto trace (``distributedInfo``, ``deviceProperties``): JSON, or a JSON
string holding a Python literal (older Kineto), read by a small bounded literal parser (never
``eval``); implausible values are ignored with a note, a rank that cannot be one is a TraceError."""

from __future__ import annotations

import ast
from typing import Any

import msgspec

from analyzer.errors import TraceError
from gpuanalyze.ingest.trace.redact import redact_command
from gpuanalyze.ingest.trace.runinfo import MAX_WORLD_SIZE

_META_DECODER = msgspec.json.Decoder()
_LITERAL_MAX = 64 * 1024
_LITERAL_DEPTH = 32


def _meta_value(path: str, key: str, raw: bytes | None, notes: list[str]) -> Any:
    """A metadata value: JSON, or a JSON string holding a Python literal (older Kineto)."""
    if raw is None:
        return None
    try:
        value = _META_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        notes.append(f"{key} is not readable JSON: ignored")
        return None
    if isinstance(value, str):
        try:
            return parse_literal(value)
        except ValueError as exc:
            notes.append(f"{key} is a string that is not a Python literal ({exc}): ignored")
            return None
    return value


def dist_info(path: str, raw: bytes | None, notes: list[str]) -> tuple[int | None, int | None, str | None]:
    info = _meta_value(path, "distributedInfo", raw, notes)
    if not isinstance(info, dict) or info.get("rank") is None:
        if isinstance(info, dict):
            notes.append("distributedInfo has no rank: assumed rank 0 of 1")
        else:
            notes.append("no distributedInfo in the trace: assumed rank 0 of 1")
        return None, None, None
    rank = _count(info["rank"])
    if rank is None or rank >= MAX_WORLD_SIZE:
        raise TraceError(f"{path}: distributedInfo.rank is {_show(info['rank'])}, not a rank number")
    world = _count(info.get("world_size"))
    if info.get("world_size") is not None and (world is None or not 1 <= world <= MAX_WORLD_SIZE):
        notes.append(f"distributedInfo.world_size is {_show(info.get('world_size'))}: ignored")
        world = None
    if world is not None and rank >= world:
        raise TraceError(f"{path}: distributedInfo says rank {rank} of a world of {world}")
    backend = info.get("backend")
    if backend is not None and (not isinstance(backend, str) or len(backend) > 64):
        notes.append("distributedInfo.backend is not a short string: ignored")
        backend = None
    return rank, world, backend


def device_props(path: str, raw: bytes | None, notes: list[str]) -> tuple[str | None, int | None]:
    props = _meta_value(path, "deviceProperties", raw, notes)
    if not isinstance(props, list) or not props or not isinstance(props[0], dict):
        return None, None
    first = props[0]
    name = first.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 256):
        notes.append("deviceProperties name is not a short string: GPU name unknown")
        name = None
    memory = first.get("totalGlobalMem")
    mem = _count(memory)
    if memory is not None and (mem is None or mem > 1 << 50):
        notes.append(f"deviceProperties totalGlobalMem is {_show(memory)}: GPU memory unknown")
        mem = None
    return name, mem or None


def _count(value: Any) -> int | None:
    """A non-negative integer from an int, an integral float or a digit string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**53:
        return int(value)
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 16:
        return int(value)
    return None


def _show(value: Any) -> str:
    text = redact_command(repr(value))
    return text if len(text) <= 40 else text[:37] + "..."


def parse_literal(text: str) -> Any:
    """A Python literal (dicts, lists, tuples, strings, numbers, True/False/None) from ``text``.

    For metadata in untrusted traces: the standard library's parser and ``ast.literal_eval``,
    behind a size cap (64 KiB), a depth cap (32 levels) and a check that the tree holds nothing but
    those literals (no arithmetic, sets, bytes or complex numbers); raises ValueError on anything else.
    """
    if len(text) > _LITERAL_MAX:
        raise ValueError("over 64 KiB")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal ({type(exc).__name__})") from exc
    _only_literals(tree.body, 0)
    try:
        return ast.literal_eval(tree)
    except (ValueError, TypeError) as exc:  # e.g. an unhashable dict key
        raise ValueError(f"not a Python literal ({exc})") from exc


_SCALARS = (str, int, float, bool, type(None))


def _only_literals(node: ast.expr, depth: int) -> None:
    if depth > _LITERAL_DEPTH:
        raise ValueError("nested too deeply")
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, _SCALARS):
            raise ValueError(f"unexpected {type(node.value).__name__}")
    elif isinstance(node, ast.List | ast.Tuple):
        for item in node.elts:
            _only_literals(item, depth + 1)
    elif isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ValueError("unexpected ** in a dict")
            _only_literals(key, depth + 1)
            _only_literals(value, depth + 1)
    elif not (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) in (int, float)
    ):
        raise ValueError(f"unexpected {type(node).__name__}")
