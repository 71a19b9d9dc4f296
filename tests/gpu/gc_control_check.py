"""Control for test_capture_survives_the_collector_freeing_an_older_graph (run in its own process):
with the step's collector pause removed, is the older graph really destroyed inside the capture,
and does that break the capture on this torch?   python tests/gpu/gc_control_check.py"""

import contextlib
import sys
import weakref

sys.path[:0] = ["tests/gpu", "."]
import torch  # noqa: E402

import mhar_probe.step as step  # noqa: E402

step.gc_paused = contextlib.nullcontext
import test_graph_step as t  # noqa: E402

events = []
_orig = torch.cuda.CUDAGraph


class Watched(_orig):  # records whether a graph dies while a capture is under way
    def __del__(self):
        events.append(torch.cuda.is_current_stream_capturing())


torch.cuda.CUDAGraph = Watched
try:
    t._capture_with_an_older_graph_in_a_cycle()
    result = "capture without the pause succeeded"
except Exception as e:  # noqa: BLE001
    result = f"capture without the pause failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
print(f"CONTROL: {result}; graphs destroyed while capturing: {sum(events)} of {len(events)} destroyed")
