"""The layer contract that `lint-imports` enforces and the one docs/architecture.md states are the same list."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return [" | ".join(part.strip() for part in layer.split("|")) for layer in layers]


def _documented_layers() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("<!-- layers:", 1)[1].split("```", 2)[1]
    return [line.strip() for line in block.strip().splitlines()]


def test_the_doc_states_the_contract_layers_in_order() -> None:
    assert _documented_layers() == _contract_layers()


def test_every_stage_folder_is_in_a_layer() -> None:
    listed = {name.strip() for layer in _contract_layers() for name in layer.split("|")}
    stages = {f"analyzer.{p.name}" for p in (ROOT / "analyzer").iterdir() if (p / "__init__.py").exists()}
    modules = {f"analyzer.{p.stem}" for p in (ROOT / "analyzer").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert stages | modules <= listed, sorted((stages | modules) - listed)


def test_no_two_modules_share_a_file_name() -> None:
    names: dict[str, list[str]] = {}
    for folder in ("analyzer", "ingest", "kernels"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name not in ("__init__.py", "__main__.py"):
                names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}
