"""benchmarks/kernels/regs_offline.py's pair_e job: with --pair-e-r-in-dl it compiles the launch the
training step makes (pair_e_plan under autocast: unrounded keys over the bf16 buffer), so its
offline registers and loops are the step's kernel's."""
from __future__ import annotations

import pytest
from script_checks import load_script

import mhar_probe.kernels.route.bwd_collect as rbc


@pytest.mark.parametrize("d", [512, 1024, 1280])
def test_pair_e_job_compiles_the_steps_launch(d):
    ro = load_script("benchmarks/kernels/regs_offline.py")
    block_c, consts, warps = rbc.pair_e_plan(d, 8, frozenset({0}), cuda=True, narrow_rows=True)
    fn, _, job = ro.pair_e_job(d, (block_c, consts["BLOCK_P"], warps), True)
    assert fn is rbc.pair_e_kernel and job == consts
    assert ro.pair_e_job(d, (block_c, consts["BLOCK_P"], warps))[2]["ROUND"] == 1  # the bf16 chain's, as before
    assert ro.pair_e_job(d, (16, 16, 4, 2), True)[2]["HB"] == 2  # a variant's fourth column
