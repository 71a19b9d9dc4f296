"""Fetch the wheels a GPU machine lacks into ``.whl/`` (the folder every ``run_on_device.sh`` installs).

The GPU machine has no network and its own stack (Python 3.12, torch, transformers, xarray, scipy, ...).
What the study, the ladder and the benchmarks need beyond it (hyper-connections, h5netcdf, the LM
Evaluation Harness with its dependencies) travels as wheels in a carried ``.whl`` folder. This script
finds those packages as the dependency closure of ``ROOTS`` in *this* environment (the venv ``make setup``
built from the lock, so the versions are the lock's), leaves out what the GPU image already holds
(``ON_DEVICE``, its package list of 2026-11-17) and downloads one wheel of each for CPython 3.12 on
manylinux x86_64 (``pip download --no-deps --only-binary :all:``; pure-Python wheels match any platform).

    .venv/bin/python benchmarks/device_wheels.py            # -> .whl/ (ignored by git), ~3 MB
    .venv/bin/python benchmarks/device_wheels.py --list     # the names and versions only
    .venv/bin/python benchmarks/device_wheels.py --fla      # also FLA's fla-core, for the FLA timings
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

# what the device calls import beyond the GPU image (extras in brackets are followed)
ROOTS = ("hyper-connections", "h5netcdf", "lm_eval[hf]", "pytablewriter")

# the GPU image's packages (its "cuda" image, as the device tool listed them on 2026-11-17), normalised names
ON_DEVICE = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt
jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba
numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham
simplejson six sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3
uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

# left out with everything only they need: rouge-score (and so nltk, 1.7 MB) is imported only by the
# harness's built-in tasks, which drop_builtin_tasks removes; the project's evaluation tests pass with
# both imports blocked (2026-11-27), and the carried tree has no room to spare (results/study100m/README.md)
LEAVE_OUT = frozenset({"rouge-score"})

# `--fla`: FLA's fused_attnres for the kernel tables' FLA column (device_run.sh's `fla` mode and `final`), at
# the version of every FLA timing in benchmarks/kernels/results.md; not in the lock (no CPU use). Its one
# requirement outside its extras, einops, is on the device.
FLA = {"fla-core": "0.6.0"}

PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def normalise(name: str) -> str:
    """PEP 503 name: lower case, runs of ``-_.`` become one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(spec: str) -> tuple[str, set[str]]:
    """``'name[a,b]>=1; marker'`` -> (normalised name, extras). Markers are read by ``_applies``."""
    match = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", spec)
    if match is None:
        raise ValueError(f"cannot read requirement {spec!r}")
    extras = {normalise(e.strip()) for e in (match.group(2) or "").split(",") if e.strip()}
    return normalise(match.group(1)), extras


def _applies(spec: str, extras: set[str]) -> bool:
    """Whether a Requires-Dist line applies on Linux / CPython 3.12 with the given extras."""
    from packaging.requirements import Requirement

    requirement = Requirement(spec)
    if requirement.marker is None:
        return True
    environment = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
                   "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in (extras or {""}))


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """Installed distributions reachable from ``roots``, not on the device and not left out: {name: version}."""
    wanted: dict[str, str] = {}
    queue = [_requirement(root) for root in roots]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, extras = queue.pop()
        if (name, frozenset(extras)) in seen or name in ON_DEVICE or name in LEAVE_OUT:
            continue
        seen.add((name, frozenset(extras)))
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"device_wheels: {name} is not installed here; run `make setup` first") from None
        wanted[name] = distribution.version
        for spec in distribution.requires or []:
            if _applies(spec, extras):
                queue.append(_requirement(spec))
    return dict(sorted(wanted.items()))


def download(packages: dict[str, str], folder: Path) -> None:
    """One wheel per package for CPython 3.12 / manylinux x86_64 into ``folder`` (old wheels removed).

    A package published only as a source archive (sqlitedict, word2number: pure Python) is
    built into a wheel here with ``pip wheel --no-deps``; such a wheel runs on any platform.
    """
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    fetch = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--python-version", "3.12", "--implementation", "cp", "-d", str(folder)]
    for platform in PLATFORMS:
        fetch += ["--platform", platform]
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder)]
    for name, version in packages.items():
        pinned = f"{name}=={version}"
        if subprocess.run(fetch + [pinned], capture_output=True).returncode != 0:
            print(f"  {pinned}: no binary wheel, built from its source archive")
            built = subprocess.run(build + [pinned], capture_output=True, text=True)
            if built.returncode != 0:  # no network, or a source archive that does not build
                last = (built.stderr.strip().splitlines() or ["(no output)"])[-1]
                raise SystemExit(f"device_wheels: {pinned} has no wheel for CPython 3.12 and did not build: {last}")
    for wheel in folder.glob("lm_eval-*.whl"):
        drop_builtin_tasks(wheel)


def drop_builtin_tasks(wheel: Path) -> None:
    """Rewrite the harness's wheel without its built-in task folders (``lm_eval/tasks/<name>/``).

    They are 8 of its 9 MB, and the device evaluates only the project's own tasks (``--tasks-dir``,
    indexed with ``include_defaults=False``), which keeps a call inside the 64 MiB it may carry. The
    task machinery (``lm_eval/tasks/*.py``) stays; RECORD lists only the files kept.
    """
    import zipfile

    def builtin(name: str) -> bool:
        parts = name.split("/")
        return len(parts) > 3 and parts[:2] == ["lm_eval", "tasks"]

    slim = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            if builtin(item.filename):
                continue
            data = source.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                data = "".join(line for line in data.decode().splitlines(keepends=True)
                               if not builtin(line.split(",")[0])).encode()
            target.writestr(item, data)
    slim.replace(wheel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(".whl"), help="wheel folder (default .whl)")
    parser.add_argument("--list", action="store_true", help="print the packages and versions, download nothing")
    parser.add_argument("--fla", action="store_true", help=f"add FLA's wheel ({', '.join(f'{k}=={v}' for k, v in FLA.items())})")
    args = parser.parse_args()
    packages = {**closure(ROOTS), **(FLA if args.fla else {})}
    for name, version in packages.items():
        print(f"{name}=={version}")
    if not args.list:
        download(packages, args.out)
        size = sum(p.stat().st_size for p in args.out.glob("*.whl"))
        print(f"{len(list(args.out.glob('*.whl')))} wheels, {size / 1e6:.1f} MB in {args.out}")


if __name__ == "__main__":
    main()
