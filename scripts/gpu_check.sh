#!/usr/bin/env bash
# Everything that needs a GPU, in one call: GPU tests, bench on cupy, torch's own
# numbers for comparison, and GPU sample traces. Writes into $OUT (default ./gpu_out).
# Usage on a GPU machine from the repo root: bash scripts/gpu_check.sh
#   PARTS="tests memory bench-cupy torch traces overhead" selects steps (default: all);
#   BENCH_CUPY=all|matmul|allreduce selects the cupy benchmarks.
set -u
PARTS=${PARTS:-"tests memory bench-cupy torch traces overhead"}
BENCH_CUPY=${BENCH_CUPY:-all}
want() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GPUANALYZE_CEILINGS=/tmp/gpuanalyze-ceilings.json
if [ -d .whl ] && ! python3 -c "import polars" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
step() { echo; echo "=== $1 ($(date +%T))"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/nvidia-smi.csv"
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)"
python3 -m analyzer env

if want tests; then step "GPU tests"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_profiler.py tests/test_cli.py 2>&1 | tail -15
fi

if want memory; then step "memory per step (the allocator's counters at step boundaries, docs/memory.md)"
timeout 120 python3 - "$OUT" <<'PY'
import sys, torch, analyzer
from analyzer.api import analyze
from gpuanalyze.ingest.trace.reader import load_trace
m = torch.nn.Linear(1024, 1024).cuda(); opt = torch.optim.SGD(m.parameters(), lr=0.1); kept = []
with analyzer.profile(m, optimizer=opt, out=f"{sys.argv[1]}/memory.arrow", system_interval_s=None) as p:
    for _ in range(20):
        m(torch.randn(256, 1024, device="cuda")).sum().backward(); opt.step(); opt.zero_grad()
        kept.append(torch.ones(4 << 20, dtype=torch.uint8, device="cuda"))  # 4 MiB kept from each step
f = load_trace(p.path).frame
start, peak, res = (f[c].to_list() for c in ("mem_start_bytes", "peak_mem_bytes", "mem_reserved_bytes"))
grown = {b - a for a, b in zip(start[1:], start[2:])}
mem = analyze(p.path).metrics.memory
ok = grown == {4 << 20} and all(s <= q <= r for s, q, r in zip(start, peak, res))
ok = ok and mem.total == torch.cuda.get_device_properties(0).total_memory and mem.creep is not None
print("start grows by", grown, "creep", mem.creep and mem.creep.per_step, "total", mem.total, "ok" if ok else "FAILED")
PY
fi

if want bench-cupy; then step "bench cupy ($BENCH_CUPY)"
timeout 300 python3 -m analyzer bench "$BENCH_CUPY" --backend cupy --json --out "$OUT/bench-cupy.json" --force > /dev/null
python3 - "$OUT/bench-cupy.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    print(r["benchmark"], r["variant"], r.get("dtype"), r.get("size_bytes"), r.get("world_size"), round(r["value"], 3), r["unit"])
print("skipped", d["skipped"]); print("failed", d["failed"])
PY
fi

if want torch; then step "torch reference"
timeout 120 python3 benchmarks/torch_reference.py | tee "$OUT/torch-reference.json"
fi

if want traces; then step "GPU sample traces"
mkdir -p "$OUT/traces"
timeout 200 python3 sample_traces/record.py --device cuda --prefix h200 --out-dir "$OUT/traces" --steps 60
for f in "$OUT"/traces/h200_*.arrow; do python3 -m analyzer "$f" --json > "${f%.arrow}.json"; python3 -c "
import json; d=json.load(open('${f%.arrow}.json')); print('$f', d['bottleneck'], d['confidence'], d['gpu_utilization'], d['step_time_mean_ms'], d['breakdown_ms'])"; done
tar -C "$OUT" -czf "$OUT/traces.tar.gz" traces && rm -r "$OUT/traces"
fi

if want overhead; then step "overhead on GPU"
timeout 120 python3 benchmarks/overhead.py --rounds 5 2>&1 | grep -v USDT
fi
echo "=== done ($(date +%T))"
