"""The runs beneath a directory (local or an fsspec URL): a trace file, or the rank files of one run.

Rules, per directory: trace files (``.arrow``, profiler ``.json[.gz]``, Nsight Systems ``.sqlite``) are grouped
by name with the rank part removed (``trace.rank3.arrow`` -> ``trace``); one group is one run. A directory that
holds exactly one group of several files is analysed as a directory of ranks; a group of ``.arrow``
rank files beside other runs is analysed through its first file (which finds its siblings); any
other file is a run of its own. Subdirectories are searched too; links are not followed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import GpuAnalyzeError
from analyzer.measure import storage

_RANK = re.compile(r"^(?P<stem>.+)\.rank\d+(?:-\d+)?$")
_SUFFIXES = (".json.gz", ".json", ".arrow", ".sqlite")
#: Levels of subdirectories searched beneath the root (deeper ones are skipped with a note).
MAX_DEPTH = 64
#: Marks an odd entry that stands for a directory passed over, not a file.
SKIPPED_DIR = "\x00dir:"


@dataclass(frozen=True, slots=True)
class RunTarget:
    """One run: a name for the table and what the analysis reads."""

    name: str
    """The run's path relative to the fleet's root (a rank group as ``dir/stem.rank*.arrow``)."""
    target: str
    """A trace file, a rank file (its siblings are found) or a directory of ranks."""
    files: int
    """Trace files of the run."""


def _suffix(name: str) -> str | None:
    lower = name.lower()
    return next((s for s in _SUFFIXES if lower.endswith(s)), None)


def _group_key(name: str, suffix: str) -> str:
    base = name[: -len(suffix)]
    match = _RANK.match(base)
    return (match.group("stem") if match else base) + suffix


def _walk(root: str) -> Iterator[tuple[str, str, list[str], list[str]]]:
    """(directory, its path relative to ``root``, regular trace files, other trace-named entries) for
    every directory beneath ``root``."""
    if storage.is_url(root):
        import fsspec

        fs, path = fsspec.core.url_to_fs(root)
        path = path.rstrip("/")
        prefix = root.split("://", 1)[0] + "://"
        for directory, _dirs, files in fs.walk(path):
            d = directory.rstrip("/")
            yield prefix + d, d[len(path) :].lstrip("/"), sorted(f for f in files if _suffix(f)), []
        return
    yield from _walk_local(root)


def _walk_local(root: str) -> Iterator[tuple[str, str, list[str], list[str]]]:
    """Depth first, in name order, without recursion (os.walk recurses: a tree ~1,000 levels deep
    ends in RecursionError) and at most MAX_DEPTH levels down; a directory deeper, or one that cannot
    be listed, is reported as a ``"<dir>/"`` entry of its parent's odd list."""
    stack: list[tuple[str, str, int]] = [(root, "", 0)]
    while stack:
        directory, rel, depth = stack.pop()
        regular: list[str] = []
        odd: list[str] = []
        subdirs: list[str] = []
        try:
            with os.scandir(directory) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            yield directory, rel, [], [f"{SKIPPED_DIR}cannot be listed ({exc.strerror or exc})"]
            continue
        for entry in listed:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            elif _suffix(entry.name) is not None:
                (regular if entry.is_file(follow_symlinks=False) else odd).append(entry.name)
        if subdirs and depth >= MAX_DEPTH:
            odd.append(f"{SKIPPED_DIR}its {len(subdirs)} subdirectories are deeper than {MAX_DEPTH} levels")
            subdirs = []
        yield directory, rel, regular, odd
        for name in reversed(subdirs):
            stack.append((f"{directory}{os.sep}{name}", _join(rel, name), depth + 1))


def find_runs(root: str) -> tuple[list[RunTarget], list[str]]:
    """Every run beneath ``root`` and notes on what was passed over; raises GpuAnalyzeError (for a
    URL whose host cannot be reached or listed: one line with the host and the reason)."""
    if not storage.is_url(root):
        return _find_runs(root)
    from urllib.parse import urlsplit

    from analyzer.render.safe import clean

    try:
        host = urlsplit(root).hostname or root.split("://", 1)[0]
    except ValueError as exc:  # http://[::1/runs: an unclosed IPv6 host, a port that is not a number
        raise GpuAnalyzeError(clean(f"{root}: not a valid URL ({exc})")) from exc
    try:
        return _find_runs(root)
    except GpuAnalyzeError:
        raise
    except Exception as exc:
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise GpuAnalyzeError(
            clean(f"{root}: cannot list {host}: {type(exc).__name__}{': ' + reason if reason else ''}")
        ) from exc


def _find_runs(root: str) -> tuple[list[RunTarget], list[str]]:
    if not storage.is_url(root) and not Path(root).exists():
        raise GpuAnalyzeError(f"{root}: no such file or directory")
    if not storage.is_url(root) and Path(root).is_file():
        return [RunTarget(Path(root).name, root, 1)], []
    if storage.is_url(root) and not storage.is_dir(root):
        return [RunTarget(root.rsplit("/", 1)[-1], root, 1)], []
    runs: list[RunTarget] = []
    notes: list[str] = []
    for directory, rel, files, odd in _walk(root):
        notes += [
            f"skipped {rel or '.'}/: {n[len(SKIPPED_DIR) :]}"
            if n.startswith(SKIPPED_DIR)
            else f"skipped {_join(rel, n)}: not a regular file (links are not followed)"
            for n in odd
        ]
        groups: dict[str, list[str]] = {}
        for name in files:
            suffix = _suffix(name)
            assert suffix is not None
            groups.setdefault(_group_key(name, suffix), []).append(name)
        for key, members in groups.items():
            runs += _group_runs(directory, rel, key, members, alone=len(groups) == 1, notes=notes)
    if not runs:
        why = f" ({notes[0]})" if notes else ""
        raise GpuAnalyzeError(f"{root}: no .arrow or profiler .json(.gz) traces beneath this directory{why}")
    return runs, notes


def _group_runs(
    directory: str, rel: str, key: str, members: list[str], *, alone: bool, notes: list[str]
) -> list[RunTarget]:
    """The runs one group of a directory's trace files makes: a lone file, the directory's ranks (the only
    group in it), a ``stem.rank*.arrow`` set, or profiler rank files beside other runs, one by one (noted)."""
    if len(members) == 1:
        return [RunTarget(_join(rel, members[0]), storage.join(directory, members[0]), 1)]
    if alone:
        return [RunTarget(rel or ".", directory, len(members))]
    if key.endswith(".arrow"):
        stem = key[: -len(".arrow")]
        return [RunTarget(_join(rel, f"{stem}.rank*.arrow"), storage.join(directory, members[0]), len(members))]
    notes.append(
        f"{_join(rel, key)}: {len(members)} profiler rank files beside other runs: analysed one by one "
        "(put each run's rank files in a directory of their own)"
    )
    return [RunTarget(_join(rel, m), storage.join(directory, m), 1) for m in members]


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name
