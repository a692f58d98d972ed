"""The /proc and cgroup readers on fixture text (cgroup v1, v2, 'max', absent) and on a fake root."""

from __future__ import annotations

import pytest

from analyzer.record import host_readers as R
from analyzer.record.system_sampler import cpu_quota_cores

STAT = """cpu  100 0 50 800 50 0 0 0 0 0
cpu0 80 0 20 300 0 0 0 0 0 0
cpu1 20 0 30 500 50 0 0 0 0 0
intr 12345
ctxt 999
procs_running 5
procs_blocked 0
"""


@pytest.mark.parametrize(
    ("text", "cores"),
    [("200000 100000\n", 2.0), ("150000 100000", 1.5), ("max 100000\n", None), ("", None), (None, None), ("x y", None)],
)
def test_cgroup_v2_cpu_max(text, cores):
    assert R.cpu_max_cores(text) == cores


@pytest.mark.parametrize(
    ("quota", "period", "cores"),
    [("400000\n", "100000\n", 4.0), ("-1\n", "100000\n", None), (None, "100000", None), ("50000", "100000", 0.5)],
)
def test_cgroup_v1_cfs_quota(quota, period, cores):
    assert R.cfs_quota_cores(quota, period) == cores


def test_cgroup_paths_of_v1_and_v2():
    v1 = "12:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n"
    assert R.cgroup_paths(v1) == (None, "/kubepods/pod1/c1")
    assert R.cgroup_paths("0::/user.slice/job\n") == ("/user.slice/job", None)
    assert R.cgroup_paths(None) == (None, None)


def test_cpu_ticks_of_the_host_and_of_an_affinity_mask():
    assert R.cpu_ticks(STAT) == R.CpuTicks(busy=150, total=1000)  # idle + iowait are not busy
    assert R.cpu_ticks(STAT, frozenset({0})) == R.CpuTicks(busy=100, total=400)
    assert R.cpu_ticks(STAT, frozenset({1})) == R.CpuTicks(busy=50, total=600)
    assert R.cpu_ticks(STAT, frozenset({7})) is None
    assert R.procs_running(STAT) == 5 and R.procs_running("cpu 1 2 3 4") is None


def test_cpu_ticks_keep_the_low_priority_time_apart():
    stat = "cpu  100 40 50 800 50 0 0 0 0 0\ncpu0 60 40 20 300 0 0 0 0 0 0\ncpu1 40 0 30 500 50 0 0 0 0 0\n"
    assert R.cpu_ticks(stat) == R.CpuTicks(busy=190, total=1040, nice=40)
    assert R.cpu_ticks(stat, frozenset({1})).nice == 0
    assert R.flag("1\n") is True and R.flag("0") is False and R.flag(None) is None and R.flag("x") is None


def test_process_stat_with_spaces_and_parentheses_in_its_name():
    fields = ["S", "41"] + ["0"] * 9 + ["300", "200"] + ["0"] * 3 + ["5"] + ["0"] * 4 + ["1000"] + ["0"] * 20
    text = "1234 (python (worker) 1) " + " ".join(fields)
    stat = R.proc_stat(text)
    assert stat == R.ProcStat(ppid=41, cpu_ticks=500, rss_pages=1000, nice=5)
    assert R.proc_stat("garbage") is None and R.proc_stat(None) is None


def test_status_loadavg_and_children():
    status = "Name:\tpython\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t7\n"
    assert R.involuntary_switches(status) == 7 and R.involuntary_switches("") is None
    assert R.load_avg_1m("2.40 1.10 0.50 3/400 9999\n") == 2.4 and R.load_avg_1m("") is None
    assert R.child_pids("12 13 \n") == [12, 13] and R.child_pids(None) == []


def _fake_root(tmp_path, cgroup: str, files: dict[str, str]):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


@pytest.mark.parametrize(
    ("cgroup", "files", "cores"),
    [
        ("0::/job\n", {"job/cpu.max": "300000 100000\n"}, 3.0),
        ("0::/job\n", {"cpu.max": "100000 100000\n"}, 1.0),  # inside a container: its cgroup is the root
        ("0::/job\n", {"job/cpu.max": "max 100000\n"}, None),
        (
            "3:cpu,cpuacct:/pod\n",
            {"cpu,cpuacct/pod/cpu.cfs_quota_us": "200000", "cpu,cpuacct/pod/cpu.cfs_period_us": "100000"},
            2.0,
        ),
        (
            "3:cpu,cpuacct:/pod\n",
            {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
            None,
        ),
        ("", {}, None),
    ],
)
def test_cpu_quota_from_a_cgroup_tree(tmp_path, cgroup, files, cores):
    proc, root = _fake_root(tmp_path, cgroup, files)
    assert cpu_quota_cores(proc, root) == cores
