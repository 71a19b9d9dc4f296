"""Options of the GPU tests (read where the test path given to pytest is under tests/gpu/).

* `--gpu-runs DIR`: keep the multi-GPU tests' shared runs (the eager DDP reference, the
  graph-stepped DDP run) and their corpus / tokenizer cache in DIR, reused by later pytest
  invocations with the same options -- so the tests can run one pytest process each
  (benchmarks/multi_gpu/run_on_device.sh tests) without training the references again.
  Default: a fresh directory of the session.
* `--gpu-run-timeout S`: the hard limit of one torchrun (or one-process) run started by a test;
  past it every rank prints its Python stacks and the test fails with them (default 90).
"""

from __future__ import annotations


def pytest_addoption(parser) -> None:
    group = parser.getgroup("gpu", "multi-GPU tests (tests/gpu/test_distributed_gpu.py)")
    group.addoption("--gpu-runs", default=None, metavar="DIR",
                    help="keep and reuse the shared reference runs and the corpus cache in DIR")
    group.addoption("--gpu-run-timeout", type=float, default=90.0, metavar="S",
                    help="hard limit of one run started by a test, in seconds (stacks printed past it)")
