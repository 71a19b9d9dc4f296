"""benchmarks/train_throughput/levers_table.py: issue 55's lever table in results.md is the one the
committed `*_levers_*.json` files render, and the renderer reads the arms it names."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks" / "train_throughput"


@pytest.fixture(scope="module")
def lt():
    spec = importlib.util.spec_from_file_location("levers_table", HERE / "levers_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("card", ["h100", "h200"])
def test_results_page_holds_the_table_the_files_render(lt, card):
    files = sorted(HERE.glob(f"{card}_levers_*.json"))
    assert files, f"no {card} levers results files"
    assert lt.render(files) in (HERE / "results.md").read_text()


def test_the_h100_bullets_points_are_each_lever_against_its_own_processes_stored_design(lt):
    """results.md's "lose 2.2 points at 8k words, ..." for each lever: (stored - lever) x 100 in the
    process that timed the lever, per configuration in table order, "tie" where they round equal."""
    docs = [json.loads(p.read_text()) for p in sorted(HERE.glob("h100_levers_*.json"))]
    text = " ".join((HERE / "results.md").read_text().split())
    for arm in list(lt.ARMS)[1:]:
        points = []
        for key in lt.ORDER:
            doc = next(d for d in docs if lt.config_key(d["meta"]) == key and arm in {r["arm"] for r in d["results"]})
            by_arm = {r["arm"]: r for r in doc["results"]}
            points.append(round(by_arm["mhar"]["vs_baseline"], 3) - round(by_arm[arm]["vs_baseline"], 3))
        said = [f"{100 * p:.1f}" if round(100 * p, 1) else "tie" for p in points]
        assert said[0] != "tie", arm
        if "tie" in said:
            assert f"{said[0]} points at 8k words, {said[1]} at 100M, tie at 350M and lose {said[3]} at 1B" in text
        else:
            assert f"{said[0]}, {said[1]}, {said[2]} and {said[3]}" in text, (arm, said)


def test_a_configuration_split_over_processes_is_a_row_a_process_each_beside_its_stored_design(lt, tmp_path):
    """Six 1B arms do not fit an 80 GB card: one process per lever, each with the baseline and the
    stored design; the table gives each its row, "-" for the arms it did not time, and a card whose
    files leave a lever untimed, or a process without the stored design, is refused."""
    levers = list(lt.ARMS)[1:]
    paths = []
    for i, lever in enumerate(levers):
        results = [dict(arm=a, tokens_per_s=100.0 + i, vs_baseline=v, vs_baseline_range=[v, v],
                        memory_vs_baseline=1.0, peak_memory_gb=3.0)
                   for a, v in (("baseline", 1.0), ("mhar", 0.75), (lever, 0.7 - i / 100))]
        doc = dict(meta=dict(device="Card", args=dict(presets=["1b"], vocab=151936)), results=results)
        paths.append(tmp_path / f"x_levers_1b_{i}.json")
        paths[-1].write_text(json.dumps(doc))
    rows = lt.render(paths).splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| 1B ({lt.ARMS[a]})" for a in levers]
    assert rows[1].split(" | ")[1:5] == ["101", "0.750 (0.750-0.750)", "-", "0.690 (0.690-0.690)"]
    paths[2].unlink()
    with pytest.raises(SystemExit, match="lack the arms"):
        lt.render(paths[:2] + paths[3:])
    doc = json.loads(paths[0].read_text())
    doc["results"] = [r for r in doc["results"] if r["arm"] != "mhar"]
    paths[0].write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match=r"lacks the arms \['mhar'\]"):
        lt.render(paths[:2] + paths[3:])


def test_a_row_is_its_files_numbers(lt, tmp_path):
    """A hand-built file: the baseline's tokens/s and peak GB, each arm's ratio and range, in order."""
    arms = ["baseline", *lt.ARMS]
    results = [dict(arm=a, tokens_per_s=1000.0 + i, vs_baseline=1 - i / 10, vs_baseline_range=[0.5, 1.0],
                    memory_vs_baseline=1 + i / 100, peak_memory_gb=2.0) for i, a in enumerate(arms)]
    doc = dict(meta=dict(args=dict(presets=["350m"], vocab=151936)), results=results)
    path = tmp_path / "x_levers_350m.json"
    path.write_text(json.dumps(doc))
    last = lt.render([path]).splitlines()[-1]
    assert last == ("| 350M | 1,000 | 0.900 (0.500-1.000) | 0.800 (0.500-1.000) | 0.700 (0.500-1.000) | "
                    "0.600 (0.500-1.000) | 0.500 (0.500-1.000) | 2.00 | 1.010 / 1.020 / 1.030 / 1.040 / 1.050 |")
    doc["results"] = results[:3]
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="lack the arms"):
        lt.render([path])


def test_the_h100_bullet_beside_the_fold_table_is_both_files_numbers(lt):
    """results.md's "The same H100 step as the fold table below, nine days on": each configuration's
    baseline tokens/s and MHAR / baseline, in the levers files (1B: the douts-in-place process) and
    in the fold table's h100_step_*.json, in the order 100M (8k words), 100M, 350M, 1B."""
    text = " ".join((HERE / "results.md").read_text().split())
    suffix = {"1b": "_stack_douts"}
    now, then = [], []
    for key in lt.ORDER:
        for prefix, kept in (("h100_levers_", now), ("h100_step_", then)):
            name = prefix + key + (suffix.get(key, "") if prefix == "h100_levers_" else "") + ".json"
            by_arm = {r["arm"]: r for r in json.loads((HERE / name).read_text())["results"]}
            kept.append((by_arm["baseline"]["tokens_per_s"], by_arm["mhar"]["vs_baseline"]))
    said = (" / ".join(f"{t:,.0f}" for t, _ in now) + " against " + " / ".join(f"{t:,.0f}" for t, _ in then)
            + " at 09d3627, and MHAR / baseline " + " / ".join(f"{r:.3f}" for _, r in now) + " against "
            + " / ".join(f"{r:.3f}" for _, r in then))
    assert f"baseline tokens/s {said}." in text
