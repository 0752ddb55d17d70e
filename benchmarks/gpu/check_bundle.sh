#!/usr/bin/env bash
# Check HERE, before any device time is spent, that the bundle make_bundle.sh wrote carries what
# `sweetspot tune`, `report` and `calibrate` need on the GPU machine, where nothing can be
# fetched. Runs from anywhere, after make_bundle.sh:
#
#   benchmarks/gpu/check_bundle.sh        # PY312=/path/to/python3.12 if none is on PATH
#
# It stands the GPU machine in with a Python 3.12 venv holding only packages that the GPU image
# has (GPU_PACKAGES below: the device notes' list, read there 2026-11-17) -- the ones sweetspot
# and the bundle's wheels import, at the image's versions where those were read -- and refuses
# to go on if anything else got into it. Then:
#   1. installs the bundle with install.sh, exactly as the GPU machine does (zipfile, no pip);
#   2. walks the requirements (wheel METADATA, markers evaluated for CPython 3.12 on x86_64
#      Linux) from sweetspot's own dependencies through every bundled wheel they reach, and
#      names any requirement that is neither in the bundle nor in GPU_PACKAGES;
#   3. imports sweetspot.cli, optuna, sqlalchemy, alembic, colorlog, mako and matplotlib from
#      the installed bundle + src/, and runs `tune` (simulator), `report` and `calibrate
#      --study` on a throw-away SQLite study.
# What it cannot check: the image's own versions of packages whose version was not read there,
# and vLLM itself (it needs torch and a GPU); the bare-machine try is the final word.
# Scratch (git-ignored, never carried): .gpu-bundle/check/ (the venv is kept for the next run).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=$ROOT/.gpu-bundle
CHECK=$BUNDLE/check
VENV=$CHECK/venv
PY312=${PY312:-$(command -v python3.12 || true)}

die() { echo "check_bundle: $*" >&2; exit 1; }

[[ -f $BUNDLE/SHA256SUMS ]] || die "no bundle in $BUNDLE: run benchmarks/gpu/make_bundle.sh first"
[[ -n $PY312 && -x $PY312 ]] || die "needs a Python 3.12 (the GPU machine's): set PY312"
[[ $("$PY312" -c 'import sys; print(sys.version_info[:2] == (3, 12))') == True ]] \
    || die "$PY312 is not Python 3.12"

# The GPU image's Python packages (device notes, KINDS.md "Python packages already there").
GPU_PACKAGES="
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml
markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda
numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum
opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich
sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
"
# Of those, what sweetspot and the bundled wheels import, pinned where the image's version was
# read there (README.md); pip brings their own dependencies, which must be in the list too.
# python-dateutil (matplotlib's) below 3: 4.x pulls tzdata, which the image lacks, while the
# image's six says it holds a 2.x.
STAND_INS=(typer==0.27.2 rich==15.0.0 numpy==2.5.2 scipy==1.18.1 PyYAML==6.0.3 packaging==26.3
    aiohttp==3.14.3 uvloop==0.23.0 prometheus-client==0.26.0 tokenizers==0.23.2
    nvidia-ml-py==13.610.43 matplotlib "python-dateutil<3" tqdm typing-extensions markupsafe)

export PYTHONNOUSERSITE=1 MPLBACKEND=Agg
mkdir -p "$CHECK"
if [[ ! -f $VENV/.ready ]]; then
    echo "check_bundle: the GPU image's stand-in: a 3.12 venv with ${STAND_INS[*]}"
    rm -rf "$VENV"
    "$PY312" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${STAND_INS[@]}"
    touch "$VENV/.ready"
fi
PY=$VENV/bin/python

# 0. the stand-in holds nothing the image lacks
"$PY" - "$GPU_PACKAGES" <<'PYEOF'
import re, sys
from importlib.metadata import distributions
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
gpu = {norm(n) for n in sys.argv[1].split()}
extra = sorted({norm(d.metadata["Name"]) for d in distributions()} - gpu)
if extra:
    sys.exit(f"check_bundle: the stand-in venv holds what the GPU image lacks: {extra}")
print("check_bundle: stand-in venv: only packages of the GPU image")
PYEOF

# 1. install as the GPU machine does (a fresh install every time)
rm -rf "$CHECK/site"
SITE=$CHECK/site WORK=$CHECK/work PYTHON=$PY "$ROOT/benchmarks/gpu/install.sh"

# 2. every requirement reachable from sweetspot's dependencies: bundled or on the image
"$PY" - "$GPU_PACKAGES" "$CHECK/site" "$ROOT/pyproject.toml" <<'PYEOF'
import re, sys, tomllib
from email.parser import Parser
from pathlib import Path
from packaging.requirements import Requirement

norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
gpu = {norm(n) for n in sys.argv[1].split()}
site, pyproject = Path(sys.argv[2]), Path(sys.argv[3])
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "extra": ""}
bundled = {}
for info in site.glob("*.dist-info"):
    meta = Parser().parsestr((info / "METADATA").read_text(encoding="utf-8"))
    bundled[norm(meta["Name"])] = meta
todo = [Requirement(r) for r in tomllib.loads(pyproject.read_text())["project"]["dependencies"]]
seen, missing, wrong = set(), [], []
while todo:
    req = todo.pop()
    if req.marker is not None and not req.marker.evaluate(env):
        continue
    name = norm(req.name)
    if name in bundled:
        version = bundled[name]["Version"]
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req} (bundle has {version})")
        if name not in seen:
            seen.add(name)
            todo += [Requirement(r) for r in bundled[name].get_all("Requires-Dist") or ()]
    elif name not in gpu:
        missing.append(str(req))
if missing or wrong:
    sys.exit(f"check_bundle: neither bundled nor on the image: {sorted(set(missing))}; "
             f"bundled at a version that does not satisfy: {sorted(set(wrong))}")
print(f"check_bundle: requirements closed: {len(seen)} bundled packages reached "
      f"({', '.join(sorted(seen))}), the rest on the image")
PYEOF

# 3. import and run the commands, from the installed bundle and src/ only
export PYTHONPATH=$CHECK/site:$ROOT/src
"$PY" -c "import sweetspot.cli, optuna, sqlalchemy, alembic, colorlog, mako, matplotlib; \
print('check_bundle: imports: optuna', optuna.__version__, 'sqlalchemy', sqlalchemy.__version__, \
'from', optuna.__file__.rsplit('/optuna/', 1)[0])"
RUN=$CHECK/run
rm -rf "$RUN"
mkdir -p "$RUN"
DB=sqlite:///$RUN/studies.db
"$PY" -m sweetspot.cli tune --model qwen2.5-0.5b --quant bf16 --gpu h100 --workload short \
    --num-requests 16 --trials 3 --confirm 0 --fix max_model_len=4096 --storage "$DB" \
    --study-name check --report-dir "$RUN/report" >"$RUN/tune.txt" 2>&1 \
    || die "tune failed: $(tail -3 "$RUN/tune.txt")"
"$PY" -m sweetspot.cli report check --storage "$DB" --out "$RUN/again" >"$RUN/report.txt" \
    || die "report failed"
[[ -f $RUN/again/report.html ]] && ls "$RUN"/again/*.png >/dev/null || die "report wrote no HTML or figures"
set +e
"$PY" -m sweetspot.cli calibrate --study check --storage "$DB" 2>"$RUN/calibrate.txt"
rc=$?
set -e
# A simulated study keeps no runs: calibrate must get as far as reading it and say so.
[[ $rc == 2 ]] && grep -q "no stored runs" "$RUN/calibrate.txt" \
    || die "calibrate --study: exit $rc, $(cat "$RUN/calibrate.txt")"
echo "check_bundle: tune, report and calibrate --study ran from the bundle ($RUN)"
echo "check_bundle: OK -- still pending: the same on a bare GPU machine (README.md: "Check it here first")"
