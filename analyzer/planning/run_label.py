"""What a compared run is called: the run's ``name`` tag, else the name of what was given (a
directory's name for a file every run writes under the same name, `gpuanalyze run`'s
``trace.arrow``), made unique within one comparison."""

from __future__ import annotations

from pathlib import Path

#: File names that say nothing about the run: `gpuanalyze run --out DIR` always writes these.
GENERIC_NAMES = frozenset({"trace.arrow", "trace.rank0.arrow"})
NAME_TAG = "name"


def run_label(path: Path, tags: dict[str, str] | None = None) -> str:
    """``tags['name']`` when the run has one; else the directory's name for a generic file name
    (``baseline/trace.arrow`` -> ``baseline``) or a directory given; else the file's name."""
    name = (tags or {}).get(NAME_TAG, "").strip()
    if name:
        return name
    if path.name in GENERIC_NAMES and path.parent.name:
        return path.parent.name
    if path.name:
        return path.name
    return str(path.resolve().name or path)


def unique_labels(labels: list[str], paths: list[Path]) -> list[str]:
    """``labels``, each one that repeats followed by the path it came from (numbered when the same
    path is given twice)."""
    out = list(labels)
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            where = paths[i].parent if paths[i].name in GENERIC_NAMES else paths[i]
            out[i] = label if str(where) == label else f"{label} ({where})"
    widened = list(out)
    for i, label in enumerate(widened):
        if widened.count(label) > 1:
            out[i] = f"{label} #{widened[:i].count(label) + 1}"
    return out
