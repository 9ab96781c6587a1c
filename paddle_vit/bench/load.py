"""What else ran on the machine while the benchmark timed (`other_load`): every CPU's busy time
from /proc/stat less this process tree's, in cores, and the one line that warns when it passed the
threshold (`busy_warning`). Linux only; elsewhere the readings are None."""
import os
import sys
import time


# the benchmark warns when other processes (and other virtual machines, through steal) took more
# than BUSY_CORES cores, or BUSY_SHARE of all cores where that is more, on average while it timed
# (docs/benchmarks.md, "Machine and method")
BUSY_CORES = 0.25
BUSY_SHARE = 0.10
# the CPU times are counted in clock ticks (SC_CLK_TCK a second): over a shorter timing they say little
MIN_LOAD_SECONDS = 1.0
# /proc/stat's cpu lines: user nice system idle iowait irq softirq steal guest guest_nice (guest
# time is counted inside user and nice already)
_BUSY_FIELDS = (0, 1, 2, 5, 6)
_STEAL_FIELD = 7


def _clock_ticks(hz):
    return hz or os.sysconf("SC_CLK_TCK")


def read_cpu_times(path="/proc/stat", hz=None):
    """(busy seconds, steal seconds, number of CPUs) of all CPUs together since boot, from
    /proc/stat: busy = user + nice + system + irq + softirq (idle and I/O wait left out); steal =
    the time the hypervisor ran other virtual machines on this machine's CPUs."""
    with open(path) as stat:
        lines = stat.read().splitlines()
    fields = lines[0].split() if lines else []
    if not fields or fields[0] != "cpu":
        raise ValueError(f"{path}: the first line is not the all-CPU 'cpu' line")
    ticks = [int(value) for value in fields[1:]]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    steal = ticks[_STEAL_FIELD] if len(ticks) > _STEAL_FIELD else 0
    hz = _clock_ticks(hz)
    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / hz, steal / hz, cpus


def process_tree_cpu_seconds(root=None, proc="/proc", hz=None):
    """CPU seconds (user + system) of process `root` (default: this one) and of every live
    descendant, each with the time of the children it has waited for (cutime + cstime): the timm
    worker and the DataLoader workers while they run, and those already reaped inside the tree."""
    root = os.getpid() if root is None else root
    parents, ticks = {}, {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as stat:
                text = stat.read()
        except OSError:  # ended since the listing
            continue
        fields = text[text.rindex(")") + 1:].split()  # after "pid (name)": a name may hold spaces
        parents[int(name)] = int(fields[1])
        ticks[int(name)] = sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    children = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += ticks.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / _clock_ticks(hz)


def sample_cpu(proc="/proc", root=None, hz=None, clock=time.monotonic):
    """One reading for `other_load`: the wall clock, the machine's busy and steal CPU seconds and
    this process tree's; None where there is no /proc (not Linux) or it cannot be read."""
    if not sys.platform.startswith("linux") and proc == "/proc":
        return None
    try:
        busy, steal, cpus = read_cpu_times(os.path.join(proc, "stat"), hz)
        own = process_tree_cpu_seconds(root, proc, hz)
    except (OSError, ValueError, IndexError):
        return None
    return {"time": clock(), "busy": busy, "steal": steal, "own": own, "cpus": cpus}


def other_load(before, after):
    """What the rest of the machine used between two `sample_cpu` readings, in cores on average:
    ``other_cores`` = (all CPUs' busy time - this process tree's CPU time) / wall time (not below
    0: the two are counted in clock ticks), ``steal_cores`` the same for other virtual machines,
    and whether their sum passes the threshold (``busy``). None without both readings; over less
    than MIN_LOAD_SECONDS only ``seconds`` and ``cpus``, the rest None (too short to measure)."""
    if before is None or after is None:
        return None
    seconds = after["time"] - before["time"]
    if seconds < MIN_LOAD_SECONDS:
        return {"other_cores": None, "steal_cores": None, "own_cores": None, "cpus": after["cpus"],
                "seconds": seconds, "threshold_cores": None, "busy": None}
    own = (after["own"] - before["own"]) / seconds
    others = max(0.0, (after["busy"] - before["busy"]) / seconds - own)
    steal = max(0.0, (after["steal"] - before["steal"]) / seconds)
    threshold = max(BUSY_CORES, BUSY_SHARE * after["cpus"])
    return {"other_cores": others, "steal_cores": steal, "own_cores": own, "cpus": after["cpus"],
            "seconds": seconds, "threshold_cores": threshold, "busy": others + steal > threshold}


def add_other_load(result, load):
    """`result`'s keys for `other_load`'s reading `load`: ``other_load_cores`` (None off Linux or
    over a timing too short to measure) and ``machine_load``, the reading itself."""
    result["other_load_cores"] = None if load is None else load["other_cores"]
    result["machine_load"] = load
    return result


def busy_warning(result):
    """The one line to print on stderr when the machine was busy while `result` was timed, else None."""
    load = result.get("machine_load")
    if not load or not load["busy"]:
        return None
    used = f"other processes used {load['other_cores']:.2f} of {load['cpus']} cores"
    if load["steal_cores"] >= 0.05:
        used += f" (and other virtual machines {load['steal_cores']:.2f})"
    figures = "the figures and the ratio are" if ("timm" in result or result.get("side_by_side")) else "the figures are"
    return (f"warning: the machine was busy: {used} during the timing, more than {load['threshold_cores']:.2f}; "
            f"{figures} not comparable (run again on a quiet machine)")


def format_other_load(result):
    """The report's line on the machine's other load, or None off Linux."""
    load = result.get("machine_load")
    if not load:
        return None
    if load["other_cores"] is None:
        return (f"other processes: not measured, the timing took {load['seconds']:.2f} s "
                f"(at least {MIN_LOAD_SECONDS:.0f} s is needed)")
    return (f"other processes used {load['other_cores']:.2f} of {load['cpus']} cores during the timing "
            f"(this run {load['own_cores']:.2f}, steal {load['steal_cores']:.2f}; busy above "
            f"{load['threshold_cores']:.2f})")
