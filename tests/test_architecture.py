"""The layer contract that `lint-imports` enforces and the one docs/architecture.md states are the same list."""

from __future__ import annotations

import ast
import tomllib

from tests.conftest import ROOT


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c]
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


def test_no_module_exceeds_500_lines() -> None:
    """The house cap (docs/architecture.md): a module over 500 lines holds more than one job."""
    long = {
        str(path.relative_to(ROOT)): n
        for folder in ("analyzer", "ingest", "kernels")
        for path in (ROOT / folder).rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 500
    }
    assert long == {}


def test_ci_fails_on_complex_functions_and_torch_below_record() -> None:
    """.ci/run keeps the conventions no review remembers: radon's D/F functions and the torch-free stages."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'complex_functions="$(radon cc -n D -s analyzer ingest kernels)"' in ci
    assert 'test -z "$complex_functions" ||' in ci
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert config["include_external_packages"] is True
    (forbidden,) = [c for c in config["contracts"] if c["type"] == "forbidden" and "torch" in c["forbidden_modules"]]
    assert forbidden["forbidden_modules"] == ["torch"]
    below = {"gpuanalyze.ingest", "analyzer.analysis", "analyzer.measure", "analyzer.planning", "analyzer.render"}
    assert below <= set(forbidden["source_modules"])
    assert "allow_indirect_imports" not in forbidden


def test_ingest_modules_import_no_private_name_of_another() -> None:
    """The event types the importers share are public (timeline/trace_events.py, timeline/model.py): no module of
    ingest reaches into another's underscore names."""
    found = {
        f"{path.relative_to(ROOT)}: {alias.name}"
        for path in (ROOT / "ingest").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuanalyze.ingest")
        for alias in node.names
        if alias.name.startswith("_")
    }
    assert found == set()
