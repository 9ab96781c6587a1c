"""Where a Paddle step's time goes, op by op (`paddle.profiler`), in the rows timm's side reports
too (`timm_worker.operator_rows`)."""
import paddle.profiler as profiler

from .timm_worker import operator_rows


def profile_operators(subject, iterations):
    """Where the time of `iterations` more steps goes, op by op, from `paddle.profiler` (after
    the timed rounds, so the profiler costs them nothing): [{"name", "calls", "ms_per_step",
    "share"}], largest first. Each op's self time, without the ops it calls (a backward node runs
    matmuls of its own), so that the rows add up to the step and no time is counted twice, as
    timm's side counts. Eager and to_static steps only (the predictor runs its ops inside
    paddle.inference, which the profiler does not see op by op)."""
    with profiler.Profiler(targets=[profiler.ProfilerTarget.CPU], on_trace_ready=lambda prof: None) as prof:
        subject.timed(iterations)
    events = {}
    for root in prof.profiler_result.get_data().values():  # one tree of host events per thread
        for name, self_ns in operator_self_times(root):
            calls, total = events.get(name, (0, 0))
            events[name] = (calls + 1, total + self_ns)
    return operator_rows(events, iterations)


def operator_self_times(node):
    """(name, self time in ns) of every operator event under `node`: its span less the spans of
    the operators nearest below it (through events of other kinds)."""
    def operators_below(event):
        for child in event.children_node:
            if child.type == profiler.TracerEventType.Operator:
                yield child
            else:
                yield from operators_below(child)

    stack = list(operators_below(node))
    while stack:
        operator = stack.pop()
        inner = list(operators_below(operator))
        yield operator.name, (operator.end_ns - operator.start_ns) - sum(op.end_ns - op.start_ns for op in inner)
        stack.extend(inner)
