"""The command that ran a recorded script, for the advice that re-runs it (``gpuanalyze run --try ... --
COMMAND``, ``py-spy record -- COMMAND``): the trace's own command line where it has one, else one placeholder."""

from __future__ import annotations

import shlex

from gpuanalyze.ingest.trace.runinfo import RunInfo

#: What advice says where the trace records no command it could re-run.
UNKNOWN_COMMAND = "<your command>"
#: Characters of argv a trace keeps (analyzer.record.run_facts): a longer command line was cut.
ARGV_CHARS = 500


def rerun_command(run: RunInfo) -> str:
    """``python train.py --lr 3``: the recorded ``sys.argv`` (redacted when it was recorded,
    analyzer.record.run_facts.redact_argv), shell-quoted, after ``python``. UNKNOWN_COMMAND where it is not a
    script's (an imported trace, ``python -c``, a notebook), was cut, or was one rank of several (the
    launcher, torchrun or srun, is not recorded)."""
    words = (run.argv or "").split()
    script = words[0] if words else ""
    if not script.endswith(".py") or "ipykernel" in script or len(run.argv or "") >= ARGV_CHARS or run.world > 1:
        return UNKNOWN_COMMAND
    return "python " + shlex.join(words)
