"""gpuanalyze's interpreter-start hook: `gpuanalyze run` puts this directory first on PYTHONPATH.

It first runs the sitecustomize this one shadows (the user's or the distribution's, found on
the rest of sys.path), exactly as Python would have, then, only when GPUANALYZE_RUN=1, arms
profiling (analyzer.run.child). It never stops the interpreter from starting.
"""

import os
import sys


def _run_shadowed_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    # os.path, not pathlib: this runs at the start of every Python process of the command
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]  # noqa: PTH100
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - what site.py does with a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")


_run_shadowed_sitecustomize()

if os.environ.get("GPUANALYZE_RUN") == "1":
    try:
        from analyzer.run.child import activate
    except ImportError as _exc:
        sys.stderr.write(
            f"gpuanalyze: not profiling this process: {_exc} (install gpuanalyze where {sys.executable} finds it)\n"
        )
    else:
        activate()
