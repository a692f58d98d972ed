"""Verdicts on the real captures in ../shared against an engineer's reading of each, by half.

Half A is what the rules may be built and checked on; half B is held out: it is judged before a change and
after it, never looked at while changing anything. The readings are the engineers' in
../shared/external_traces/README.md and ../shared/nsys_traces/README.md (a set where the reading names more than
one class); the few files those READMEs do not read are read in tests/test_truth_table.py.

    python benchmarks/capture_verdicts.py [--half A|B] [--json OUT]

It prints one line per capture (verdict, confidence, the top owner's share of the idle, right or not) and the
score per half. A capture the tool refuses (non-zero exit, no JSON) counts as wrong: every capture has one policy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"

#: (path under ../shared, half, verdicts an engineer signs)
READINGS: tuple[tuple[str, str, frozenset[str]], ...] = tuple(
    (p, h, frozenset(v.split()))
    for p, h, v in (
        ("external_traces/param/rtx2080ti_linear_kineto.json.gz", "A", "batch_size host"),
        ("external_traces/tracelens/mi300_xdit_sd35.json.gz", "A", "batch_size host"),
        ("external_traces/hta/trace_diff/control/control.json.gz", "A", "sync"),
        ("external_traces/tracelens/h100_owlv2.json.gz", "A", "data_loading"),
        ("external_traces/hta/timeline_analysis/sampled_rank-0.json.gz", "A", "sync host"),
        ("external_traces/hta/nccl_parser_config/nccl_data.json.gz", "A", "batch_size host"),
        ("external_traces/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", "A", "unknown"),
        ("external_traces/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "A", "unknown"),
        ("external_traces/hta/triton_example/triton_example.json.gz", "A", "unknown"),
        ("external_traces/hta/trace_compare/test/test.json.gz", "A", "unknown host"),
        ("external_traces/tracelens/mi300_resnet_act_checkpoint.json.gz", "A", "sync"),
        ("nsys_traces/nsysai_mfu_train_2gpu_before.sqlite", "A", "none kernels"),
        ("nsys_traces/dlprof_convnet_rtx2070s.sqlite", "A", "unknown"),
        ("nsys_traces/vecadd_rtx3060_2025_5.sqlite", "A", "data_loading"),
        ("nsys_traces/uvmtorch_gptneo_nokernels_a5000.sqlite", "A", "unknown"),
        ("external_traces/hta/df_index_resolver/df_index_resolver.json.gz", "B", "batch_size sync"),
        ("external_traces/hta/trace_diff/test/test.json.gz", "B", "kernels sync"),
        ("external_traces/hta/negative_queue_length_values_check/rank0.json.gz", "B", "sync"),
        ("external_traces/tracelens/h100_timesformer.json.gz", "B", "host"),
        ("external_traces/tracelens/mi300_ddp_resnet18.json.gz", "B", "sync host"),
        ("external_traces/param/rtx2080ti_resnet_kineto.json.gz", "B", "data_loading"),
        ("external_traces/hta/trace_filter/sampled_rank-1.json.gz", "B", "sync host"),
        ("external_traces/hta/trace_compare/base/base.json.gz", "B", "unknown host"),
        ("external_traces/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "B", "unknown"),
        ("external_traces/tracelens/b200_eager_trace.json.gz", "B", "batch_size"),
        ("external_traces/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "B", "kernels"),
        ("nsys_traces/nsysai_mfu_train_2gpu_after.sqlite", "B", "batch_size none kernels"),
        ("nsys_traces/nsysai_mock_rtx3080.sqlite", "B", "unknown"),
        ("nsys_traces/nvfuser_matmul_h200.sqlite", "B", "unknown"),
        ("nsys_traces/centerformer_nvtx_only_titanrtx.sqlite", "B", "unknown"),
    )
)


def judge(path: Path) -> dict[str, object]:
    """The tool's verdict on one capture, as a user gets it (the CLI, --json)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "analyzer", str(path), "--json"], capture_output=True, text=True, timeout=600
    )
    seconds = time.perf_counter() - t0
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"verdict": None, "rc": proc.returncode, "error": proc.stderr.strip()[:200], "seconds": seconds}
    owners = report.get("idle_owners") or {}
    top = max(owners.get("owners", []) or [{}], key=lambda o: o.get("share_of_idle", 0.0), default={})
    findings = report.get("findings") or [{}]
    return {
        "verdict": report["bottleneck"],
        "cause": findings[0].get("cause") if findings else None,
        "confidence": report.get("confidence_level"),
        "steps": report.get("steps"),
        "top_owner": top.get("owner"),
        "top_owner_share_of_idle": top.get("share_of_idle"),
        "rc": proc.returncode,
        "seconds": seconds,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=("A", "B"), help="only this half (default: both)")
    ap.add_argument("--json", type=Path, help="write every result here")
    args = ap.parse_args()
    if not SHARED.is_dir():
        print(f"{SHARED} is absent: nothing to judge", file=sys.stderr)
        return 2
    results = []
    for rel, half, signed in READINGS:
        if args.half and half != args.half:
            continue
        got = judge(SHARED / rel)
        right = got["verdict"] in signed and got["rc"] == 0
        results.append({"capture": rel, "half": half, "signed": sorted(signed), "right": right, **got})
        share = got.get("top_owner_share_of_idle")
        print(
            f"{half} {'right' if right else 'WRONG'} {rel[-58:]:58s} {got['verdict']!s:12s} "
            f"{got.get('cause')!s:22s} {got.get('confidence')!s:6s} steps={got.get('steps')!s:4s} "
            f"top={got.get('top_owner')}:{share if share is None else round(share, 2)} "
            f"(signed: {' '.join(sorted(signed))})"
        )
    for half in ("A", "B"):
        mine = [r for r in results if r["half"] == half]
        if mine:
            print(f"half {half}: {sum(r['right'] for r in mine)} of {len(mine)} right")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
