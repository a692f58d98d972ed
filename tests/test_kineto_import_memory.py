"""The conversion of a capture to step rows (step_rows.import_kineto) holds a bounded number of bytes per
event on top of the events themselves: one sort of the device events serves the busy timeline, its idle gaps and
their owners, and the gaps' temporaries go as soon as they are used (benchmarks/nsys_import.py measures the peak
RSS of a 16-million-row export)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Traced bytes per event (kernels and runtime calls) the conversion may add at its peak; it took 132 before the
#: device events were sorted once and the gaps stored as a length and a class byte, 109 after.
MAX_BYTES_PER_EVENT = 120

_CHILD = """
import sys, tempfile, tracemalloc
from pathlib import Path
from tests.nsys_fixtures import Export, build_export
from gpuanalyze.ingest.timeline.step_rows import import_kineto
from gpuanalyze.ingest.nsys.db import NsysDb
from gpuanalyze.ingest.nsys.events import NsysEvents
from gpuanalyze.ingest.nsys.meta import read_meta
from gpuanalyze.ingest.trace.byte_source import ReadLimits

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "capture.sqlite"
    build_export(path, Export(steps=40, kernels_per_step=1000))
    with NsysDb(path) as db:
        events = NsysEvents(db, read_meta(db), ReadLimits(), None)
        events.step_kind()
        k = next(events.traces())
n = k.gpu.start.size + k.runtime.start.size
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
rows = import_kineto(k, source="nsys").frame.height
print(n, rows, (tracemalloc.get_traced_memory()[1] - before) / n)
"""


def test_converting_a_capture_holds_a_bounded_number_of_bytes_per_event():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("", "ingest", "kernels"))}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, cwd=ROOT, env=env, timeout=120
    )
    events, rows, per_event = out.stdout.split()
    assert int(events) > 80_000 and int(rows) == 40
    assert float(per_event) < MAX_BYTES_PER_EVENT, f"{float(per_event):.0f} bytes per event at the conversion's peak"
