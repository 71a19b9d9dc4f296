"""The fold of the fold-block backward with its per-pair sums as tensor-core dots (`fold_kernel="tc"`).

`stack_fold_kernel` (bwd_fold.py) walks, per position block, every source j and every reader c of
the block: one dot product <dout_c, v_j> per head and pair, a dependent chain per reader. Here one
program owns one position p and takes the block's Cb readers and a chunk of SC sources at once, per
head h (K = d / H columns):

    Dh [CB, K]  the block's douts at p, head h          Vh [SC, K]  the chunk's sources at p, head h
    Uh [CB, K]  q_c * g_c, head h (the same at every p)  w, dl [CB, SC]  per pair (c, j) at (p, h)

    ds  = Dh Vh^T                      <dout_c, v_j>_h          (then dl = w (ds - shift_c - S'_c))
    uv  = Uh Vh^T                      <u_c, v_j>_h
    P1  = w^T Dh                       sum_c w_{c,j} dout_c     (head h's columns)
    A   = dl^T Uh                      a_j = sum_c dl_{c,j} u_c (head h's columns)

and the term T's rmsnorm part needs two full-row numbers per source, r_j = rsqrt(mean v_j^2 + eps)
and <a_j, v_j> = sum_h sum_c dl_{c,j,h} uv_{c,j,h}, before any head's columns of

    G_j = P1 + r_j A - (r_j^3 / d) <a_j, v_j> v_j            (bwd_fold.py's T summed over the block)

are final. So each chunk takes two passes over the heads: the first forms ds, dl (stored), uv, the
row sums of v^2 and of dl uv; the second forms ds and dl again (the same operations: the same
values), P1 and A, and adds G_j to ACC_j. The second pass re-reads the chunk's rows and douts at p,
which the first has just brought into cache. Same arguments as `stack_fold_kernel`, for stacks
whose calls all have H heads; a head's columns in tiles of BKC (64), its products summed over
them; source 0 in a launch of its own (`launch_fold_tc`). The dots run as Triton's three-product
TF32 dot on a GPU (`DOT`), IEEE in the interpreter. `naive.fold_reference` is the float64 reading
(the same blocks).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mhar_probe.kernels.launch import Launcher
from mhar_probe.kernels.route.fwd import rsqrt_acc


@triton.jit
def _tiles(V, vrow, p, jin, rc, cin, dslot, DOUT_BUF, U, col, kin, D: tl.constexpr):
    """Vh [SC, BKC] (fp32) and Dh, Uh [CB, BKC] over the columns `col` (mask `kin`) at position p."""
    vh = tl.load(V + vrow[:, None] + col[None, :], mask=jin[:, None] & kin[None, :], other=0.0).to(tl.float32)
    cm = cin[:, None] & kin[None, :]
    dh = tl.load(DOUT_BUF + dslot[:, None] + p * D + col[None, :], mask=cm, other=0.0).to(tl.float32)
    uh = tl.load(U + rc[:, None] * D + col[None, :], mask=cm, other=0.0)
    return vh, dh, uh


@triton.jit
def _head_dl(V, vrow, p, js, jin, rc, cin, n_c, woff, soff, dslot, DOUT_BUF, WALL, SHALL, SALL, U, h, P,
             D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BKC: tl.constexpr, CB: tl.constexpr,
             SC: tl.constexpr, DOT: tl.constexpr):
    """Head h of a chunk at position p, its K columns in tiles of BKC: ds = Dh Vh^T, uv = Uh Vh^T
    [CB, SC], sum v^2 [SC]; then w and dl [CB, SC], the pairs read and their WALL / DALL offsets."""
    ds = tl.zeros([CB, SC], tl.float32)
    uv = tl.zeros([CB, SC], tl.float32)
    ss = tl.zeros([SC], tl.float32)
    for k0 in range(0, K, BKC):
        col = h * K + k0 + tl.arange(0, BKC)
        kin = (k0 + tl.arange(0, BKC)) < K
        vh, dh, uh = _tiles(V, vrow, p, jin, rc, cin, dslot, DOUT_BUF, U, col, kin, D)
        ds = tl.dot(dh, tl.trans(vh), ds, input_precision=DOT)
        uv = tl.dot(uh, tl.trans(vh), uv, input_precision=DOT)
        ss += tl.sum(vh * vh, axis=1)
    pair = cin[:, None] & jin[None, :] & (n_c[:, None] > js[None, :])
    widx = woff[:, None] + js[None, :].to(tl.int64) * P * H + p * H + h
    w = tl.load(WALL + widx, mask=pair, other=0.0)
    sidx = soff + p * H + h
    sh = tl.load(SHALL + sidx, mask=cin, other=0.0)
    sr = tl.load(SALL + sidx, mask=cin, other=0.0)
    dl = tl.where(pair & (n_c > 1)[:, None], w * ((ds - sh[:, None]) - sr[:, None]), 0.0)
    return w, dl, uv, ss, pair, widx


@triton.jit
def stack_fold_tc_kernel(
    V0, V, stride_vn, DOUT_BUF, stride_dc, dbase, WALL, DALL, SHALL, SALL, U,  # as stack_fold_kernel
    CALL_N, CALL_H, CALL_WOFF, CALL_SOFF, ACC,
    call, top1, jf, first, P, eps, jlo,
    D: tl.constexpr, H: tl.constexpr, K: tl.constexpr, BKC: tl.constexpr, CB: tl.constexpr,
    SC: tl.constexpr, DOT: tl.constexpr,
):
    """ACC_j = [ACC_j +] G_{[call, top1), j} for j in [jlo, jf), one program per position (module
    docstring); stores dl_{c,j} of every folded pair. Source j's row at V + j * stride_vn (V0 is
    not read: the launch for source 0 passes row 0 as V with stride 0, `launch_fold_tc`). CB >=
    top1 - call readers (padded), SC sources per chunk, a head's K columns in tiles of BKC."""
    p = tl.program_id(0).to(tl.int64)
    rc = call + tl.arange(0, CB)  # [CB] the block's readers
    cin = rc < top1
    n_c = tl.load(CALL_N + rc, mask=cin, other=0)
    woff = tl.load(CALL_WOFF + rc, mask=cin, other=0)
    soff = tl.load(CALL_SOFF + rc, mask=cin, other=0)
    dslot = dbase + rc.to(tl.int64) * stride_dc
    for j0 in range(jlo, jf, SC):
        js = j0 + tl.arange(0, SC)  # [SC]
        jin = js < jf
        vrow = js.to(tl.int64) * stride_vn + p * D
        ss = tl.zeros([SC], tl.float32)
        av = tl.zeros([SC], tl.float32)
        for h in range(0, H):  # pass 1: dl (stored), sum v^2, <a_j, v_j>
            w, dl, uv, ssh, pair, widx = _head_dl(V, vrow, p, js, jin, rc, cin, n_c, woff, soff, dslot, DOUT_BUF,
                                                  WALL, SHALL, SALL, U, h, P, D, H, K, BKC, CB, SC, DOT)
            tl.store(DALL + widx, dl, mask=pair)
            av += tl.sum(dl * uv, axis=0)
            ss += ssh
        r = rsqrt_acc(ss / D + eps)  # [SC]
        fac = r * r * r * av / D
        for h in range(0, H):  # pass 2: G_j's columns of head h into ACC_j
            w, dl, uv, ssh, pair, widx = _head_dl(V, vrow, p, js, jin, rc, cin, n_c, woff, soff, dslot, DOUT_BUF,
                                                  WALL, SHALL, SALL, U, h, P, D, H, K, BKC, CB, SC, DOT)
            wt = tl.trans(w)
            dlt = tl.trans(dl)
            for k0 in range(0, K, BKC):
                col = h * K + k0 + tl.arange(0, BKC)
                kin = (k0 + tl.arange(0, BKC)) < K
                vh, dh, uh = _tiles(V, vrow, p, jin, rc, cin, dslot, DOUT_BUF, U, col, kin, D)
                g = tl.dot(wt, dh, input_precision=DOT)  # [SC, BKC]: sum_c w dout_c
                a = tl.dot(dlt, uh, input_precision=DOT)  # a_j = sum_c dl u_c
                g = g + r[:, None] * a - fac[:, None] * vh
                aptr = ACC + js[:, None].to(tl.int64) * P * D + p * D + col[None, :]
                am = jin[:, None] & kin[None, :]
                g = tl.load(aptr, mask=am & ((col[None, :] * 0 + first) == 0), other=0.0) + g
                tl.store(aptr, g, mask=am)


STACK_FOLD_TC = Launcher(stack_fold_tc_kernel)


def launch_fold_tc(args: tuple, consts: dict, P: int) -> None:
    """The fold over sources [0, jf) in two launches of `stack_fold_tc_kernel`: source 0 from its
    own row (V0: under autocast fp32 beside the bf16 buffer, so one tile cannot load both), then
    [1, jf) from the buffer. `args`: `stack_fold_kernel`'s."""
    V0, V, stride_vn = args[:3]
    rest, jf = args[3:], args[18]
    STACK_FOLD_TC(P, (V0, V0, 0, *rest[:15], 1, *rest[16:], 0), dict(consts), 4, None)
    if jf > 1:
        STACK_FOLD_TC(P, (V0, V, stride_vn, *rest, 1), dict(consts), 4, None)


#: sources per chunk and the fewest readers a dot takes (tl.dot needs 16 rows and columns on a GPU)
TC_SOURCES = 16
TC_MIN_READERS = 16
#: columns of a head per tile (its [16, BKC] fp32 tiles live in registers)
TC_COLUMNS = 64
