"""How big the house is: product lines, docs bytes and CLI options, against the limits of issue 38.

`python scripts/size.py` prints the three numbers and exits 1 when one is past its limit (``SIZE_GATE=warn``
only says so). `.ci/run` runs it.

- product lines: every line of analyzer/, ingest/ and kernels/ ``.py`` files, as
  ``find analyzer ingest kernels -name '*.py' | xargs cat | wc -l`` counts them;
- docs bytes: docs/*.md;
- CLI options: every option of every command of the Typer app (``--help`` and the group's ``--version`` aside),
  as each command's ``--help`` lists them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("analyzer", "ingest", "kernels")
LIMITS = {"product lines": 33_200, "docs bytes": 200_000, "CLI options": 107}


def product_lines(root: Path = ROOT) -> int:
    return sum(p.read_bytes().count(b"\n") for d in PRODUCT for p in (root / d).rglob("*.py"))


def docs_bytes(root: Path = ROOT) -> int:
    return sum(p.stat().st_size for p in (root / "docs").glob("*.md"))


def cli_options() -> dict[str, int]:
    """Options per command, from the click commands typer builds (what each command's --help lists)."""
    from typer.main import get_command

    from analyzer.cli import app

    commands = get_command(app).commands  # type: ignore[attr-defined]
    return {
        name: sum(1 for p in c.params if p.param_type_name == "option" and "--help" not in p.opts)
        for name, c in sorted(commands.items())
    }


def measure(root: Path = ROOT) -> dict[str, int]:
    return {
        "product lines": product_lines(root),
        "docs bytes": docs_bytes(root),
        "CLI options": sum(cli_options().values()),
    }


def over(sizes: dict[str, int]) -> list[str]:
    """The sizes past their limit, in words."""
    return [f"{k} {sizes[k]:,} > {LIMITS[k]:,}" for k in LIMITS if sizes[k] > LIMITS[k]]


def main() -> int:
    gate = os.environ.get("SIZE_GATE", "enforce")
    if gate not in ("warn", "enforce"):
        print(f"size: SIZE_GATE must be warn or enforce, not {gate!r}", file=sys.stderr)
        return 2
    sizes = measure()
    for k, v in sizes.items():
        print(f"{k}: {v:,} (limit {LIMITS[k]:,})")
    past = over(sizes)
    if past:
        print(f"size: past the limit ({gate}): {'; '.join(past)}", file=sys.stderr)
    return 1 if past and gate == "enforce" else 0


if __name__ == "__main__":
    sys.exit(main())
