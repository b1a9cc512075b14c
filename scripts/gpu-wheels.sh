#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, into .whl/ (git-ignored), for benchmarks/gpu.sh.
#
# The lent machines (an H100 or H200, 16 cores) reach no package registry. Their image has Python 3.12,
# torch (CUDA), JAX (CUDA), numpy, pandas, scipy, rich, typer, pyyaml, tensorboard, safetensors, matplotlib and
# more, but none of podium's other needs (pydantic, gymnasium, SQLAlchemy, MuJoCo / MJX, stockstats, ...), so
# they travel as wheels beside the working tree (64 MiB in all). This resolves podium's needs for that Python,
# leaves out what the image already has (DEVICE_HAS, read off its package list of 2026-11-17) and downloads
# the rest, one pinned wheel each. Run it here, in the repository's root, once per session that was lent a GPU:
#
#     bash scripts/gpu-wheels.sh          # -> .whl/*.whl, with the total size
#
# PYVER (3.12) and the platform tags can be changed for another image; WANT lists the requirements.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
[[ -x $PY ]] || PY=python3  # no `make` venv yet: any Python with pip >= 22.2 (for --report) will do
PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
LIMIT_MIB=${LIMIT_MIB:-56}  # the working tree travels too (about 5 MiB): stay well under the 64 MiB a call carries
# podium's own dependencies that the image lacks, the locomotion engines, and SB3 (the peer of vs_sb3.py)
WANT=(
    "gymnasium[mujoco]>=1.1,<2" "pydantic>=2.6" "sqlalchemy>=2.0" "stockstats>=0.6" "array-api-compat>=1.9"
    "mujoco>=4.0" "mujoco-mjx>=3.3" "stable-baselines3>=2.3" "bottleneck>=1.3" "pytz"
)
# without its dependencies: empyrical-reloaded 0.7 pins peewee<3.17.4, which has no wheel (so a wheels-only
# resolution falls back to 0.5.9, which imports yfinance and pandas-datareader at import time); 0.7 never
# imports peewee, and its other needs (bottleneck, pytz, pandas, scipy) are in WANT or on the image
NODEPS=("empyrical-reloaded>=0.7")
# carried although the image has it: the image's version is not known, and pydantic and SQLAlchemy need recent
# ones (it is pure Python and backward compatible, so it may shadow the image's)
NODEPS+=("typing-extensions>=4.16")
# what the image has (normalised names): never carried, so the image's CUDA builds of torch and JAX stay in charge
DEVICE_HAS=" absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers
flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py
markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript opencv-python-headless
optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp "
# needed only for what podium never does there: MuJoCo's GUI viewer, which `import mujoco` does not load (13 MiB)
OPTIONAL=" mujoco-studio websockets "
PLATFORMS=()
for tag in manylinux_2_{17,24,26,27,28,31,34,35}_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    PLATFORMS+=(--platform "$tag")
done
TARGET=(--python-version "$PYVER" --implementation cp --only-binary=:all: "${PLATFORMS[@]}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "resolving podium's needs for CPython $PYVER (manylinux x86-64) ..."
"$PY" -m pip install --quiet --dry-run --ignore-installed --report "$work/report.json" --target "$work/t" \
    "${TARGET[@]}" "${WANT[@]}"
mapfile -t pins < <("$PY" - "$work/report.json" "$DEVICE_HAS $OPTIONAL" <<'EOF'
import json, re, sys
has = set(sys.argv[2].split())
for item in json.load(open(sys.argv[1]))["install"]:
    name = re.sub(r"[-_.]+", "-", item["metadata"]["name"]).lower()
    if name not in has and not name.startswith("nvidia-"):
        print(f"{name}=={item['metadata']['version']}")
EOF
)
rm -rf "$DEST" && mkdir -p "$DEST"
echo "downloading ${#pins[@]} wheels the GPU image lacks: ${pins[*]}"
"$PY" -m pip download --quiet --no-deps -d "$DEST" "${TARGET[@]}" "${pins[@]}" "${NODEPS[@]}"
size=$(du -sm "$DEST" | cut -f1)
echo "$DEST: $(ls "$DEST" | wc -l) wheels, ${size} MiB"
if (( size > LIMIT_MIB )); then
    echo "error: $DEST is ${size} MiB, over the ${LIMIT_MIB} MiB that leaves room for the working tree; drop a want" >&2
    exit 1
fi
