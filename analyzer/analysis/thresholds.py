"""Every threshold and default the rules use, with where it comes from. docs/thresholds.md explains them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Threshold:
    value: float
    source: str


XPROF = (
    "XProf input-pipeline analyzer (openxla/xprof): >=20% of step waiting for input is 'highly input-bound', "
    ">=5% 'moderately'"
)
TB_PLUGIN = "PyTorch profiler TensorBoard plugin performance recommendations (pytorch/kineto tb_plugin)"
OURS = "gpuanalyze default, see docs/thresholds.md"

# -- host waits (shares of step time; on GPU traces only the part while the GPU is idle counts) --
DATA_WAIT_HIGH = Threshold(0.20, XPROF)
DATA_WAIT_MODERATE = Threshold(0.05, XPROF + "; " + TB_PLUGIN + " flags DataLoader time > 5% of step")
SYNC_HIGH = Threshold(0.20, OURS + " (the input-bound scale, applied to blocking syncs and collectives)")
SYNC_MODERATE = Threshold(0.05, OURS + " (the input-bound scale, applied to blocking syncs and collectives)")
HOST_HIGH = Threshold(0.30, OURS + ": most of the step in host work no phase accounts for")
HOST_MODERATE = Threshold(0.10, OURS + ": host work no phase accounts for, above the noise of hook timing")
#: Unattributed host time below this per step is the loop's own Python (loss, zero_grad, .to()):
#: 0.05-0.2 ms per step measured on CPU here (benchmarks/projection_validation.py), a per-step cost.
HOST_MIN_MS = 1.0
#: Below this share of the step in recognised phases the trace has no phases to speak of (an imported
#: trace without annotations): unattributed time is then not a finding but an unknown.
HOST_RECOGNISED = 0.01
#: Unattributed host time of a DataLoader loop is "after the optimizer step" (logging, metrics: do it every N
#: steps) when at least this share of it comes before the step's first phase (lead_ms).
LEAD_AFTER_OPTIMIZER = 0.5
PREPROCESSING = Threshold(
    0.10,
    OURS + ": host work before a step's first kernel, outside DataLoader waits, while the GPU has nothing "
    "to run (video decode, a tokenizer or image processor in the training loop); the host-work scale",
)
#: Softmax kernels holding at least this share of kernel time are an unfused attention (matmul, softmax, matmul)
#: that fused attention (scaled_dot_product_attention) replaces. Ours: in fused attention softmax is no kernel.
UNFUSED_SOFTMAX = 0.25
PER_STEP_FIXED = Threshold(
    0.20, OURS + ": per-step costs that do not grow with the batch (optimizer, loop overhead) take a fifth of the step"
)

# -- the GPU --
DOMINATES = Threshold(
    0.50,
    OURS + ": one kind of time holding half of a total or more holds more of it than all others together (idle of "
    "the step, one class's idle owners of the idle, copies or communication of the GPU's busy time)",
)
GPU_HEALTHY = Threshold(0.90, OURS + ": a GPU busy >= 90% of the step leaves < 10% to win by feeding it better")
GPU_UTIL_LOW = Threshold(0.50, TB_PLUGIN + " flags GPU utilization < 50%")
IDLE_MODERATE = Threshold(0.05, OURS + ": GPU idle not explained by data wait or sync (launch and host overhead)")
SHORT_KERNEL_US = Threshold(
    20.0,
    OURS + ": kernels under ~20 us are of the order of launch overhead (5-13 us measured on H200, docs/gpu-results.md)",
)
LAUNCH_BOUND = Threshold(0.50, "HTA idle-time breakdown: host wait + kernel-launch gaps as a share of GPU idle time")
FP32_MATH = Threshold(
    0.10,
    OURS + ": fp32 GEMMs/convolutions run 2-16x below tensor-core rates (datasheets: RTX 4090 82.6 vs 165, "
    "H100 67 vs 989 dense TFLOPS); >= 10% of GPU time in them is worth moving",
)
MEMORY_BOUND = Threshold(0.50, OURS + ": more than half of kernel time in unfused elementwise/reduction kernels")
KERNELS_HIGH = Threshold(0.30, OURS + ": a third of the step in slow kernels")
#: When no rule crosses its usual threshold on an unhealthy run, every rule runs again with this floor
#: and the largest remaining cause is named at low confidence.
RELAXED = 0.01
#: A data wait that is at least this much CPU time (of the training thread) is CPU-bound loading.
CPU_BOUND_LOADING = 0.5
#: A worker plan takes the fewest workers whose projected step is within this share of the best the
#: free cores allow (more workers then add processes, memory and hand-over for no measurable gain).
WORKERS_ENOUGH = 0.02
MEMORY_USABLE = Threshold(0.9, OURS + ": the CUDA context and library workspaces sit outside the allocator")
#: Memory creep (analysis/memory_fit.py) is read over at least this many analysed steps.
MEMORY_CREEP_MIN_STEPS = 5
MEMORY_CREEP_RISING = Threshold(0.8, OURS + ": a loop that frees what each step makes starts each step alike")
MEMORY_CREEP_GROWTH = Threshold(0.01, OURS + ": less is the allocator's and the heap's rounding")
#: The most DataLoader workers a projection assumes (more rarely helps and costs memory per worker).
MAX_WORKERS = 8
#: A straggler's phase is named when it holds at least this share of the straggler's excess.
STRAGGLER_PHASE_SHARE = 0.5

# -- projections --
#: Lowest tensor-core/fp32 dense speed-up in the datasheet table (RTX 4090: 165.2/82.6 = 2.0):
#: used for GPUs not in the table, so the projection is a lower bound on the gain.
FALLBACK_TENSOR_CORE_RATIO = 2.0
#: Speed-up assumed for memory-bound elementwise/reduction time when torch.compile fuses chains of it
#: (ours: fusing two ops into one halves their memory traffic; chains often fuse more).
FUSION_SPEEDUP = 2.0
#: The largest batch multiplier a projection assumes (memory headroom permitting), and the one it assumes
#: when the trace has no memory figures (said so in the rule).
MAX_BATCH_MULTIPLIER = 4
DEFAULT_BATCH_MULTIPLIER = 2
#: Cost of handing one batch from a DataLoader worker process to the training process, measured on
#: both sides with torch 2.13 on this project's 2-core x86 box by benchmarks/worker_cost.py (in-memory
#: data, so loading itself costs ~0; 2 workers, load 0.9): CPU time 0.51 ms per batch in the training
#: process and 0.65 ms + 0.92 ms per MiB in the worker; wall time a little more (pipe wake-ups,
#: scheduling): 2 workers deliver a 64 B batch every 0.63-0.76 ms and a 4 MiB batch every 3.7 ms,
#: which these constants give as 0.77 and 3.2 ms. Ours; `gpuanalyze bench` does not measure it.
WORKER_MAIN_COST_MS = 0.75
WORKER_SIDE_COST_MS = 0.75
WORKER_SIDE_MS_PER_MIB = 1.0
#: Time a fix must save, as a share of step time, before it is recommended.
MIN_SAVING = 0.01
WORKER_MIN_GAIN = Threshold(
    0.10, OURS + ": the worker projection's own uncertainty (per-batch cost, core contention) is about 5-10%"
)

# -- confidence --
#: Analysed steps below which a verdict is low-confidence (few samples of a noisy quantity).
FEW_STEPS = 10
ENOUGH_STEPS = 30
#: Confidence is scaled by this below FEW_STEPS analysed steps, and by SOME_STEPS_SCALE below ENOUGH_STEPS.
FEW_STEPS_SCALE = 0.3
SOME_STEPS_SCALE = 0.7
#: Confidence levels: high at or above CONFIDENCE_HIGH, medium at or above CONFIDENCE_MEDIUM, else low.
CONFIDENCE_HIGH = 0.75
CONFIDENCE_MEDIUM = 0.4

#: A step whose start-up work (compilation, cudaMalloc/cudaFree, module loading, device set-up: KernelStats.startup_ms)
#: takes at least this share of it is warm-up: a steady step makes none of those calls (the caching allocator and the
#: loaded modules are kept). Ours, from the real traces: their steady steps show at most 0.5%, a 16 s window that
#: includes a run's start-up 9%, a 43 s benchmark start-up 91%; at a quarter the step is a third slower than without.
#: Every analysed step (fewer than FEW_STEPS of them) at or above it: `unknown`, record more steps.
WARMUP_STARTUP = 0.25
#: Leading steps skipped per rank as warm-up: this share of them, at most WARMUP_MAX_STEPS.
WARMUP_FRACTION = 0.10
WARMUP_MAX_STEPS = 3

#: Straggler detection (analyzer/analysis/ranks.py): a rank is slow on a step when its work exceeds the
#: step's baseline by more than both of these; a straggler when slow on at least this fraction of steps.
SLOW_STEP_MIN_MS = 1.0
SLOW_STEP_FRACTION = 0.05
STRAGGLER_FRACTION = 0.5
#: Ranks' starts of one step further apart than this many median steps are not on one clock (ranks recorded
#: on unsynchronised hosts, or apart): on such a step arrival at the collective is a rank's work alone. Ours:
#: ranks in lock-step start a step within one step of each other (a collective holds them together).
START_SPREAD_MAX_STEPS = 1.0

# -- steady state and outlier steps (analysis/steady.py) --
#: A step is an outlier when its time exceeds the median by more than this many robust standard
#: deviations (1.4826 x the median absolute deviation) and by more than OUTLIER_MIN_EXCESS of the median.
OUTLIER_MADS = 5.0
OUTLIER_MIN_EXCESS = 0.25
#: More outliers than this share of the steps are not outliers: the step time has two modes, and the
#: rules judge them all.
OUTLIER_MAX_FRACTION = 0.2
#: Spikes are periodic (every Nth step: checkpoint, evaluation, logging) when at least this many
#: recur at one period and phase and at least PERIODIC_MATCH of the steps on it (first to last spike) spiked.
PERIODIC_MIN_SPIKES = 3
PERIODIC_MATCH = 0.75
#: Outliers off the period (stalls, a scheduler hiccup) that do not break it: at most this many, or a
#: quarter as many as the spikes on it (two scheduler outliers broke an every-12th-step evaluation).
PERIODIC_EXTRA = 2
SPIKE_MIN_SHARE = Threshold(
    0.05, OURS + ": periodic spikes taking 5% of run time are worth doing less often or off the step"
)
#: Median step time moving more than this between the first and last third of the run is reported as drift.
DRIFT_NOTABLE = 0.2

# -- verdict stability and projection ranges (analysis/stability.py, analysis/intervals.py) --
#: Resamples of the analysed steps (with replacement) behind `stability` and the projection ranges.
BOOTSTRAP_RESAMPLES = 64
#: Central share of the resampled projections the range spans (0.9: the 5th to the 95th percentile).
BOOTSTRAP_COVERAGE = 0.9
STABLE_VERDICT = Threshold(0.8, OURS + ": a verdict that fewer than 80% of resamples of the steps repeat is not 'high'")
#: Half-width of a projection range, as a share of the projected step, that run-to-run variation adds on
#: a host that was not oversubscribed (same job, same machine, measured again): the unchanged healthy and
#: .item() loops of benchmarks/projection_validation.py re-ran 0.4-3.8% apart on a quiet 2-core host.
PROJECTION_NOISE = 0.05
#: The model's own error out of sample, as a share of the projected step, added to both ends of every rule's
#: range (judge.widened): conformalized quantile regression (Romano, Patterson and Candes, "Conformalized Quantile
#: Regression", NeurIPS 2019): of the n conformity scores max(low - measured, measured - high) / projected of the
#: leave-one-family-out projections (ranges without this term), the ceil((n + 1) x 0.8)-th smallest (at least 0),
#: which covers 80% of a new pair's measurements when pairs are exchangeable. Computed, not chosen:
#: benchmarks/projection_validation.py prints it ("MODEL_ERROR to ship"): 0.000 on the 2026-12-06 run without
#: the replays (docs/projections.md, "Validation"). Measured on CPU loops only; GPU projections carry it unmeasured.
MODEL_ERROR = 0.0
#: The same on an oversubscribed host for a CPU-side projection: other work's share of the cores moves.
#: The floor: where the sampler read the run queue, judge.loaded_noise uses its measured excess over the
#: CPUs (excess / run queue: other work gone or doubled), which is wider on a host queued 2x or more.
LOADED_NOISE = 0.15
#: Confidence of a CPU-side projection recorded on an oversubscribed host is scaled by this (below 'high').
OVERSUBSCRIBED_SCALE = 0.7
#: A smaller batch within the run (the last of an epoch) separates per-step from per-sample cost when it
#: has at most this share of the usual batch's samples.
BATCH_SPLIT_MAX = 0.75
#: Uncertainty of the fixed share that split measures (one or a few smaller batches per epoch, noisy).
BATCH_SPLIT_SLACK = 0.2
#: Without that split, the share of forward + backward the batch projection's point takes as fixed: the
#: middle of the range nothing measured narrows (benchmarks/projection_validation.py: overhead-bound CPU
#: MLPs at batch 1-8 measured 25-45% of the way up from "none grows"; docs/projections.md).
BATCH_UNMEASURED_FIXED = 0.5
#: The micro-batch model's own: without a smaller batch in the run, the share of one micro-batch's fetch and
#: forward + backward its point takes as per call (not growing with its samples). Accumulation splits a step
#: into micro-batches of a few samples, where eager dispatch (a fixed cost per op and per DataLoader call) is
#: most of each; benchmarks/projection_validation.py measured 2 x 8 -> 16 x 1 at 5x faster (a per-call share
#: near 0.9; one pair, so in sample for that family). The range still spans 0 to 1.
MICRO_UNMEASURED_FIXED = 0.8
#: A projection range wider than this share of the current step is reported as wide (it says little), with the
#: `run --try` trial that would measure its fix: ours, the width the projections aim for (docs/projections.md).
WIDE_RANGE = 0.3
# -- the host (analyzer/analysis/host_facts.py, from the system sampler's readings) --
#: A reading is oversubscribed when more threads are runnable than the host has CPUs (or the
#: 1-minute load exceeds them): some runnable thread is then waiting for a CPU. This is the USE
#: method's CPU saturation test (Brendan Gregg, "The USE Method": run-queue length greater than
#: the CPU count). Host-wide on both sides, since /proc/stat and /proc/loadavg are host-wide.
OVERSUBSCRIBED_RUNNABLE_PER_CPU = Threshold(1.0, "Brendan Gregg, The USE Method: CPU saturation = run queue > CPUs")
#: The run is oversubscribed when at least this share of its readings were: a quarter of the run
#: is enough to move CPU-side timings by more than their projections' own uncertainty (~10%,
#: WORKER_MIN_GAIN), while a brief burst (a compile, a checkpoint) is not.
OVERSUBSCRIBED_SHARE = Threshold(0.25, OURS + ": a quarter of the run waiting for CPUs moves CPU-side timings")
#: A run was contended (analysis/contention.py) when other work left the job less than this share of its cores
#: (or the run queue passed OVERSUBSCRIBED_RUNNABLE_PER_CPU): ours, half the cores gone moves any step time.
CONTENDED_FREE_SHARE = 0.5
#: Factor on the verdict's confidence of a contended run: ours, the same scale as OVERSUBSCRIBED_SCALE's.
CONTENDED_SCALE = 0.7
#: Fewest cores ``cores_free`` reports: a job that ran at all had some CPU, and a projection that
#: divides by the free cores must not divide by zero.
MIN_FREE_CORES = 0.25
#: bf16 / fp32 matmul products per instruction on a CPU with AVX512_BF16: VDPBF16PS multiplies two bf16
#: pairs per fp32 lane where an fp32 FMA multiplies one (Intel 64 and IA-32 Architectures Software
#: Developer's Manual, Vol. 2, VDPBF16PS); AMX tiles do more, so the fast end of a CPU bf16 projection.
CPU_BF16_SPEEDUP = 2.0
#: The same with AMX_BF16: TDPBF16PS on AMX tiles peaks at 1024 bf16 FLOPs per cycle per core against 64 fp32
#: FLOPs for AVX-512 FMA on two ports (Intel 64 and IA-32 Architectures Optimization Reference Manual, ch.
#: "Intel Advanced Matrix Extensions", peak throughput table): 16x, the fast end where the CPU has AMX.
CPU_AMX_BF16_SPEEDUP = 16.0
#: float32 / float64 matmul rate on a CPU: a SIMD register holds twice as many float32 lanes as float64 ones and the
#: FMA issues at the same rate (Intel 64 and IA-32 Architectures Software Developer's Manual, Vol. 1, "Packed and
#: scalar floating-point data types": 16 singles or 8 doubles per 512-bit register; Arm NEON: 4 or 2 per 128 bits).
FLOAT64_SPEEDUP = 2.0
#: The CPU-precision model's own: the share of fp32 forward + backward its point takes as matmul/convolution
#: (what bf16 autocast speeds up) when the trace holds no CPU kernel statistics; the range spans 0 to 1.
#: Dense CPU training loops spend most of forward + backward in GEMM (oneDNN/MKL); benchmarks/
#: projection_validation.py measured bf16 1.9-4.4x faster on AVX512_BF16, all beyond the 2x fast end.
CPU_MATMUL_UNMEASURED = 0.75
#: Uncertainty of the matmul share measured from a CPU run's sampled profiler windows (rules/cpu_precision.py): a few
#: profiled steps against the steady steps' forward + backward. Ours, not fitted to the validation pairs.
CPU_MATMUL_SLACK = 0.1
#: On a CPU run's profiled steps, softmax and batched matmuls with no fused attention op taking at least this
#: share of forward + backward are attention written by hand (matmul, softmax, matmul): scaled_dot_product_attention
#: advice. Ours, the GPU's UNFUSED_SOFTMAX scale.
CPU_UNFUSED_ATTENTION = 0.25
#: Low-priority (positive nice) busy time below this many cores' worth is not worth a note: cores_free
#: counts niced work as yielding to the job only from here (a nice-19 thread gets 15/1024 of a core a
#: nice-0 thread wants: sched_prio_to_weight in the Linux kernel's kernel/sched/core.c).
NICED_MIN_CORES = 0.05
