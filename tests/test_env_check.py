"""`gpuanalyze env` answers at once on a CPU build: torch's build is read from its version file, not imported."""

import os
import subprocess
import sys
import textwrap

import pytest

from analyzer.machine.env_check import _torch_build


def test_the_build_is_read_from_torchs_generated_version_file(tmp_path):
    version = tmp_path / "version.py"
    version.write_text(
        textwrap.dedent("""
            from typing import Optional
            __all__ = ['__version__', 'cuda']
            __version__ = '2.5.1+cu124'
            debug = False
            cuda: Optional[str] = '12.4'
            hip: Optional[str] = None
        """)
    )
    assert _torch_build(version) == {"__version__": "2.5.1+cu124", "cuda": "12.4", "hip": ""}
    version.write_text("import torch._C\n__version__ = torch._C.v()\n")  # not constants: torch is imported instead
    assert _torch_build(version) is None
    assert _torch_build(tmp_path / "missing.py") is None


def test_env_on_a_cpu_build_names_it_without_importing_torch():
    torch = pytest.importorskip("torch")
    if torch.version.cuda or torch.version.hip:
        pytest.skip("a CUDA or ROCm build of torch: env imports it to ask for the devices")
    code = (
        "import sys\nfrom analyzer.cli import main\n"
        "try:\n    main(['env'])\nexcept SystemExit:\n    pass\n"
        "print('torch imported' if 'torch' in sys.modules else 'torch not imported')\n"
    )
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("torch not imported"), done.stdout
    assert torch.__version__ in done.stdout and "none (CPU build)" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
