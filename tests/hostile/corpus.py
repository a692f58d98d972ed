"""A corpus of hostile inputs for every command that reads input: traces that try to control the
terminal, exhaust memory, crash the reader or claim the impossible, and configs that do the same.

`python -m tests.hostile.corpus DIR` writes it; `cases(DIR)` builds it and returns, for each input,
the command lines to run on it. The promise (tests/test_hostile_corpus.py): every run ends with
exit 0 and a sane report, or exit 2 and one line; never a traceback; no raw control character in
the output; memory bounded by the input's real content.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpuanalyze.ingest.trace import schema as S
from gpuanalyze.ingest.trace.runinfo import EndInfo, RunInfo
from gpuanalyze.ingest.trace.writer import TraceWriter, WriterOptions
from tests.conftest import ROOT, make_row
from tests.hostile.arrow_cases import add_cases
from tests.kineto_fixtures import ev, two_step_trace

#: Escape sequences a trace may carry: OSC 52 (write the clipboard), OSC 0 (retitle), CSI 2J (clear),
#: a bare ESC and C1 controls, and Rich markup.
OSC52 = "\x1b]52;c;cHduZWQ=\x07"
OSC0 = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
NASTY = f"sgemm{OSC52}{OSC0}{CLEAR}\x9b31m\x00\x07[/bad][link=file:///etc/passwd]x[/link][red]"


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    cls: str
    """The class of hostility (issues 15, 20): terminal, memory, traceback, absurd, arrow, names, scale."""
    path: Path
    commands: tuple[tuple[str, ...], ...]
    """Argument lists for `gpuanalyze` ({} is replaced by the input path)."""


def _rows(n: int = 12, **over: Any) -> list[dict[str, Any]]:
    rows = [make_row(i) for i in range(n)]
    for row in rows:
        row.update(over)
    return rows


def _arrow(path: Path, rows: list[dict[str, Any]], *, run: dict[str, Any] | None = None) -> Path:
    import msgspec

    writer = TraceWriter(path=path, run=msgspec.convert(run or {}, RunInfo), options=WriterOptions(fsync=False))
    writer.open()
    for row in rows:
        writer.add(row)
    writer.close(EndInfo(status="ok", steps=len(rows)))
    return path


def _raw_arrow(path: Path, table: pa.Table, meta: dict[bytes, bytes], end: bytes | None = None) -> Path:
    """An Arrow stream with hand-made metadata (bypassing the typed writer)."""
    base = {S.META_FORMAT: S.FORMAT_NAME.encode(), S.META_VERSION: S.FORMAT_VERSION.encode()}
    schema = table.schema.with_metadata({**base, **meta})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        w.write_table(table.cast(schema))
        if end is not None:
            w.write_batch(pa.RecordBatch.from_pylist([], schema=schema), custom_metadata={S.END_KEY: end})
    return path


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=S.arrow_schema(RunInfo()))


def _kineto(path: Path, doc: Any, *, gz: bool = False, raw: bytes | None = None) -> Path:
    data = raw if raw is not None else json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, compresslevel=9) if gz else data)
    return path


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _stats(**over: Any) -> str:
    base: dict[str, Any] = {"gpu_span_ms": 1.0, "gpu_busy_ms": 0.5, "kernel_count": 3, "top_kernels": []}
    base.update(over)
    return json.dumps(base)


def _zeros_gz(path: Path, megabytes: int) -> Path:
    """A gzip of zeros: tiny on disk, huge inflated (a decompression bomb)."""
    with gzip.open(path, "wb", compresslevel=9) as fh:
        block = b"0" * (1 << 20)
        for _ in range(megabytes):
            fh.write(block)
    return path


def _many_events_gz(path: Path, n: int) -> Path:
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(b'{"traceEvents":[')
        chunk = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1},' * 10_000
        for _ in range(n // 10_000):
            fh.write(chunk)
        fh.write(b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1}]}')
    return path


ANALYZE = (("{}",), ("{}", "--json"))
#: Every command that reads a trace: ``{out}`` becomes a fresh path in an empty directory,
#: ``{import_out}`` a fresh .arrow path for a file or an empty directory for a directory; `watch` is
#: stopped as Ctrl-C would after a few seconds (tests/hostile/run_case.py).
READING = (
    *ANALYZE,
    ("report", "{}", "-o", "{out}.html"),
    ("export", "{}", "--chrome-trace", "{out}.json"),
    ("compare", "{}", "{}"),
    ("watch", "{}", "--interval", "0.05"),
    ("import", "{}", "-o", "{import_out}"),
)


def build(d: Path) -> list[Case]:
    d.mkdir(parents=True, exist_ok=True)
    out: list[Case] = []

    def add(name: str, cls: str, make: Callable[[Path], Path], *commands: tuple[str, ...]) -> None:
        path = make(d / name)
        out.append(Case(name, cls, path, commands or READING))

    # -- 1. a trace controls the terminal ---------------------------------------------------------
    nasty_doc = two_step_trace()
    for e in nasty_doc["traceEvents"]:
        if e["cat"] == "kernel":
            e["name"] = NASTY + e["name"]
    nasty_doc["deviceProperties"][0]["name"] = f"H100{OSC0}[red]x"
    add("kineto_escape_names.json", "terminal", lambda p: _kineto(p, nasty_doc))
    top = [{"name": NASTY, "total_ms": 1.0, "count": 2}]
    add(
        "arrow_escape_kernel_stats.arrow",
        "terminal",
        lambda p: _arrow(p, _rows(**{S.KERNEL_STATS: _stats(top_kernels=top), S.GPU_BUSY_MS: 5.0})),
    )
    add(
        "arrow_escape_gpu_name.arrow",
        "terminal",
        lambda p: _arrow(p, _rows(**{S.GPU_BUSY_MS: 5.0}), run={"gpu_name": f"A100{OSC52}{CLEAR}", "host": OSC0}),
    )
    add("[red]r.arrow", "terminal", lambda p: _arrow(p, _rows()))
    (d / "x[").mkdir()
    add("x[/bad]y.arrow", "terminal", lambda p: _arrow(p, _rows()))
    add(f"path{OSC0}{CLEAR}.arrow", "terminal", lambda p: _arrow(p, _rows()))
    add(
        "compare_escape_name.toml",
        "terminal",
        lambda p: (
            p.write_text(
                f'name = "{json.dumps(OSC52)[1:-1]}[link=file:///etc/passwd]x"\n'
                "hours_per_run = 10\nprice_per_gpu_hour = 2.0\n"
            ),
            p,
        )[1],
        ("compare", "{}", str(d / "compare_b.toml")),
    )
    (d / "compare_b.toml").write_text('name = "b"\nhours_per_run = 12\nprice_per_gpu_hour = 1.5\n')
    add(
        "arrow_escape_tags.arrow",
        "terminal",
        lambda p: _raw_arrow(
            p, _table(_rows()), {S.META_RUN: b"{}", S.META_TAGS: json.dumps({OSC0: CLEAR}).encode()}, b'{"status":"ok"}'
        ),
    )

    # -- 2. tiny files that claim a lot --------------------------------------------------------------
    def world_claim(p: Path) -> Path:
        p.mkdir()
        _raw_arrow(
            p / "trace.rank0.arrow",
            _table(_rows()),
            {S.META_RUN: b'{"world_size": 100000000, "rank": 0}'},
            b'{"status":"ok"}',
        )
        return p

    add("world_1e8_dir", "memory", world_claim)

    def kineto_world_claim(p: Path) -> Path:
        p.mkdir()
        doc = two_step_trace(rank=0, world=100_000_000)
        _kineto(p / "rank0.json", doc)
        return p

    add("kineto_world_1e8_dir", "memory", kineto_world_claim)
    add("zeros_2mb.json.gz", "memory", lambda p: _zeros_gz(p, 200))
    add("ten_million_events.json.gz", "memory", lambda p: _many_events_gz(p, 10_000_000))

    def dev_zero(p: Path) -> Path:
        p.symlink_to("/dev/zero")
        return p

    add("dev_zero.json", "memory", dev_zero)
    sample = str(ROOT / "sample_traces" / "cpu_healthy.arrow")
    add("dev_zero_config.toml", "memory", dev_zero, ("compare", sample, sample, "--cost-config", "{}"))
    bomb = "(" * 100_000 + ")" * 100_000
    add(
        "literal_eval_bomb.json",
        "memory",
        lambda p: _kineto(p, {**two_step_trace(), "distributedInfo": bomb, "deviceProperties": "[" * 50_000}),
    )
    add(
        "literal_eval_big_number.json",
        "memory",
        lambda p: _kineto(p, {**two_step_trace(), "distributedInfo": "{'rank': 9**9**9, 'world_size': 2}"}),
    )

    def fifo(p: Path) -> Path:
        os.mkfifo(p)
        return p

    add("fifo.json", "memory", fifo)
    add("fifo.arrow", "memory", fifo)

    # -- 3. inputs that used to end in a traceback ---------------------------------------------------
    null_steps = pa.table(
        {
            S.STEP: pa.nulls(3, pa.int64()),
            S.RANK: pa.array([0, 0, 0], pa.int32()),
            S.START_UNIX_NS: [1, 2, 3],
            S.WALL_MS: [1.0, 2.0, 3.0],
        }
    )
    add("step_all_null.arrow", "traceback", lambda p: _raw_arrow(p, null_steps, {}, b'{"status":"ok"}'))
    add("kernel_stats_not_json.arrow", "traceback", lambda p: _arrow(p, _rows(**{S.KERNEL_STATS: "{not json"})))
    add("kernel_stats_wrong_shape.arrow", "traceback", lambda p: _arrow(p, _rows(**{S.KERNEL_STATS: "[1, 2, 3]"})))
    add(
        "kernel_stats_wrong_types.arrow",
        "traceback",
        lambda p: _arrow(p, _rows(**{S.KERNEL_STATS: _stats(gpu_busy_ms="x", top_kernels=[{"name": 1}])})),
    )
    add("kernel_stats_deep.arrow", "traceback", lambda p: _arrow(p, _rows(**{S.KERNEL_STATS: _deep(100_000)})))
    add(
        "kernel_stats_negative.arrow",
        "traceback",
        lambda p: _arrow(p, _rows(**{S.KERNEL_STATS: _stats(gpu_busy_ms=-5)})),
    )
    for key, label in ((S.META_RUN, "run"), (S.META_TAGS, "tags")):
        add(
            f"{label}_deep.arrow",
            "traceback",
            lambda p, k=key: _raw_arrow(
                p, _table(_rows()), {k: ('{"a":' + _deep(100_000) + "}").encode()}, b'{"status":"ok"}'
            ),
        )
    add(
        "end_deep.arrow",
        "traceback",
        lambda p: _raw_arrow(p, _table(_rows()), {}, ('{"status":' + _deep(100_000) + "}").encode()),
    )
    add("end_is_a_list.arrow", "traceback", lambda p: _raw_arrow(p, _table(_rows()), {}, b"[1, 2]"))
    for name, run in (
        ("world_size_two", b'{"world_size": "two"}'),
        ("world_size_nan", b'{"world_size": NaN}'),
        ("gpu_name_list", b'{"gpu_name": ["a", "b"]}'),
        ("busy_pct_str", b'{"gpu_summary": {"busy_pct": "x", "idle_pct": 1, "compute_pct": 1, "non_compute_pct": 1}}'),
        ("rank_negative", b'{"rank": -3}'),
        ("memory_huge", b'{"gpu_memory_bytes": 1e300}'),
    ):
        add(
            f"run_{name}.arrow",
            "traceback",
            lambda p, r=run: _raw_arrow(p, _table(_rows()), {S.META_RUN: r}, b'{"status":"ok"}'),
        )
    for name, dist in (
        ("rank_string", {"rank": "zero", "world_size": 2}),
        ("rank_null", {"rank": None}),
        ("rank_list", {"rank": [0], "world_size": 2}),
        ("world_string", {"rank": 0, "world_size": "x"}),
    ):
        add(
            f"kineto_{name}.json",
            "traceback",
            lambda p, di=dist: _kineto(p, {**two_step_trace(), "distributedInfo": di}),
        )
    add(
        "kineto_total_mem_lots.json",
        "traceback",
        lambda p: _kineto(p, {**two_step_trace(), "deviceProperties": [{"name": "X", "totalGlobalMem": "lots"}]}),
    )

    def huge_corr(p: Path) -> Path:
        doc = two_step_trace()
        doc["traceEvents"].append(ev("kernel", "k", 500, 10, correlation=2**70, stream=7))
        return _kineto(p, doc)

    add("kineto_correlation_2e70.json", "traceback", huge_corr)

    def long_step(p: Path) -> Path:
        doc = two_step_trace()
        doc["traceEvents"][0]["name"] = "ProfilerStep#" + "9" * 23
        return _kineto(p, doc)

    add("kineto_profilerstep_23_digits.json", "traceback", long_step)

    def ts_1e300(p: Path) -> Path:
        doc = two_step_trace()
        doc["traceEvents"][2]["ts"] = 1e300
        return _kineto(p, doc)

    add("kineto_ts_1e300.json", "traceback", ts_1e300)
    add(
        "kineto_nan_tokens.json",
        "traceback",
        lambda p: _kineto(
            p, None, raw=b'{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","ts":NaN,"dur":Infinity}]}'
        ),
    )
    for name, cfg in (
        ("heads_zero", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 0}),
        ("heads_string", {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": "x"}),
        ("hidden_1e400", None),
        ("not_an_object", [1, 2]),
        ("deep", None),
    ):
        raw = (
            json.dumps(cfg).encode()
            if cfg is not None
            else b'{"hidden_size": 1e400, "num_hidden_layers": 2, "num_attention_heads": 2}'
            if name == "hidden_1e400"
            else ('{"hidden_size":' + _deep(100_000) + "}").encode()
        )
        add(f"config_{name}.json", "traceback", lambda p, r=raw: (p.write_bytes(r), p)[1], ("memory", "--config", "{}"))

    def config_dir(p: Path) -> Path:
        p.mkdir()
        return p

    add("config_is_a_directory", "traceback", config_dir, ("memory", "--config", "{}"))
    trace = _arrow(
        d / "good_for_configs.arrow", _rows(**{S.GPU_BUSY_MS: 5.0}), run={"gpu_name": "NVIDIA H100 80GB HBM3"}
    )
    for name, text in (
        ("hours_string", 'name = "a"\nhours_per_run = "ten"\nprice_per_gpu_hour = 1\n'),
        ("hours_negative", 'name = "a"\nhours_per_run = -4\nprice_per_gpu_hour = 1\n'),
        ("hours_nan", 'name = "a"\nhours_per_run = nan\nprice_per_gpu_hour = 1\n'),
        ("price_inf", 'name = "a"\nhours_per_run = 4\nprice_per_gpu_hour = inf\n'),
        ("name_table", "name = {a = 1}\nhours_per_run = 4\n"),
        ("trace_number", "trace = 5\nsteps_per_run = 10\n"),
    ):
        add(
            f"compare_{name}.toml",
            "traceback",
            lambda p, t=text: (p.write_text(t), p)[1],
            ("compare", "{}", str(d / "compare_b.toml")),
        )
    for name, text in (
        ("deep_arrays", "steps_per_run = " + "[" * 5000 + "]" * 5000 + "\n"),
        ("steps_string", 'steps_per_run = "many"\n'),
        ("steps_zero", "steps_per_run = 0\n"),
        ("unknown_key", "steps_per_run = 10\nrm_rf = true\n"),
    ):
        add(
            f"cost_{name}.toml",
            "traceback",
            lambda p, t=text: (p.write_text(t), p)[1],
            (str(trace), "--cost-config", "{}"),
        )

    def unreadable_in_dir(p: Path) -> Path:
        p.mkdir()
        _arrow(p / "trace.rank0.arrow", _rows(), run={"world_size": 2, "rank": 0})
        bad = _arrow(p / "trace.rank1.arrow", _rows(), run={"world_size": 2, "rank": 1})
        bad.chmod(0)
        return p

    if os.geteuid() != 0:  # root reads files whatever their mode
        add("unreadable_rank_in_dir", "traceback", unreadable_in_dir)

    def mixed_dir(p: Path) -> Path:
        p.mkdir()
        _kineto(p / "rank0.json", two_step_trace(rank=0, world=2))
        (p / "notes.json").write_text('{"hello": "world"}')
        return p

    add("dir_with_a_non_trace", "traceback", mixed_dir)

    # -- 4. absurd values ----------------------------------------------------------------------------
    add("phase_above_step.arrow", "absurd", lambda p: _arrow(p, _rows(**{S.DATA_WAIT_MS: 1e6})))
    add("busy_1e9.arrow", "absurd", lambda p: _arrow(p, _rows(**{S.GPU_BUSY_MS: 1e9})))
    add("batch_2e62.arrow", "absurd", lambda p: _arrow(p, _rows(**{S.BATCH_SAMPLES: 2**62})))
    add("step_1e18ms.arrow", "absurd", lambda p: _arrow(p, _rows(**{S.WALL_MS: 1e18})))
    add(
        "mixed_absurd.arrow",
        "absurd",
        lambda p: _arrow(
            p, [make_row(i, wall=1e18 if i % 3 == 0 else 20.0, data=5e6 if i % 3 == 1 else 1.0) for i in range(12)]
        ),
    )
    add(
        "flops_1e15.arrow",
        "absurd",
        lambda p: _arrow(p, _rows(**{S.GPU_BUSY_MS: 5.0}), run={"gpu_name": "H100 SXM"}),
        ("{}", "--flops-per-step", "1e15"),
        ("{}", "--flops-per-step", "nan"),
        ("{}", "--steps-per-run", "0"),
        ("{}", "--price-per-gpu-hour", "-1", "--steps-per-run", "10"),
        ("{}", "--samples-per-run", "inf"),
    )
    add(
        "memory_params.none",
        "absurd",
        lambda p: (p.write_text(""), p)[1],
        ("memory", "--params", "inf"),
        ("memory", "--params", "nan"),
        ("memory", "--params", "-7e9"),
        ("memory", "--params", "7e9", "--gpus", "0"),
        ("memory", "--params", "1e30"),
    )
    add(
        "nan_in_json.arrow",
        "absurd",
        lambda p: _raw_arrow(
            p, _table(_rows(**{S.GPU_BUSY_MS: math.nan, S.DATA_WAIT_MS: math.inf})), {}, b'{"status":"ok"}'
        ),
    )
    add_cases(d, add)
    return out


def main() -> None:
    for case in build(Path(sys.argv[1])):
        print(case.cls, case.name, case.commands)


if __name__ == "__main__":
    main()
