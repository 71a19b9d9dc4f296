"""benchmarks/capture8b/run.py in its CPU mode at the tiny config: the model it builds is the
importer's delta_mh mapping with random routing, and its record has one timed row per (T, B)."""

from __future__ import annotations

import json

import torch

from script_checks import load_script


def test_cpu_mode_records_every_length_and_batch(tmp_path):
    torch.set_num_threads(1)
    bench = load_script("benchmarks/capture8b/run.py")
    out = tmp_path / "tiny.json"
    record = bench.main(["--config", "tiny", "--lengths", "8", "16", "--batch-sizes", "1", "2", "--batches", "1",
                         "--draws", "2", "--device", "cpu", "--out", str(out)])
    assert json.loads(out.read_text()) == record
    assert [(r["seq_len"], r["batch"]) for r in record["rows"]] == [(8, 1), (8, 2), (16, 1), (16, 2)]
    for row in record["rows"]:
        assert row["tokens"] == row["seq_len"] * row["batch"]
        assert all(row[arm]["seconds"] > 0 and row[arm]["tokens_per_s"] > 0 for arm in ("forward", "weights", "probes"))
    assert record["authors_config"]["attnres_mode"] == "delta_mh" and record["commit"]


def test_random_model_is_the_imported_layout_with_routing_away_from_uniform():
    bench = load_script("benchmarks/capture8b/run.py")
    model = bench.random_model(bench.authors_config("tiny"), torch.device("cpu"), torch.float32)
    cfg = model.config
    assert cfg.delta_sources == "boundary_chain" and cfg.null_per_site and cfg.routing_heads == 8
    assert float(model.sites[0].gate) == 1.0 and float(model.sites[2 * cfg.num_hidden_layers].gate) == 0.0
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in model.parameters())
    assert float(model.sites[3].query.abs().mean()) > 0.1  # queries drawn, not the zero init


def test_via_import_writes_a_sharded_authors_checkpoint_and_imports_it(tmp_path):
    torch.set_num_threads(1)
    bench = load_script("benchmarks/capture8b/run.py")
    record = bench.main(["--config", "tiny", "--lengths", "8", "--batch-sizes", "1", "--batches", "1", "--draws", "1",
                         "--device", "cpu", "--via-import", str(tmp_path)])
    # the import's time is recorded (rounded to 0.1 s: a tiny model's import can round to 0.0), never asserted
    assert record["import"]["seconds"] >= 0 and record["import"]["host_peak_rss_mib"] > 0
    assert (tmp_path / "imported" / "import.json").is_file()
    index = json.loads((tmp_path / "src" / "model.safetensors.index.json").read_text())
    assert "model.layers.3.mlp_null_source" in index["weight_map"]


def test_results_md_tables_and_numbers_come_from_the_records():
    """results.md's tables are `table()` of the committed JSON records, and the numbers its text
    draws from them (import time and memory, ratios, the recipe's capture time and peak) are theirs."""
    bench = load_script("benchmarks/capture8b/run.py")
    text = bench.RESULTS.read_text()
    assert bench.filled_results(text) == text
    card = json.loads(bench.RESULTS.with_name("h200.json").read_text())
    via = json.loads(bench.RESULTS.with_name("h200_via_import.json").read_text())
    big = next(r for r in card["rows"] if (r["seq_len"], r["batch"]) == (2048, 4))
    weights_gib = card["parameters"] * 2 / 2**30
    peak = big["probes"]["peak_device_mib"] / 1024
    for said in (f"took\n{via['write_seconds']} s", f"{via['import']['seconds']} s with a peak host RSS of "
                 f"{via['import']['host_peak_rss_mib'] / 1024:.1f} GiB", f"({weights_gib:.1f} GiB",
                 f"{via['rows'][0]['host_peak_rss_mib'] / 1024:.1f} GiB, includes",
                 f"({big['weights']['tokens_per_s'] / big['forward']['tokens_per_s']:.2f}x",
                 f"about {big['forward']['tokens_per_s'] / big['probes']['tokens_per_s']:.1f}x",
                 f"take about {262144 / big['probes']['tokens_per_s']:.0f} s", f"the peak is {peak:.1f} GiB",
                 f"and {peak - weights_gib:.1f} GiB more", f"commit {card['commit'][:7]}"):
        assert said in text, said


def test_readme_recipe_rows_state_the_measured_numbers():
    """The README's recipe table (step 1's import, step 2's capture) says what the H200 records hold."""
    bench = load_script("benchmarks/capture8b/run.py")
    readme = (bench.RESULTS.parents[2] / "README.md").read_text()
    card = json.loads(bench.RESULTS.with_name("h200.json").read_text())
    via = json.loads(bench.RESULTS.with_name("h200_via_import.json").read_text())
    big = next(r for r in card["rows"] if (r["seq_len"], r["batch"]) == (2048, 4))
    weights_gib, peak = card["parameters"] * 2 / 2**30, big["probes"]["peak_device_mib"] / 1024
    for said in (f"one shard, {via['import']['host_peak_rss_mib'] / 1024:.1f} GiB measured",
                 f"{via['import']['seconds']} s measured", f"{peak:.1f} GiB peak at B 4 x T 2048",
                 f"weights {weights_gib:.1f} GiB and {peak - weights_gib:.1f} GiB more",
                 f"about {262144 / big['probes']['tokens_per_s']:.0f} s on an H200 "
                 f"({big['probes']['tokens_per_s']:,.0f} tokens/s measured)"):
        assert said in readme, said
