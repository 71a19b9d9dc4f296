"""`stats mcnemar|ceg|tails` on fixture eval files and synthetic run directories: through the one
command line (`mhar_probe.cli.main`: its error handler gives exit status 2), and as the library
functions the commands call, whose returned data are the files the commands write."""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from analysis.stats.ceg import ceg
from analysis.stats.errors import StatsError
from analysis.stats.gain import compute_equivalent_gain
from analysis.stats.paired_eval import mcnemar_eval_dirs
from analysis.stats.tails import tails
from mhar_probe.cli import main
from mhar_probe.cli.stats import add_stats_subparser

DATA = Path(__file__).parent / "data" / "lm_eval"


def _run(root, name, method, preset, seed, lr, scale, offset, extra=0.0, steps=400, every=20):
    d = root / name
    d.mkdir()
    rows = []
    for step in range(0, steps + 1, 10):
        flops = step * scale * 1e12 * (1 + extra)
        rec = dict(step=step, tokens=step * 1000, flops=flops, lr=lr, loss=4.0, grad_norm=1.0, tokens_per_s=1.0)
        if step % every == 0 and step > 0:
            rec["val_loss"] = 30.0 * (step * scale * 1e12) ** -0.08 + offset
        rows.append(rec)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "train_config.json").write_text(json.dumps(dict(method=method, preset=preset, seed=seed, lr=lr,
                                                         heads=4 if method != "baseline" else None, kv_heads=4)))
    return str(d)


def test_parser_wiring():
    parser = argparse.ArgumentParser(prog="mhar")
    add_stats_subparser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stats", "mcnemar", "a", "b", "--task", "gsm8k", "--metric", "acc"])
    assert args.func.__name__ == "cmd_mcnemar" and args.task == ["gsm8k"]
    assert parser.parse_args(["stats", "ceg", "r1", "--alpha", "0.089"]).func.__name__ == "cmd_ceg"
    assert parser.parse_args(["stats", "tails", "r1"]).func.__name__ == "cmd_tails"


def test_mcnemar_cli_writes_and_refuses_overwrite(tmp_path, capsys):
    argv = ["stats", "mcnemar", str(DATA / "new" / "arm_a"), str(DATA / "new" / "arm_b"), "--n-boot", "200",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    assert "toy_gen" in capsys.readouterr().out
    assert json.loads((tmp_path / "mcnemar.json").read_text())["rows"]
    assert main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(argv + ["--overwrite"]) == 0


def test_tails_cli(tmp_path, capsys):
    runs = []
    for seed in (1, 2, 3):
        runs.append(_run(tmp_path, f"b{seed}", "baseline", "100m", seed, 1e-3, 1.0, 0.01 * seed))
        runs.append(_run(tmp_path, f"m{seed}", "mhar", "100m", seed, 1e-3, 1.0, 0.01 * seed - 0.05 + 0.001 * seed))
    runs.append(_run(tmp_path, "b_lr", "baseline", "100m", 1, 5e-4, 1.0, 0.2))
    out = tmp_path / "tails.json"
    assert main(["stats", "tails", *runs, "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    (row,) = [r for r in doc["seed_deltas"] if r["lr"] == 1e-3]
    assert row["mean"] == pytest.approx(-0.05 + 0.002) and row["n"] == 3
    assert {r["method"]: r["best_lr"] for r in doc["best_vs_best"]} == {"baseline": 1e-3, "mhar": 1e-3}
    assert main(["stats", "tails", *runs, "--k", "50"]) == 2
    assert "needs the last k=50" in capsys.readouterr().err
    # CEG names the seeds each mean is over: all three here, one when only seed 2's runs are given
    capsys.readouterr()
    assert main(["stats", "ceg", *runs, "--alpha", "0.089"]) == 0
    assert "1, 2, 3; 1, 2, 3" in capsys.readouterr().out
    assert main(["stats", "ceg", *[r for r in runs if r.endswith("2")], "--alpha", "0.089"]) == 0
    printed = capsys.readouterr().out
    assert "2; 2" in printed and "1, 2" not in printed


def test_a_single_seed_pair_prints_its_mean_and_no_spread(tmp_path):
    """One seed pair has a delta but no sd, interval or p: the table says '-', not nan."""
    runs = [_run(tmp_path, "b1", "baseline", "100m", 1, 1e-3, 1.0, 0.01),
            _run(tmp_path, "m1", "mhar", "100m", 1, 1e-3, 1.0, -0.04),
            _run(tmp_path, "b2", "baseline", "100m", 2, 1e-3, 1.0, 0.02),
            _run(tmp_path, "a1", "attnres", "100m", 1, 1e-3, 1.0, -0.02),
            _run(tmp_path, "a2", "attnres", "100m", 2, 1e-3, 1.0, -0.005)]
    lines = tails(runs).lines()
    rows = {line.split()[1]: line.split() for line in lines if line.startswith("100m ")}
    assert rows["mhar"][5:] == ["1", "-0.0500", "-", "-", "-", "-", "-", "-"]
    assert rows["attnres"][5] == "2" and "-" not in rows["attnres"][7:10] and "nan" not in " ".join(lines)
    assert "n = 1: one seed pair, so no spread, interval or p (-)" in lines


def test_a_run_too_short_for_the_tail_is_skipped_with_a_note_not_fatal_to_the_others(tmp_path, capsys):
    """Issue 54: a run with 6 evaluations after step 0 (as 150 steps evaluated every 25) in `mhar stats
    tails runs/*` is skipped with a note; the others' numbers are those of the runs alone. Alone,
    it is refused with the same reason; `mhar train` says it has no tail-mean (`tail_text`)."""
    from mhar_probe.cli.train import tail_text

    runs = [_run(tmp_path, f"{m}{seed}", m, "tiny", seed, 1e-3, 1.0, 0.01 * seed - 0.05 * (m == "mhar"))
            for seed in (1, 2) for m in ("baseline", "mhar")]
    short = _run(tmp_path, "short", "mhar", "tiny", 3, 1e-3, 1.0, 0.0, steps=180, every=30)
    assert main(["stats", "tails", *runs, "--json", str(tmp_path / "alone.json")]) == 0
    capsys.readouterr()
    assert main(["stats", "tails", *runs, short, "--json", str(tmp_path / "with.json")]) == 0
    err = capsys.readouterr().err
    assert f"skipped {short}: {short}/metrics.jsonl has 6 evaluations after step 0; the tail-mean needs the last " \
           "k=11" in err
    assert json.loads((tmp_path / "with.json").read_text()) == json.loads((tmp_path / "alone.json").read_text())
    assert main(["stats", "tails", short]) == 2
    assert "has 6 evaluations after step 0" in capsys.readouterr().err
    assert tail_text(dict(tail_mean_val_loss=None, tail_k=11, tail_evaluations=6)) == (
        "no tail-mean: the run has 6 evaluations after step 0; the tail-mean needs the last k=11")
    assert tail_text(dict(tail_mean_val_loss=5.5, tail_k=11, tail_evaluations=12)) == "tail-mean val loss 5.5000"


def test_ceg_cli_recovers_alpha_and_gain(tmp_path, capsys):
    runs = []
    for preset, scale in (("100m", 1.0), ("350m", 4.0), ("1b", 16.0)):
        runs.append(_run(tmp_path, f"b_{preset}", "baseline", preset, 0, 1e-3, scale, 0.0))
        runs.append(_run(tmp_path, f"m_{preset}", "mhar", preset, 0, 1e-3, scale, -0.05, extra=0.007))
    out = tmp_path / "ceg.json"
    assert main(["stats", "ceg", *runs, "--alpha", "0.15", "--divide-routing", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["fits"]["envelope"]["alpha"] == pytest.approx(0.08, rel=0.05)
    assert doc["fits"]["envelope"]["r2"] > 0.99
    row = [r for r in doc["rows"] if r["scale"] == "100m"][0]
    assert row["routing_fraction"] == pytest.approx(0.007)
    assert row["ceg"]["alpha=0.15"] == pytest.approx(ceg(row["L_base"], row["L_method"], 0.15, 0.007))
    assert row["low"] <= row["ceg"]["envelope"] <= row["high"]
    assert "compute-equivalent gain" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["stats", "ceg"])
    assert main(["stats", "ceg", runs[0]]) == 2


def test_a_shell_glob_over_a_sweep_folder_skips_what_is_not_a_run(tmp_path, capsys):
    """`mhar stats tails runs/*` on a sweep's folder: its manifest.json and evals/ are skipped,
    each with a note, and the numbers are those of the runs alone."""
    runs = tmp_path / "runs"
    runs.mkdir()
    for seed in (1, 2):
        _run(runs, f"b{seed}", "baseline", "100m", seed, 1e-3, 1.0, 0.01 * seed)
        _run(runs, f"m{seed}", "mhar", "100m", seed, 1e-3, 1.0, 0.01 * seed - 0.05)
    (runs / "manifest.json").write_text(json.dumps({"runs": {"b1": {"status": "done"}}}, indent=2))
    (runs / "evals" / "b1").mkdir(parents=True)
    glob = sorted(str(p) for p in runs.iterdir())
    alone = tmp_path / "alone.json"
    assert main(["stats", "tails", *[g for g in glob if "/evals" not in g and "manifest" not in g],
                 "--json", str(alone)]) == 0
    capsys.readouterr()
    out = tmp_path / "tails.json"
    assert main(["stats", "tails", *glob, "--json", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"skipped {runs / 'manifest.json'}: not a run" in err and f"skipped {runs / 'evals'}: not a run" in err
    assert json.loads(out.read_text()) == json.loads(alone.read_text())
    assert main(["stats", "ceg", *glob]) == 0  # baseline and MHAR at one scale: a table, no fit error


def test_a_manifest_given_alone_is_named_as_what_it_is(tmp_path, capsys):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"runs": {}}, indent=2))
    assert main(["stats", "tails", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a run directory" in err and "not valid JSON" not in err
    assert main(["stats", "tails", str(tmp_path / "evals"), str(manifest)]) == 2
    assert "does not exist" in capsys.readouterr().err


def _json_roundtrip(doc):
    return json.loads(json.dumps(doc))


def test_mcnemar_function_returns_what_the_command_writes_and_prints(tmp_path, capsys):
    a, b = str(DATA / "new" / "arm_a"), str(DATA / "new" / "arm_b")
    assert main(["stats", "mcnemar", a, b, "--n-boot", "200", "--seed", "3", "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    result = mcnemar_eval_dirs(a, b, n_boot=200, seed=3)
    assert result.written == [] and not (tmp_path / "fn").exists()  # no `out`: nothing written
    doc = json.loads((tmp_path / "cli" / "mcnemar.json").read_text())
    rows = [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in r.as_dict().items()}
            for r in result.comparison.rows]
    assert doc["rows"] == _json_roundtrip(rows) and doc["notes"] == result.comparison.notes
    assert {r.task for r in result.comparison.rows} >= {"toy_gen"}
    written = mcnemar_eval_dirs(a, b, n_boot=200, seed=3, out=tmp_path / "fn").written
    assert [p.name for p in written] == ["mcnemar.csv", "mcnemar.json", "mcnemar.tex"]
    assert (tmp_path / "fn" / "mcnemar.csv").read_text() == (tmp_path / "cli" / "mcnemar.csv").read_text()
    assert printed == "".join(line.replace(str(tmp_path / "fn"), str(tmp_path / "cli")) + "\n"
                              for line in mcnemar_eval_dirs(a, b, n_boot=200, seed=3, out=tmp_path / "fn",
                                                            overwrite=True).lines())
    with pytest.raises(StatsError, match="--n-boot must be positive"):
        mcnemar_eval_dirs(a, b, n_boot=0)


def test_tails_and_ceg_functions_return_what_the_commands_write(tmp_path, capsys):
    runs = []
    for preset, scale in (("100m", 1.0), ("350m", 4.0)):
        for seed in (1, 2):
            runs.append(_run(tmp_path, f"b_{preset}{seed}", "baseline", preset, seed, 1e-3, scale, 0.01 * seed))
            runs.append(_run(tmp_path, f"m_{preset}{seed}", "mhar", preset, seed, 1e-3, scale, -0.04 + 0.003 * seed,
                             extra=0.01))
    runs.append(_run(tmp_path, "b_lr", "baseline", "100m", 1, 5e-4, 1.0, 0.2))
    assert main(["stats", "tails", *runs, "--k", "9", "--json", str(tmp_path / "tails.json")]) == 0
    printed = capsys.readouterr().out
    t = tails(runs, k=9)
    doc = json.loads((tmp_path / "tails.json").read_text())
    assert doc == _json_roundtrip(t.as_dict())
    assert [r["tail_mean"] for r in doc["runs"]] == [r["tail_mean"] for r in t.runs]
    assert [r["mean"] for r in doc["seed_deltas"]] == [r.mean for r in t.seed_deltas]
    assert {r["method"]: r["best_lr"] for r in doc["best_vs_best"]} == {r.method: r.best_lr for r in t.best_vs_best}
    assert printed == "".join(f"{line}\n" for line in t.lines()) + f"wrote {tmp_path / 'tails.json'}\n"

    assert main(["stats", "ceg", *runs, "--alpha", "0.1", "--json", str(tmp_path / "ceg.json")]) == 0
    printed = capsys.readouterr().out
    g = compute_equivalent_gain(runs, alpha=[0.1])
    doc = json.loads((tmp_path / "ceg.json").read_text())
    assert doc == _json_roundtrip(g.as_dict())
    assert doc["fits"]["envelope"]["alpha"] == g.fits["envelope"].alpha == pytest.approx(0.08, rel=0.05)
    assert [r["ceg"] for r in doc["rows"]] == [r.ceg for r in g.rows] and len(g.rows) == 2
    assert g.entries[0]["routing_fraction"] == pytest.approx(0.01)
    assert printed == "".join(f"{line}\n" for line in g.lines()) + f"wrote {tmp_path / 'ceg.json'}\n"
    with pytest.raises(StatsError, match="no baseline runs"):
        compute_equivalent_gain(runs, baseline="control")


def test_no_statistics_entry_point_besides_mhar():
    """One error handler: analysis keeps no argparse, no `main`, no `python -m` entry of its own."""
    root = Path(__file__).resolve().parents[1]
    for package in ("analysis", "figures"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text()
            assert "argparse" not in text and "__main__" not in text and "def main(" not in text, path
