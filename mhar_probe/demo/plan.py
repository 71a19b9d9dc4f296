"""What a study trains and measures: the shared recipe, the grids, and the sizes of the
capture and evaluation. Every run of a plan shares the recipe and, per seed, the data order.

Two plans ship:
  * `DEMO`: `make demo`, the `tiny` preset on the embedded corpus, on two CPU cores;
  * `LADDER`: the GPU ladder (issue 23, results/ladder): a d=128, L=8 model on the `installed`
    corpus (the text of the machine's packages), each run trained on at least 10 tokens per
    parameter, three seeds of baseline / attnres / mhar, a kv x H grid and a width ladder.
  * `STUDY` (issue 33, results/study100m): the paper's 100M shape on the built study corpus
    (`mhar corpus build --out corpus`), 250M tokens a run, an lr sweep, three seeds, extra arms and
    a best-vs-best rate; `MIDDLE`: d=256, L=8 (32-channel heads) at 20 tokens per parameter;
    `STUDY350`: one pair (baseline, MHAR H=8) at the paper's 350M shape, 100M tokens a run;
  * `PAPER350` (issue 52, results/study350m): the paper's 350M shape and recipe at 5,000 steps, on a
    corpus built on the GPU machine from its own text, three seeds of baseline / attnres / MHAR H=8.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..sweep import SweepGrid
from ..tail import TAIL_K


#: the claim table's six rows every plan can read (demo.claims); a plan whose grids cannot test some
#: (no single-head arm, no kv x H grid) names the ones it keeps in Plan.core_claims
CORE_CLAIMS = ("order", "optimum", "excess", "deviation", "replication", "ceg")
#: rows a plan may add (Plan.extra_claims, demo.claims)
EXTRA_CLAIMS = ("over_split", "gain_path", "mcnemar")


def evaluation_steps(steps: int, eval_every: int) -> list[int]:
    """The steps a run of `steps` evaluates at: before the first, every `eval_every`-th and the last
    (mhar_probe.train)."""
    return [s for s in range(steps + 1) if s % eval_every == 0 or s == steps]


def tail_covers_last_quarter(steps: int, eval_every: int, k: int = TAIL_K) -> bool:
    """Whether the tail-mean's last k evaluations lie in the last quarter of training,
    first tail step >= 3/4 steps (the paper's 11 evaluations: steps 15k-20k of 20k)."""
    evals = evaluation_steps(steps, eval_every)
    return len(evals) >= k and 4 * evals[-k] >= 3 * steps


def max_eval_every(steps: int, k: int = TAIL_K) -> int | None:
    """The longest evaluation interval whose tail covers the last quarter (None: none does)."""
    return max((e for e in range(1, steps + 1) if tail_covers_last_quarter(steps, e, k)), default=None)


@dataclass(frozen=True)
class Plan:
    """A study: grids trained into OUT/runs, narrower baselines into OUT/ladder/d<width>, then
    capture, probes, evaluation, statistics and figures over them."""

    name: str
    title: str  # one line for the report
    preset: str
    steps: int
    recipe: dict[str, Any]  # TrainConfig fields every run shares (lr included)
    grids: dict[str, dict[str, Any]]  # sweep axes per grid name, all trained into OUT/runs
    model: dict[str, int] = field(default_factory=dict)  # model-config overrides every run shares
    ladder_widths: tuple[int, ...] = ()  # narrower baselines: with the main baseline, a compute ladder
    ladder_ffn_ratio: int = 3  # their MLP width over their width
    routed_methods: tuple[str, ...] = ("attnres", "mhar", "mhar_hw")
    main_seed: int = 42  # the seed of the probed, evaluated and CEG runs
    main_kv: int | None = None  # the KV heads of the main comparison (None: the preset's)
    mhar_heads: int = 2  # the H of the MHAR run that is evaluated and compared
    capture_all_seeds: bool = False  # capture every routed run, not only the main seed's
    eval_every_run: bool = False  # evaluate every finished run, not only the main seed's comparison
    eval_methods: tuple[str, ...] = ("baseline", "mhar")  # evaluated at the main seed
    mcnemar_pairs: tuple[tuple[str, str], ...] = (("baseline", "mhar"),)
    eval_tasks: tuple[str, ...] = ("mhar_heldout_ppl", "mhar_lastword", "mhar_nextline")
    eval_limit: int = 200
    eval_batch_size: int = 8
    capture_tokens: int = 16384
    mcnemar_bootstrap: int = 2000
    ceg_alphas: tuple[float, ...] = (0.089, 0.15)
    null_draws: int = 8  # random-query draws per capture of a routed run the claims' z does not read
    # draws of the captures the claim table reads against their null by z (MHAR at mhar_heads; with
    # spread_claims every routed run at the main seed): at least demo.claims.MIN_NULL_DRAWS
    claim_draws: int = 64
    # extra claim rows (demo.claims): the paper's Table-main deltas vs the same-seed baseline that this
    # plan's shape can be read against, as (method, H, key in figures/paper_values.json main.rows[].deltas)
    paper_deltas: tuple[tuple[str, int | None, str], ...] = ()
    paper_scale: str | None = None  # the paper_values.json scale those deltas are read at
    spread_claims: bool = False  # a row per routed method: did its queries leave their (uniform) initialisation
    # a row reading MHAR - attnres against the routing heads' width d/H over plans trained elsewhere:
    # (plan name in PLANS, its results folder relative to this plan's OUT), this plan included as "."
    width_rungs: tuple[tuple[str, str], ...] = ()
    # a row reading the order at a second learning rate (best-vs-best): (results folder relative to this
    # plan's OUT, the grid trained there at the second rate); None: no such row
    second_rate: tuple[str, str] | None = None
    # a row reading MHAR's gain over the baseline (MHAR at the plan's H minus the same-seed baseline) from
    # one model scale to the next, over plans trained elsewhere: (plan name in PLANS, its results folder
    # relative to this plan's OUT), smallest scale first, this plan included as "."
    scale_rungs: tuple[tuple[str, str], ...] = ()
    core_claims: tuple[str, ...] = CORE_CLAIMS  # which of the six core rows the plan's grids can test
    # the paper's steps at `paper_scale` where this plan trains fewer: the rows that read tail-mean losses say
    # at which length they were read (demo.claims.schedule_clause)
    paper_steps: int | None = None
    # rows beside the core ones (EXTRA_CLAIMS): "over_split" (MHAR at twice the KV heads above
    # single-head, Table main), "gain_path" (MHAR's gain over the baseline along training, stats/gain_curves.json),
    # "mcnemar" (the McNemar pairs at every seed they are tested at, stats/mcnemar_seeds.json)
    extra_claims: tuple[str, ...] = ()
    # the file stages (probe, stats, claims, figures, report) may run before any run is in, every claim
    # pending: a study whose runs arrive one device call at a time; other plans refuse, the sweep first
    files_before_runs: bool = False

    def __post_init__(self) -> None:
        """Refuse a plan whose tail-mean window reaches back before the last quarter of training, or that
        names a claim row there is none of."""
        unknown = [c for c in self.extra_claims if c not in EXTRA_CLAIMS]
        if unknown:
            raise ValueError(f"plan {self.name}: no claim row {', '.join(unknown)}; rows: {', '.join(EXTRA_CLAIMS)}")
        every = self.recipe.get("eval_every", 25)  # TrainConfig's default
        if not tail_covers_last_quarter(self.steps, every):
            fits = max_eval_every(self.steps)
            raise ValueError(f"plan {self.name}: evaluating every {every} of {self.steps} steps, the last {TAIL_K} "
                             f"evaluations reach back before the last quarter of training; "
                             + (f"evaluate every {fits} steps or fewer" if fits
                                else f"train at least {4 * (TAIL_K - 1)} steps"))

    def grid(self, axes: dict[str, Any], steps: int | None = None, extra: dict[str, int] | None = None
             ) -> SweepGrid:
        """A grid of this plan's preset and recipe over `axes` (`extra`: model overrides)."""
        # no progress bar unless the recipe asks for one (a detached device run's log shows it)
        common: dict[str, Any] = {"progress": False, **{k: v for k, v in self.recipe.items() if k != "lr"}}
        model = {**self.model, **(extra or {})}
        if model:
            common["extra"] = model
        # a grid's own `steps` / `lrs` axes (a short learning-rate sweep) replace the plan's
        base: dict[str, Any] = dict(presets=[self.preset], steps=[self.steps], lrs=[self.recipe["lr"]])
        base.update(axes)
        if steps:
            base["steps"] = [steps]
        return SweepGrid.from_dict(dict(common=common, **base))

    def grid_names(self, only: list[str] | None = None) -> list[str]:
        """The grids to train (`only`: a subset, checked)."""
        if only is None:
            return list(self.grids)
        unknown = [g for g in only if g not in self.grids and g != "widths"]
        if unknown:
            from ..errors import UserError

            raise UserError(f"plan {self.name} has no grid {', '.join(unknown)}; "
                            f"its grids: {', '.join([*self.grids, 'widths'])}")
        return [g for g in self.grids if g in only]

    def ladder_extra(self, width: int) -> dict[str, int]:
        """Model overrides of a ladder baseline of width `width`."""
        return dict(hidden_size=width, intermediate_size=self.ladder_ffn_ratio * width)

    def capture_draws(self, method: str, heads: int | None, seed: int) -> int:
        """The null draws a capture of this run takes: `claim_draws` where the claim table reads the run's
        z against its null (deviation, replication: MHAR at `mhar_heads`; spread: every routed run at the
        main seed), else `null_draws`."""
        z_read = (method == "mhar" and heads == self.mhar_heads) or (self.spread_claims and seed == self.main_seed)
        return max(self.claim_draws, self.null_draws) if z_read else self.null_draws

    def mcnemar_seeds(self, a: str, b: str) -> list[int]:
        """The seeds the McNemar pair (a, b) is tested at: with `eval_every_run`, every seed at which the plan's
        grids train both arms at the main KV (MHAR at `mhar_heads`) and rate, else the main seed alone (the eval
        stage evaluates no other)."""
        if not self.eval_every_run:
            return [self.main_seed]
        lr = self.recipe["lr"]

        def seeds(method: str) -> set[int]:
            return {s.seed for axes in self.grids.values()
                    if "steps" not in axes and all(x == lr for x in axes.get("lrs", [lr]))
                    for s in self.grid(axes).expand() if s.method == method
                    and (self.main_kv is None or s.kv == self.main_kv) and (method != "mhar" or s.H == self.mhar_heads)}

        return sorted(seeds(a) & seeds(b))

    def run_names(self, grids: list[str], steps: int | None = None) -> set[str]:
        """Names of the runs in OUT/runs that `grids` train."""
        return {s.name for g in grids for s in self.grid(self.grids[g], steps).expand()}


DEMO = Plan(
    name="demo",
    title="Embedded corpus, `tiny` preset",
    preset="tiny",
    steps=150,
    recipe=dict(lr=2e-3, batch_size=8, eval_every=3, eval_batches=2, checkpoint_every=50,
                corpus_max_bytes=4_000_000),
    grids=dict(
        main=dict(methods=["baseline", "hyper", "attnres", "mhar"], heads=[2, 4, 8], seeds=[42]),
        hw=dict(methods=["mhar_hw"], heads=[None], seeds=[42]),  # one full-width query per KV group: H = KV
        seeds=dict(methods=["baseline", "attnres", "mhar"], heads=[2], seeds=[43]),
    ),
    ladder_widths=(64, 96),
)

#: d=128, L=8, 8 attention heads (head_dim 16), 2d MLP, T=512, a 2,048-word BPE: 1.44M parameters
#: (baseline), so 480 steps of 64 x 512 tokens (15.7M) give 10.9 tokens per parameter, and the
#: `installed` corpus of the GPU machine (172M training tokens) is 11x the largest run.
LADDER_MODEL = dict(hidden_size=128, num_hidden_layers=8, num_attention_heads=8, intermediate_size=256,
                    max_position_embeddings=1024)
LADDER = Plan(
    name="ladder",
    title="GPU ladder: d=128 L=8 on the `installed` corpus (the text of the machine's packages)",
    preset="tiny",
    steps=480,
    model=LADDER_MODEL,
    # eager steps, as the committed ladder ran: in its first call the CUDA-graph capture of the fifth
    # run of one process failed, since traced to the garbage collector freeing an earlier run's graph
    # inside the capture and fixed in mhar_probe.step (gc_paused); a rerun with graphs would train
    # about three times faster but its numbers would not be the committed ones; likewise the torch
    # loss and uncompiled sublayers, the defaults when it ran (the fused step's curves agree within
    # bf16 noise, tests/gpu/test_fused_step.py, but not to the bit)
    # eval_every 12: the last 11 evaluations cover steps 360-480 (the committed ladder evaluated every 24:
    # its tail-means cover steps 240-480, results/ladder/README.md)
    recipe=dict(lr=2e-3, batch_size=64, seq_len=512, eval_every=12, eval_batches=8, checkpoint_every=1000,
                corpus="installed", corpus_max_bytes=None, vocab_size=2048, cuda_graphs=False,
                loss_kernel="torch", compile_sublayers=False),
    grids=dict(
        main=dict(methods=["baseline", "hyper", "attnres", "mhar"], heads=[4, 8], kv_heads=[4], seeds=[0]),
        hw=dict(methods=["mhar_hw"], heads=[None], kv_heads=[4], seeds=[0]),
        seeds=dict(methods=["baseline", "attnres", "mhar"], heads=[8], kv_heads=[4], seeds=[1, 2]),
        kvgrid=dict(methods=["mhar"], heads=[2, 4, 8, 16], kv_heads=[2, 4], seeds=[0]),
    ),
    ladder_widths=(64, 96),
    ladder_ffn_ratio=2,
    main_seed=0,
    main_kv=4,
    mhar_heads=8,
    capture_all_seeds=True,
    eval_methods=("baseline", "attnres", "mhar"),
    mcnemar_pairs=(("baseline", "mhar"), ("attnres", "mhar")),
    eval_tasks=("mhar_lastword", "mhar_nextline"),  # held-out loss is the training's own validation loss
    eval_limit=1000,
    eval_batch_size=64,
    capture_tokens=65536,
    null_draws=64,
)

#: The study's corpus folder, relative to the repository root (ignored by git; built by `mhar corpus
#: build --out corpus`, carried to the device as corpus.tar.xz and unpacked there by
#: results/study100m/run_on_device.sh), and the vocabulary trained into it.
STUDY_CORPUS = "corpus"
STUDY_VOCAB = 8192
#: The paper's recipe at a 65,536-token step (32 x 2048): AdamW, 5% warm-up, cosine to 0.1x, bf16, the
#: CLI's default GPU step (CUDA graphs, fused loss, compiled sublayers: None = on for one CUDA process).
#: An evaluation every 25 steps of 2 x 32 x 2048 held-out tokens puts the last 11 evaluations (the
#: tail-mean) inside the last quarter of every grid, the 1,000-step sweep's included (10 x 25 = 250).
STUDY_RECIPE = dict(lr=5e-4, batch_size=32, seq_len=2048, eval_every=25, eval_batches=2, checkpoint_every=250,
                    corpus=STUDY_CORPUS, corpus_max_bytes=None, vocab_size=STUDY_VOCAB, cuda_graphs=None,
                    loss_kernel=None, compile_sublayers=None)
#: The sweep's centre is the paper's best 100M rate for every method (tab:lrsweep, 1e-3; its unified
#: tab:main rate, 5e-4, is the low end), swept x0.5, x1, x2 on the baseline for 1,000 steps. STUDY's
#: `lr` is set from the sweep before the main grids run and shared by every method.
STUDY_SWEEP_LRS = [5e-4, 1e-3, 2e-3]
#: The best-vs-best check's second rate (the other side of the sweep's centre from the chosen one).
STUDY_SECOND_LR = 1e-3
#: What the study and its middle rung capture, evaluate and compare: every run evaluated in the call
#: that trains it (the weights are not kept; the McNemar pairs read seed 0's baseline, attnres and
#: MHAR H=8 at KV 4; held-out loss is the training's own validation loss), every routed run captured
#: with enough null draws for the claim table's per-seed z.
STUDY_ANALYSIS: dict[str, Any] = dict(
    main_seed=0, main_kv=4, mhar_heads=8, capture_all_seeds=True, eval_every_run=True,
    eval_methods=("baseline", "attnres", "mhar"), mcnemar_pairs=(("baseline", "mhar"), ("attnres", "mhar")),
    eval_tasks=("mhar_lastword", "mhar_nextline"), eval_limit=1000, eval_batch_size=32, capture_tokens=65536,
    null_draws=64, spread_claims=True)  # null draws: demo.claims.MIN_NULL_DRAWS
STUDY = Plan(
    name="study100m",
    title="The paper's 100M shape (d=512, L=12, 64-channel heads) on the study corpus, 250M tokens a run",
    preset="100m",  # d=512, L=12, 8 heads, KV 4, FFN 1536, T=2048; 42.0M parameters at 8,192 tokens
    steps=3815,  # x 65,536 tokens = 250.0M tokens
    recipe=STUDY_RECIPE,
    grids=dict(
        lrsweep=dict(methods=["baseline"], kv_heads=[4], seeds=[0], lrs=STUDY_SWEEP_LRS, steps=[1000]),
        main=dict(methods=["baseline", "attnres", "mhar"], heads=[8], kv_heads=[4], seeds=[0, 1, 2]),
        extra=dict(methods=["hyper", "mhar"], heads=[4, 16], kv_heads=[4], seeds=[0]),  # mhar H = KV and 2 KV
        hw=dict(methods=["mhar_hw"], heads=[None], kv_heads=[4], seeds=[0]),  # one full-width query per KV group
        # the baseline too: its best rate may be the second one (the partial sweep led at 1e-3)
        bestvsbest=dict(methods=["baseline", "attnres", "mhar"], heads=[8], kv_heads=[4], seeds=[0],
                        lrs=[STUDY_SECOND_LR]),
    ),
    **STUDY_ANALYSIS,
    paper_deltas=(("hyper", None, "hyper"), ("attnres", None, "attnres"), ("mhar", 8, "mhar"),
                  ("mhar", 16, "mhar_over")),
    paper_scale="100m",
    # MHAR H=8 - attnres at 16 / 32 / 64-channel routing heads: the GPU ladder, the middle rung, the study
    width_rungs=(("ladder", "../ladder"), ("middle", "middle"), ("study100m", ".")),
    second_rate=("bestvsbest", "bestvsbest"),
    # MHAR H=8 - baseline at the paper's 100M and 350M shapes: this study and its 350M pair (STUDY350)
    scale_rungs=(("study100m", "."), ("study350m", "scale350m")),
)

#: The middle rung between the ladder's 16-channel heads and the study's 64: d=256, L=8, 8 heads of 32
#: channels, KV 4, FFN 768 (3d, as the 100M preset), T=2048: 8,393,472 parameters (baseline, tied
#: 8,192-token embeddings), so 2,562 steps of 65,536 tokens (167.9M) are 20.0 tokens per parameter.
MIDDLE_MODEL = dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=8,  # KV 4: the grids kv_heads axis
                    intermediate_size=768)
MIDDLE = Plan(
    name="middle",
    title="Middle rung: d=256, L=8, 32-channel heads on the study corpus, 20 tokens per parameter",
    preset="100m",
    steps=2562,
    model=MIDDLE_MODEL,
    recipe=STUDY_RECIPE,
    grids=dict(main=dict(methods=["baseline", "attnres", "mhar"], heads=[8], kv_heads=[4], seeds=[0, 1, 2])),
    **STUDY_ANALYSIS,
)

#: The paper's 350M shape (issue 33, item 6): d=1024, L=24, 16 attention heads of 64 channels, KV 8,
#: FFN 4096, T=1024; 385.9M parameters (baseline, tied 8,192-token embeddings; MHAR H=8 0.1M more).
#: The paper's 350M recipe ("350M/1B use sequence length 1024 and global batch 32"): 32 x 1024 =
#: 32,768 tokens a step, at the study's rate (5e-4, the paper's unified Table-main rate), 5% warm-up and
#: cosine to 0.1x. 3,052 steps are 100.0M tokens = 100.0M / 43.65M training tokens = 2.29 epochs of the
#: study corpus, 0.26 tokens per parameter (the paper's 20K steps: 655M tokens), so the pair reads
#: short-horizon gains. Two micro-batches of 16 rows a step: 32 rows of 1,024 at 24 layers do not fit an
#: 80 GB card with MHAR. An evaluation every 50 steps (2 x 32 x 1,024 held-out tokens) puts the
#: tail-mean's last 11 at steps 2,600-3,052 (every 50th and the last; inside the last quarter):
#: 452 steps x 32,768 = 14.8M tokens.
STUDY350_STEPS = 3052
STUDY350_RECIPE = {**STUDY_RECIPE, **dict(batch_size=32, seq_len=1024, micro_batch=16, eval_every=50,
                                          eval_batches=2, checkpoint_every=250)}
STUDY350 = Plan(
    name="study350m",
    title=("The paper's 350M shape (d=1024, L=24, 64-channel attention heads, KV 8; MHAR H=8: 128-channel "
           "routing heads) on the study corpus, 100M tokens a run"),
    preset="350m",  # d=1024, L=24, 16 heads, KV 8, FFN 4096, T=1024
    steps=STUDY350_STEPS,  # x 32,768 tokens = 100.0M tokens
    recipe=STUDY350_RECIPE,
    # H = KV = 8: the paper's choice at 350M (Table main, "MHAR (H=8)"); routing heads of d/H = 128 channels
    grids=dict(main=dict(methods=["baseline", "mhar"], heads=[8], kv_heads=[8], seeds=[0])),
    **{**STUDY_ANALYSIS, **dict(main_kv=8, eval_methods=("baseline", "mhar"), mcnemar_pairs=(("baseline", "mhar"),))},
    paper_deltas=(("mhar", 8, "mhar"),),
    paper_scale="350m",
    scale_rungs=(("study100m", ".."), ("study350m", ".")),  # the same row as STUDY's, from this folder
    # no single-head arm and one H: the order, per-KV optimum and slice-KL excess rows cannot be read
    core_claims=("deviation", "replication", "ceg"),
)

#: The 350M study (issue 52): the paper's 350M shape and recipe (Table main: d=1024, L=24, 16 heads of 64
#: channels, KV 8, FFN 4096, T=1024, global batch 32, lr 5e-4, 5% warm-up, cosine to 0.1x, AdamW (0.9, 0.95),
#: weight decay 0.1, clip 1.0, bf16) at a quarter of the paper's 20K steps: 5,000 x 32,768 = 163.8M tokens a
#: run, under one epoch of the corpus. A run must train, be captured and evaluated inside one session's 30
#: device minutes (a 350M checkpoint cannot leave the machine), and two sessions running lent no 4-GPU kind
#: until their device time was spent: on 2 H200s at the 4-GPU baseline's per-GPU speed (235k tokens/s) with
#: MHAR H=8 at 0.8x, the 10,000 steps first planned would take about 29 minutes of MHAR training alone
#: (results/study350m/README.md, "Why 5,000 steps"). 5,000 steps is what fits MHAR on 2 GPUs with the corpus build, capture and evaluation; every run of
#: the grid trains it, whatever its GPU count (never two schedules inside one paired comparison). The corpus
#: is built on that machine from its own code and documentation with the prose sources of the registry
#: corpus, carried (`mhar corpus image`, rules in mhar_probe/data/image.py), against the lock in
#: results/study350m/corpus/; its vocabulary is the lock's chosen size. An evaluation every 125 steps of
#: 8 x 32 x 1,024 held-out tokens: 41 evaluations, the last 11 (the tail-mean) at steps 3,750-5,000, the last
#: quarter as in the paper. Micro-batches of 8 rows: one per GPU on 4 GPUs, two on 2.
PAPER350_CORPUS = "corpus350"  # relative to the repository root on the device (git-ignored)
PAPER350_CARRIED = "corpus-prose"  # the prose sources of the registry corpus (mhar corpus build --sources ...), carried packed
PAPER350_LOCK = "results/study350m/corpus"
PAPER350_VOCAB = 65536  # the size the first build chose (results/study350m/corpus.md)
PAPER350_STEPS = 5_000
PAPER350_RECIPE = {**STUDY_RECIPE, **dict(batch_size=32, seq_len=1024, micro_batch=8, eval_every=125,
                                          eval_batches=8, checkpoint_every=2500, corpus=PAPER350_CORPUS,
                                          vocab_size=PAPER350_VOCAB)}
PAPER350 = Plan(
    name="paper350m",
    title=("The paper's 350M shape and recipe (d=1024, L=24, KV 8; MHAR H=8) at 5,000 steps (163.8M tokens a run) "
           "on a corpus built from the GPU machine's own code and documentation"),
    preset="350m",
    steps=PAPER350_STEPS,
    recipe=PAPER350_RECIPE,
    grids=dict(
        main=dict(methods=["baseline", "attnres", "mhar"], heads=[8], kv_heads=[8], seeds=[0, 1, 2]),
        extra=dict(methods=["hyper", "mhar"], heads=[16], kv_heads=[8], seeds=[0]),  # H = 2 KV: over-splitting
    ),
    **{**STUDY_ANALYSIS, **dict(main_kv=8)},
    paper_deltas=(("hyper", None, "hyper"), ("attnres", None, "attnres"), ("mhar", 8, "mhar"),
                  ("mhar", 16, "mhar_over")),
    paper_scale="350m",
    paper_steps=20_000,
    extra_claims=("over_split", "gain_path", "mcnemar"),
    files_before_runs=True,  # its runs arrive from device calls, one a session
)

PLANS = {p.name: p for p in (DEMO, LADDER, STUDY, MIDDLE, STUDY350, PAPER350)}
