"""The settings one `gpuanalyze run --try` trial applies, and the variables that carry them.

Both sides use this module: the launcher encodes a ``TrialSetting`` into the trial's
environment, and each Python process of the trial decodes it (analyzer.run.trial_child). It
imports nothing heavy: it is read at the start of every process of a trial.

Variables (set only by `gpuanalyze run --try`):

- ``GPUANALYZE_TRIAL=1``: this run is a trial (scripts may skip checkpoints and other outputs).
- ``GPUANALYZE_TRY_SETTING``: the setting as ``--candidates`` takes it (``num_workers=2,autocast=bf16``;
  empty: the baseline).
- ``GPUANALYZE_TRY_STOP_AFTER``: the process stops (cleanly) after this many optimizer steps.
- ``GPUANALYZE_TRY_LOG``: file the process appends one JSON line to per loader it creates and at its stop.
- ``GPUANALYZE_TRY_TOKEN``: ``<random>:<file>``: the variables count only where the file holds the
  random value. The launcher writes it in a private directory it removes when the trials end, so
  variables left in a shell, or copied from a trial, are ignored (genuine).

Script knobs (the convention for what only the script can change): a trial given
``accumulate=N``, ``eval_every=N`` or ``checkpoint_every=N`` sets ``GPUANALYZE_TRIAL_ACCUMULATE``,
``GPUANALYZE_TRIAL_EVAL_EVERY`` or ``GPUANALYZE_TRIAL_CHECKPOINT_EVERY`` to N; a script that
exposes the setting reads it (``int(os.environ.get("GPUANALYZE_TRIAL_EVAL_EVERY", default))``,
0 meaning never). A script that does not read it runs unchanged, which the trial cannot see.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import GpuAnalyzeError

TRIAL = "GPUANALYZE_TRIAL"
SETTING = "GPUANALYZE_TRY_SETTING"
STOP_AFTER = "GPUANALYZE_TRY_STOP_AFTER"
LOG = "GPUANALYZE_TRY_LOG"
TOKEN = "GPUANALYZE_TRY_TOKEN"
#: Script knobs: setting name -> the variable the script reads (see the module docstring).
SCRIPT_KEYS = {
    "accumulate": "GPUANALYZE_TRIAL_ACCUMULATE",
    "eval_every": "GPUANALYZE_TRIAL_EVAL_EVERY",
    "checkpoint_every": "GPUANALYZE_TRIAL_CHECKPOINT_EVERY",
}

#: DataLoader arguments a trial may set, with their type.
LOADER_KEYS: dict[str, type] = {
    "batch_size": int,
    "num_workers": int,
    "persistent_workers": bool,
    "pin_memory": bool,
    "prefetch_factor": int,
}
#: The most a trial sets: a worker is a process and a prefetched batch is held in memory, so a typo
#: (num_workers=99999999999999999999) would start processes until the host runs out.
LOADER_MOST = {"num_workers": 256, "prefetch_factor": 64, "batch_size": 1 << 24}
#: Autocast precisions a trial may try.
PRECISIONS = ("bf16", "fp16")
#: The EndInfo status of a trace that a trial stopped after its bounded steps.
TRIAL_STOP_STATUS = "trial_stop"

LoaderValue = int | bool


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialSetting:
    """What one trial changes, without editing the user's code. Empty: the baseline."""

    dataloader: tuple[tuple[str, LoaderValue], ...] = ()
    """DataLoader arguments (keys of LOADER_KEYS) given to every DataLoader the script creates,
    replacing what the script passed."""
    autocast: str | None = None
    """'bf16' or 'fp16': run each outermost module forward under ``torch.autocast`` (fp16 on accelerators only)."""
    tf32: bool = False
    """Allow TF32 for matmuls and cuDNN convolutions (accelerators only)."""
    script: tuple[tuple[str, int], ...] = ()
    """Script knobs (keys of SCRIPT_KEYS), passed in variables the script may read."""

    def __post_init__(self) -> None:
        for pairs, kinds in ((self.dataloader, LOADER_KEYS), (self.script, dict.fromkeys(SCRIPT_KEYS, int))):
            keys = [k for k, _ in pairs]
            for key, value in pairs:
                kind = kinds.get(key)
                if kind is None:
                    raise GpuAnalyzeError(f"unknown setting {key!r}; use one of {', '.join(kinds)}")
                if keys.count(key) > 1:
                    raise GpuAnalyzeError(f"setting {key!r} given twice")
                if type(value) is not kind:
                    raise GpuAnalyzeError(
                        f"{key}={value!r}: expected {'true/false' if kind is bool else 'a whole number'}"
                    )
                least = 1 if key in ("prefetch_factor", "batch_size", "accumulate") else 0
                if kind is int and value < least:
                    raise GpuAnalyzeError(f"{key}={value}: must be at least {least}")
                if kind is int and value > LOADER_MOST.get(key, value):
                    raise GpuAnalyzeError(f"{key}={value}: at most {LOADER_MOST[key]:,} in a trial")
        if self.autocast is not None and self.autocast not in PRECISIONS:
            raise GpuAnalyzeError(f"autocast={self.autocast!r}: use bf16 or fp16")

    @property
    def is_baseline(self) -> bool:
        return not self.dataloader and self.autocast is None and not self.tf32 and not self.script

    @property
    def changes_batch(self) -> bool:
        """Batch size or accumulation changed: the optimisation changes too (learning rate)."""
        return "batch_size" in dict(self.dataloader) or "accumulate" in dict(self.script)

    @property
    def needs_accelerator(self) -> bool:
        """pin_memory, fp16 autocast and TF32 only mean something with an accelerator (bf16 autocast runs on a
        CPU too: natively on one with AVX512_BF16/AMX)."""
        return self.autocast == "fp16" or self.tf32 or dict(self.dataloader).get("pin_memory") is True

    def label(self, separator: str = ", ") -> str:
        """``num_workers=2, persistent_workers=true`` (``current settings`` for the baseline); with
        ``separator=","``, what ``--candidates`` takes (``""`` for the baseline)."""
        parts = [f"{k}={_text(v)}" for k, v in self.dataloader]
        if self.autocast is not None:
            parts.append(f"autocast={self.autocast}")
        if self.tf32:
            parts.append("tf32=true")
        parts += [f"{k}={v}" for k, v in self.script]
        return separator.join(parts) or ("current settings" if separator == ", " else "")

    def slug(self) -> str:
        """A directory-name form of the label (``num_workers-2_persistent_workers-true``)."""
        return "_".join(p.replace("=", "-") for p in self.label().split(", ")) if not self.is_baseline else "baseline"


def parse_setting(text: str, source: str = "--candidates") -> TrialSetting:
    """``num_workers=2,persistent_workers=true``, ``autocast=bf16``, ``tf32=true`` → TrialSetting.
    Raises GpuAnalyzeError saying what is accepted (``source``: where the text came from)."""
    loader: list[tuple[str, LoaderValue]] = []
    autocast: str | None = None
    tf32 = False
    script: list[tuple[str, int]] = []
    items = [p.strip() for p in text.split(",") if p.strip()]
    if not items:
        raise GpuAnalyzeError(f"{source} {text!r}: expected key=value[,key=value], e.g. num_workers=2")
    for item in items:
        key, sep, raw = (s.strip() for s in item.partition("="))
        if not sep or not key or not raw:
            raise GpuAnalyzeError(f"{source} {text!r}: {item!r} is not key=value (e.g. num_workers=2)")
        if key == "autocast":
            autocast = raw.lower()
        elif key == "tf32":
            tf32 = _bool(key, raw)
        elif key in SCRIPT_KEYS:
            script.append((key, _int(key, raw)))
        elif key in LOADER_KEYS:
            loader.append((key, _bool(key, raw) if LOADER_KEYS[key] is bool else _int(key, raw)))
        else:
            known = ", ".join([*LOADER_KEYS, "autocast", "tf32", *SCRIPT_KEYS])
            raise GpuAnalyzeError(f"{source} {text!r}: unknown setting {key!r}; use one of {known}")
    return TrialSetting(dataloader=tuple(loader), autocast=autocast, tf32=tf32, script=tuple(script))


def env_for(setting: TrialSetting, *, stop_after: int, log: str, token: str) -> dict[str, str]:
    """The variables that make every process of a trial apply ``setting`` and stop after ``stop_after`` steps."""
    env = {TRIAL: "1", STOP_AFTER: str(stop_after), LOG: log, TOKEN: token, SETTING: setting.label(",")}
    env.update((SCRIPT_KEYS[key], str(value)) for key, value in setting.script)
    return env


def is_trial_variable(name: str) -> bool:
    return name == TRIAL or name.startswith(("GPUANALYZE_TRY_", "GPUANALYZE_TRIAL_"))


def new_token(directory: Path) -> str:
    """A TOKEN value whose file is in ``directory`` (private to the launcher, removed after the trials)."""
    value = secrets.token_hex(16)
    path = directory / "token"
    path.write_text(value)
    return f"{value}:{path}"


def genuine(env: Mapping[str, str]) -> bool:
    """Whether this process belongs to a running `gpuanalyze run --try` (its TOKEN's file holds its value)."""
    value, _, path = env.get(TOKEN, "").partition(":")
    try:
        with open(path, "rb") as fh:
            return bool(value) and hmac.compare_digest(fh.read(64), value.encode())
    except (OSError, ValueError):
        return False


def from_env(env: Mapping[str, str]) -> tuple[TrialSetting, int | None]:
    """The setting and step bound of this process's trial; raises GpuAnalyzeError naming the bad variable."""
    text, stop = env.get(SETTING, "").strip(), env.get(STOP_AFTER, "").strip()
    setting = parse_setting(text, SETTING) if text else TrialSetting()
    if stop and not (stop.isdigit() and int(stop) >= 1):
        raise GpuAnalyzeError(f"{STOP_AFTER}={stop!r}: expected a whole number of at least 1")
    return setting, int(stop) if stop else None


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _bool(key: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise GpuAnalyzeError(f"{key}={raw!r}: expected true or false")


def _int(key: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError as exc:
        raise GpuAnalyzeError(f"{key}={raw!r}: expected a whole number") from exc
