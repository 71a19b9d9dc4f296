"""benchmarks/device_wheels.py: which wheels a GPU machine gets, and the harness's wheel without its tasks."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("device_wheels", ROOT / "benchmarks/device_wheels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_closure_holds_what_the_device_lacks_at_this_environments_versions():
    from importlib import metadata

    mod = _module()
    wanted = mod.closure(mod.ROOTS)
    for name in ("hyper-connections", "h5netcdf", "lm-eval", "pytablewriter", "datasets", "evaluate"):
        assert wanted[name] == metadata.version(name), name
    assert not set(wanted) & mod.ON_DEVICE                       # torch, transformers, xarray, ... are there
    assert "rouge-score" not in wanted and "nltk" not in wanted  # left out, and what only it needs
    assert all(name == mod.normalise(name) for name in wanted)


def test_requirement_markers_are_read_for_linux_cpython_312():
    mod = _module()
    assert mod._requirement("Foo_Bar[Hf, x]>=1; python_version<'3.9'") == ("foo-bar", {"hf", "x"})
    assert mod._applies("a; sys_platform == 'linux'", set()) and not mod._applies("a; sys_platform == 'win32'", set())
    assert not mod._applies("a; python_version < '3.9'", set())
    assert mod._applies("a; extra == 'hf'", {"hf"}) and not mod._applies("a; extra == 'hf'", set())


def test_drop_builtin_tasks_keeps_the_task_machinery_and_its_record(tmp_path):
    mod = _module()
    wheel = tmp_path / "lm_eval-0.0.1-py3-none-any.whl"
    kept = ["lm_eval/__init__.py", "lm_eval/tasks/__init__.py", "lm_eval/tasks/manager.py"]
    dropped = ["lm_eval/tasks/mmlu/default.yaml", "lm_eval/tasks/mmlu/sub/x.yaml"]
    record = "".join(f"{n},sha256=x,1\n" for n in kept + dropped) + "lm_eval-0.0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name in kept + dropped:
            z.writestr(name, "x")
        z.writestr("lm_eval-0.0.1.dist-info/RECORD", record)
    mod.drop_builtin_tasks(wheel)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert sorted(names) == sorted(kept + ["lm_eval-0.0.1.dist-info/RECORD"])
        listed = [line.split(",")[0] for line in z.read("lm_eval-0.0.1.dist-info/RECORD").decode().splitlines()]
    assert listed == kept + ["lm_eval-0.0.1.dist-info/RECORD"]


def test_fla_is_added_only_when_asked_and_needs_nothing_the_device_lacks(monkeypatch, capsys):
    import sys

    mod = _module()
    assert "einops" in mod.ON_DEVICE  # fla-core's one requirement outside its extras
    for argv, has in ((["--list"], False), (["--list", "--fla"], True)):
        monkeypatch.setattr(sys, "argv", ["device_wheels.py", *argv])
        mod.main()
        lines = capsys.readouterr().out.splitlines()
        assert ("fla-core==0.6.0" in lines) is has and "hyper-connections==" + mod.closure(mod.ROOTS)["hyper-connections"] in lines
