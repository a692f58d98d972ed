"""The installed distribution: only `analyzer` and `gpuanalyze` at the top level, so it installs next
to the ML stack (Hugging Face's `kernels` package keeps its name), and every package folder ships."""

import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, SAMPLES


def test_every_package_folder_is_in_the_distribution():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {"analyzer": ROOT / "analyzer"} | {name: ROOT / folder for name, folder in config["package-dir"].items()}
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found == listed


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot build the wheel here (no build backend from the package index?): {result.stderr[-300:]}")
    return next(out.glob("gpuanalyze-*.whl"))


@pytest.mark.slow
def test_the_wheel_installs_only_analyzer_and_gpuanalyze(wheel):
    with zipfile.ZipFile(wheel) as z:
        tops = {name.split("/", 1)[0] for name in z.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}
        assert "analyzer/py.typed" in z.namelist() and "gpuanalyze/ingest/py.typed" in z.namelist()
        assert "analyzer/render/output/schema.json" in z.namelist()  # the JSON Schema, docs/json.md
    assert tops == {"analyzer", "gpuanalyze"}


@pytest.mark.slow
def test_hugging_face_kernels_and_gpuanalyze_live_side_by_side(wheel, tmp_path):
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # gpuanalyze's dependencies come from this environment (a path entry, so its editable install does not)
    child = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    parent = next(p for p in sys.path if p.endswith("site-packages"))
    (Path(child) / "deps.pth").write_text(parent + "\n")
    got = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "kernels"], capture_output=True, text=True, timeout=600
    )
    if got.returncode != 0:
        pytest.skip(f"Hugging Face `kernels` cannot be installed here (no package index?): {got.stderr[-300:]}")
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
        check=True,
        timeout=600,
    )
    check = (
        "import kernels, analyzer, gpuanalyze.ingest.trace.reader, gpuanalyze.kernels.suite; "
        "assert hasattr(kernels, 'get_kernel'), kernels.__file__; "
        "assert 'site-packages' in analyzer.__file__, analyzer.__file__; print('ok')"
    )
    out = subprocess.run([str(python), "-c", check], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    cli = env_dir / "bin" / "gpuanalyze"
    ran = subprocess.run(
        [str(cli), str(SAMPLES / "cpu_data_loading.arrow"), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert ran.returncode == 0 and '"bottleneck": "data_loading"' in ran.stdout, ran.stderr
