"""Hostile sweep over the files `mhar` commands read: damage each file kind in several ways and
tally how each command takes it.

    PYTHONPATH=$PWD .venv/bin/python tests/hostile/sweep.py [--work DIR] [--timeout 120] [--only SUBSTR ...]

It trains one tiny MHAR run (and captures its routing dataset), then for every attempt copies
it, damages one file (truncated, binary garbage, empty, wrong JSON type, wrong field type,
absurd size, NaN, wrong shape, renamed dimension, ...), runs the command in a subprocess and
classifies the outcome:

    clean      exit 2, one line on stderr, no traceback, the input files unchanged
    traceback  a Python traceback, or any exit status but 0 / 2
    accepted   exit 0: the damage went unnoticed
    hang       still running after --timeout seconds (killed)
    unclear    exit 2 but several stderr lines, or an input file changed

It prints one line per attempt and the tally; exit status 0 when every attempt was clean.
Not part of the test suite (it takes minutes); rerun it after changing a reader.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable

TINY = ["--preset", "tiny", "--layers", "1", "--hidden-size", "32", "--attn-heads", "2", "--kv-heads", "1",
        "--ffn", "64", "--seq-len", "16", "--batch-size", "2", "--vocab-size", "300",
        "--corpus-max-bytes", "60000", "--eval-batches", "1", "--no-progress"]
DATE = "2026-01-01T00-00-00.000001"


# ----------------------------------------------------------------------------- damage
def truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: max(1, p.stat().st_size // 2)])


def garbage(p: Path) -> None:
    p.write_bytes(bytes(range(256)) * 16)


def empty(p: Path) -> None:
    p.write_bytes(b"")


def json_list(p: Path) -> None:
    p.write_text("[1, 2, 3]")


def set_json(**changes) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        p.write_text(json.dumps({**json.loads(p.read_text()), **changes}))
    return apply


def nan_json(key: str) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        doc = json.loads(p.read_text())
        doc[key] = float("nan")
        p.write_text(json.dumps(doc))  # writes the NaN literal
    return apply


def metrics_line(**changes) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        lines = p.read_text().splitlines()
        i = max(j for j, ln in enumerate(lines) if '"val_loss"' in ln)
        lines[i] = json.dumps({**json.loads(lines[i]), **changes})
        p.write_text("\n".join(lines) + "\n")
    return apply


def weights(change: str) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        import torch
        from safetensors.torch import load_file, save_file

        t = load_file(p)
        if change == "int32":
            t = {k: v.to(torch.int32) for k, v in t.items()}
        elif change == "nan":
            t = {k: torch.full_like(v, float("nan")) for k, v in t.items()}
        elif change == "inf-one":
            k = sorted(t)[0]
            t[k] = t[k].clone()
            t[k].view(-1)[0] = float("inf")
        elif change == "drop-routing":
            t = {k: v for k, v in t.items() if "sites." not in k}
        elif change == "drop-one":
            t.pop(sorted(t)[-1])
        elif change == "extra":
            t["model.bogus.weight"] = torch.zeros(2)
        elif change == "shape":
            k = next(k for k in sorted(t) if k.endswith("q_proj.weight"))
            t[k] = torch.zeros(t[k].shape[0] + 1, t[k].shape[1])
        elif change == "float64":
            t = {k: v.double() for k, v in t.items()}
        save_file(t, p, metadata={"format": "pt"})
    return apply


def dataset(change: str) -> Callable[[Path], None]:
    def apply(p: Path) -> None:
        import numpy as np
        import xarray as xr

        with xr.open_dataset(p, engine="h5netcdf") as ds:
            ds = ds.load()
        if change == "rename-dim":
            ds = ds.rename({"head": "heads"})
        elif change == "nan":
            ds["weight_mean"][:] = np.nan
        elif change == "inf":
            ds["weight_mean"][:] = np.inf
        elif change == "drop-var":
            ds = ds.drop_vars("weight_mean")
        elif change == "bad-coord":
            ds = ds.assign_coords(site_num_sources=("site", ds["site_num_sources"].values + 100))
        elif change == "out-of-range":
            ds["weight_mean"][:] = 7.0
        elif change == "transpose":
            ds["weight_mean"] = ds["weight_mean"].transpose("head", "source", "site")
        p.unlink()
        ds.to_netcdf(p, engine="h5netcdf")
    return apply


# ----------------------------------------------------------------------------- attempts
#: (file kind, file relative to the copy, damage name, damage, argv with RUN / TMP placeholders)
Attempt = tuple[str, str, str, Callable[[Path], None], list[str]]


def attempts() -> list[Attempt]:
    out: list[Attempt] = []
    config_damage = [("truncate", truncate), ("garbage", garbage), ("empty", empty), ("list", json_list),
                     ("layers-1e12", set_json(num_hidden_layers=10**12)), ("hidden-1e9", set_json(hidden_size=10**9)),
                     ("hidden-str", set_json(hidden_size="wide")), ("vocab-0", set_json(vocab_size=0)),
                     ("eps-nan", nan_json("rms_norm_eps")), ("heads-float", set_json(num_attention_heads=2.5))]
    for name, dmg in config_damage:
        out.append(("config.json", "RUN/config.json", name, dmg, ["info", "RUN"]))
        out.append(("config.json", "RUN/config.json", name, dmg, ["capture", "RUN", "--out", "TMP/r.nc"]))
    for name, dmg in config_damage[:3] + config_damage[4:7]:
        out.append(("config.json", "BASE/config.json", name, dmg, ["convert", "BASE", "TMP/conv"]))
    w = [("truncate", truncate), ("garbage", garbage), ("empty", empty)] + [
        (c, weights(c)) for c in ("int32", "nan", "inf-one", "drop-routing", "drop-one", "extra", "shape")]
    for name, dmg in w:
        out.append(("weights", "RUN/model.safetensors", name, dmg, ["capture", "RUN", "--out", "TMP/r.nc"]))
        out.append(("weights", "RUN/model.safetensors", name, dmg, ["probe", "RUN", "--out", "TMP/pr"]))
    for name, dmg in [("truncate", truncate), ("int32", weights("int32")), ("nan", weights("nan")),
                      ("drop-one", weights("drop-one")), ("shape", weights("shape"))]:
        out.append(("weights", "BASE/model.safetensors", name, dmg, ["convert", "BASE", "TMP/conv"]))
    for name, dmg in [("int32", weights("int32")), ("nan", weights("nan"))]:
        out.append(("weights", "RUN/model.safetensors", name, dmg,
                    ["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2", "--out", "TMP/ev"]))
    tc = [("garbage", garbage), ("list", json_list), ("seq-str", set_json(seq_len="long")),
          ("corpus-int", set_json(corpus=5)), ("steps-neg", set_json(steps=-1)), ("lr-nan", nan_json("lr"))]
    for name, dmg in tc:
        out.append(("train_config.json", "RUN/train_config.json", name, dmg, ["capture", "RUN", "--out", "TMP/r.nc"]))
        out.append(("train_config.json", "RUN/train_config.json", name, dmg, ["train", "--out", "RUN", "--resume",
                                                                              "--steps", "3"]))
        out.append(("train_config.json", "RUN/train_config.json", name, dmg, ["stats", "tails", "RUN", "--k", "1"]))
    for name, dmg in [("garbage", garbage), ("step-1000", set_json(step=1000)), ("step-neg", set_json(step=-3)),
                      ("step-str", set_json(step="2")), ("step-float", set_json(step=1.5)), ("list", json_list),
                      ("tokens-nan", nan_json("tokens"))]:
        out.append(("state.json", "RUN/checkpoint/state.json", name, dmg, ["train", "--out", "RUN", "--resume",
                                                                           "--steps", "3"]))
    for name, dmg in [("garbage", garbage), ("truncate", truncate), ("val-1e308", metrics_line(val_loss=1e308)),
                      ("flops-1e308", metrics_line(flops=1e308)), ("val-nan", metrics_line(val_loss=float("nan"))),
                      ("step-str", metrics_line(step="x")), ("val-str", metrics_line(val_loss="low"))]:
        out.append(("metrics.jsonl", "RUN/metrics.jsonl", name, dmg, ["stats", "ceg", "RUN", "TMP/m"]))
        out.append(("metrics.jsonl", "RUN/metrics.jsonl", name, dmg, ["stats", "tails", "RUN", "--k", "1"]))
    for name, dmg in [("garbage", garbage), ("list", json_list), ("finished-str", set_json(finished="yes")),
                      ("tail-str", set_json(tail_mean_val_loss="low"))]:
        out.append(("summary.json", "RUN/summary.json", name, dmg, ["info", "RUN"]))
        out.append(("summary.json", "RUNS/bad/summary.json", name, dmg, ["figures", "RUNS", "--out", "TMP/figs"]))
    for name, dmg in [("garbage", garbage), ("truncate", truncate), ("empty", empty)]:
        out.append(("samples", "TMP/b/SAMPLES", name, dmg, ["stats", "mcnemar", "TMP/a", "TMP/b"]))
    for name, dmg in [("garbage", garbage), ("truncate", truncate), ("list", json_list),
                      ("runs-str", set_json(runs="x"))]:
        out.append(("manifest.json", "TMP/sw/manifest.json", name, dmg,
                    ["sweep", "--out", "TMP/sw", "--methods", "baseline", "--steps", "2", "--dry-run"]))
    for name, dmg in [("garbage", garbage), ("truncate", truncate)] + [
            (c, dataset(c)) for c in ("rename-dim", "nan", "inf", "drop-var", "bad-coord", "out-of-range", "transpose")]:
        out.append(("routing.nc", "RUN/routing.nc", name, dmg, ["probe", "RUN/routing.nc", "--out", "TMP/pr"]))
    ev = ["eval", "RUN", "--tasks", "mhar_lastword", "--limit", "2", "--out", "TMP/ev"]
    for name, dmg in [("garbage", garbage), ("truncate", truncate), ("list", json_list)]:
        out.append(("tokenizer.json", "RUN/tokenizer.json", name, dmg, ["capture", "RUN", "--out", "TMP/r.nc"]))
        out.append(("tokenizer.json", "RUN/tokenizer.json", name, dmg, ev))
    for name, dmg in [("garbage", garbage), ("list", json_list), ("fingerprint-int", set_json(fingerprint=7))]:
        out.append(("corpus.json", "RUN/corpus.json", name, dmg, ev))
    for name, dmg in [("seq-str", set_json(seq_len="long")), ("garbage", garbage)]:
        out.append(("train_config.json", "RUN/train_config.json", name, dmg, ev))
    return out


# ----------------------------------------------------------------------------- running
def digest(root: Path, skip: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and skip not in p.parents and p.name != ".mhar-lock"}


def mhar(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """`mhar ARGV` in a fresh interpreter: (exit status or None when killed at `timeout`, stderr)."""
    try:
        done = subprocess.run([sys.executable, "-m", "mhar_probe.cli", *argv], capture_output=True, text=True,
                              env=env, timeout=timeout, errors="replace")
        return done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""


def mhar_forked(argv: list[str], env: dict[str, str], timeout: float, scratch: Path) -> tuple[int | None, str]:
    """`mhar ARGV` in a child forked from this process, which has imported the package once
    (a fresh interpreter spends most of an attempt importing torch and transformers); the same
    (exit status or None, stderr) as `mhar`. The child's stdout and stderr go to files."""
    err_path, out_path = scratch / "stderr.txt", scratch / "stdout.txt"
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.environ.update(env)
            for fd, path in ((1, out_path), (2, err_path)):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(f, fd)
                os.close(f)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            from mhar_probe.cli import main as cli_main

            try:
                code = int(cli_main(argv) or 0)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc: int | None = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            rc = None
            break
        time.sleep(0.05)
    return rc, err_path.read_text(errors="replace") if err_path.exists() else ""


def progress_line(line: str) -> bool:
    return "it/s]" in line or "%|" in line or line.startswith(("INFO", "WARNING")) or "Warning" in line


def classify(rc: int | None, err: str, changed: bool) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not progress_line(ln)]
    if rc is None:
        return "hang"
    if "Traceback" in err or rc not in (0, 2):
        return "traceback"
    if rc == 0:
        return "accepted"
    return "clean" if len(lines) == 1 and not changed else "unclear"


def setup(work: Path, env: dict[str, str], timeout: float) -> Path:
    run = work / "run"
    if not (run / "routing.nc").exists():
        shutil.rmtree(run, ignore_errors=True)
        for argv in (["train", "--out", str(run), *TINY, "--method", "mhar", "--steps", "2", "--eval-every", "1",
                      "--checkpoint-every", "1"],
                     ["capture", str(run), "--tokens", "64", "--batch-size", "2", "--slices", "2", "--draws", "2",
                      "--no-progress"]):
            rc, err = mhar(argv, env, 10 * timeout)
            if rc != 0:
                sys.exit(f"setup failed: mhar {' '.join(argv)}\n{err}")
    base = work / "base"
    if not base.exists():
        from transformers import Qwen3Config, Qwen3ForCausalLM

        Qwen3ForCausalLM(Qwen3Config(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=8, intermediate_size=64)).save_pretrained(base)
    return run


def prepare(case: Path, run: Path, base: Path) -> None:
    """The inputs every attempt may use, fresh in `case`."""
    shutil.copytree(run, case / "run")
    shutil.copytree(base, case / "base")
    (case / "tmp").mkdir()
    shutil.copytree(run, case / "tmp" / "m")
    for name in ("good", "bad"):
        shutil.copytree(run, case / "runs" / name)
    item = [{"doc_id": i, "filter": "none", "metrics": ["acc"], "acc": i % 2} for i in range(4)]
    for arm in ("a", "b"):
        d = case / "tmp" / arm
        d.mkdir()
        (d / f"results_{DATE}.json").write_text(json.dumps({"results": {"toy": {"acc,none": 0.5}}}))
        (d / f"samples_toy_{DATE}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in item))
    (case / "tmp" / "sw").mkdir()
    (case / "tmp" / "sw" / "manifest.json").write_text(json.dumps({"format": 1, "grid": {}, "runs": []}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before an attempt counts as a hang")
    ap.add_argument("--only", nargs="+", default=None, help="run only attempts whose label contains one of these")
    ap.add_argument("--subprocess", action="store_true",
                    help="run each attempt in a fresh interpreter instead of a forked child (slower)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="mhar-hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MHAR_CACHE_DIR": str(work / "cache"), "TRITON_INTERPRET": "1"}
    run = setup(work, env, args.timeout)  # in subprocesses: this process computes nothing before it forks
    if not args.subprocess:
        os.environ.update(env)
        import mhar_probe.cli  # noqa: F401  (imported once, before the forks)
        import mhar_probe.cli.stats  # noqa: F401
        import mhar_probe.cli.figures  # noqa: F401
        import lm_eval.models.huggingface  # noqa: F401
    tally: Counter = Counter()
    rows = []
    for i, (kind, target, name, damage, argv) in enumerate(attempts()):
        label = f"{kind}:{name} -> mhar {' '.join(argv[:2])}"
        if args.only and not any(o in label for o in args.only):
            continue
        case = work / f"case{i}"
        shutil.rmtree(case, ignore_errors=True)
        prepare(case, run, work / "base")
        places = {"RUNS": case / "runs", "RUN": case / "run", "BASE": case / "base", "TMP": case / "tmp"}

        def resolve(word: str) -> str:
            for key, path in places.items():  # RUNS before RUN
                word = word.replace(key, str(path))
            return word.replace("SAMPLES", f"samples_toy_{DATE}.jsonl")

        damage(Path(resolve(target)))
        before = digest(case, case / "tmp" / "pr")
        words = [resolve(w) for w in argv]
        rc, err = (mhar(words, env, args.timeout) if args.subprocess
                   else mhar_forked(words, env, args.timeout, work))
        after = digest(case, case / "tmp" / "pr")
        changed = any(after.get(k) != v for k, v in before.items())
        verdict = classify(rc, err, changed)
        tally[verdict] += 1
        last = next((ln for ln in reversed(err.splitlines()) if ln.strip()), "")
        rows.append(dict(label=label, verdict=verdict, rc=rc, last=last[:200]))
        print(f"{verdict:9s} rc={rc!s:4s} {label}: {last[:160]}", flush=True)
        shutil.rmtree(case, ignore_errors=True)
    (work / "tally.json").write_text(json.dumps(dict(tally=tally, rows=rows), indent=1))
    print(f"\n{sum(tally.values())} attempts: " + ", ".join(f"{k} {v}" for k, v in tally.most_common()))
    print(f"details: {work / 'tally.json'}")
    return 0 if set(tally) <= {"clean"} else 1


if __name__ == "__main__":
    sys.exit(main())
