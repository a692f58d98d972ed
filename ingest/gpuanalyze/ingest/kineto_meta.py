"""The run metadata of a Kineto trace (``distributedInfo``, ``deviceProperties``): JSON, or a JSON
string holding a Python literal (older Kineto), read by a small bounded literal parser (never
``eval``); implausible values are ignored with a note, a rank that cannot be one is a TraceError."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from analyzer.errors import TraceError
from gpuanalyze.ingest.runinfo import MAX_WORLD_SIZE

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
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_LIT_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+))"""
    r"""|(?P<word>True|False|None)|(?P<punct>[\[\]{}(),:]))""",
    re.DOTALL,
)


def parse_literal(text: str) -> Any:
    """A Python literal (dicts, lists, tuples, strings, numbers, True/False/None) from ``text``.

    Replaces ``ast.literal_eval`` for metadata in untrusted traces: at most 64 KiB and 32 levels
    deep, no arithmetic, no sets, no bytes; raises ValueError on anything else.
    """
    if len(text) > _LITERAL_MAX:
        raise ValueError("over 64 KiB")
    tokens = []
    pos = 0
    while pos < len(text):
        m = _LIT_TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip():
                raise ValueError(f"unexpected {text[pos : pos + 10]!r}")
            break
        tokens.append((m.lastgroup, m.group(m.lastgroup or 0)))
        pos = m.end()
    value, i = _literal(tokens, 0, 0)
    if i != len(tokens):
        raise ValueError("data after the literal")
    return value


def _literal(tokens: list[tuple[str | None, str]], i: int, depth: int) -> tuple[Any, int]:
    if depth > _LITERAL_DEPTH:
        raise ValueError("nested too deeply")
    if i >= len(tokens):
        raise ValueError("unexpected end")
    kind, text = tokens[i]
    if kind == "str":
        try:
            return _unquote(text), i + 1
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError("bad string escape") from exc
    if kind == "num":
        if len(text) > 40:
            raise ValueError("number too long")
        return (float(text) if any(c in text for c in ".eE") else int(text)), i + 1
    if kind == "word":
        return {"True": True, "False": False, "None": None}[text], i + 1
    close = {"[": "]", "(": ")", "{": "}"}.get(text)
    if close is None:
        raise ValueError(f"unexpected {text!r}")
    i += 1
    items: list[Any] = []
    pairs: dict[Any, Any] = {}
    while True:
        if i < len(tokens) and tokens[i][1] == close:
            i += 1
            break
        item, i = _literal(tokens, i, depth + 1)
        if close == "}":
            if i >= len(tokens) or tokens[i][1] != ":":
                raise ValueError("expected ':'")
            value, i = _literal(tokens, i + 1, depth + 1)
            if not isinstance(item, str | int | float | bool | type(None)):
                raise ValueError("unhashable key")
            pairs[item] = value
        else:
            items.append(item)
        if i < len(tokens) and tokens[i][1] == ",":
            i += 1
        elif not (i < len(tokens) and tokens[i][1] == close):
            raise ValueError(f"expected ',' or {close!r}")
    if close == "}":
        return pairs, i
    return (tuple(items) if close == ")" else items), i


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
