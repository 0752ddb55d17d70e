#!/usr/bin/env bash
# Build the wheel bundle that takes real vLLM 0.24.0 (plus what sweetspot needs beside it) to the
# lent H200 machine, which has no network. Runs HERE (a machine with PyPI access), from anywhere.
#
#   benchmarks/gpu/make_bundle.sh
#
# Output, in the git-ignored folder .gpu-bundle/ at the repo root:
#   part-00, part-01, ...   the bundle tar split into 50 MiB pieces (one `run` carries one piece
#                           beside the ~2 MB working tree, under the 64 MiB a call carries)
#   SHA256SUMS              sha256 of the whole tar and of every part
# Working folders (also ignored, never carried): .gpu-bundle/cache (pristine downloads, reused by
# later runs) and .gpu-bundle/build (the staged wheels and the tar).
#
# See benchmarks/gpu/README.md for carrying the parts and installing them there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTDIR=$ROOT/.gpu-bundle
CACHE=$OUTDIR/cache
BUILD=$OUTDIR/build
TAR_NAME=sweetspot-gpu-bundle.tar
PART_SIZE=${PART_SIZE:-40M}  # the working tree (~15 MB) travels with each part: 64 MiB in all
PY=${PYTHON:-python3}

VLLM_WHEEL=vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl

# The dependency wheels the GPU image lacks for vLLM 0.24.0: the exact set seen working on the
# H200 (../shared/gpu/wheels-vllm-0.24.0.txt, 2026-12-02). Only name and version are used; the
# file names are checked after the download so that a different build cannot slip in.
VLLM_DEPS=$(cat <<'EOF'
annotated_types-0.7.0-py3-none-any.whl
anthropic-0.116.0-py3-none-any.whl
apache_tvm_ffi-0.1.9-cp312-abi3-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
astor-0.8.1-py2.py3-none-any.whl
blake3-1.0.9-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
cachetools-7.1.4-py3-none-any.whl
cbor2-6.1.3-cp312-cp312-manylinux_2_28_x86_64.whl
cffi-2.0.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
compressed_tensors-0.17.0-py3-none-any.whl
cryptography-49.0.0-cp311-abi3-manylinux_2_28_x86_64.whl
depyf-0.20.0-py3-none-any.whl
dill-0.4.1-py3-none-any.whl
diskcache-5.6.3-py3-none-any.whl
distro-1.9.0-py3-none-any.whl
docstring_parser-0.18.0-py3-none-any.whl
fastapi-0.136.3-py3-none-any.whl
googleapis_common_protos-1.75.0-py3-none-any.whl
httpx_sse-0.4.3-py3-none-any.whl
ijson-3.5.0-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl
interegular-0.3.3-py37-none-any.whl
jiter-0.16.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
jmespath-1.1.0-py3-none-any.whl
jsonschema-4.26.0-py3-none-any.whl
jsonschema_specifications-2025.9.1-py3-none-any.whl
lark-1.2.2-py3-none-any.whl
llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl
lm_format_enforcer-0.11.3-py3-none-any.whl
mcp-1.28.1-py3-none-any.whl
mistral_common-1.11.5-py3-none-any.whl
model_hosting_container_standards-0.1.16-py3-none-any.whl
msgspec-0.21.1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl
openai-2.44.0-py3-none-any.whl
openai_harmony-0.0.8-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
opentelemetry_api-1.43.0-py3-none-any.whl
opentelemetry_exporter_otlp-1.43.0-py3-none-any.whl
opentelemetry_exporter_otlp_proto_common-1.43.0-py3-none-any.whl
opentelemetry_exporter_otlp_proto_grpc-1.43.0-py3-none-any.whl
opentelemetry_exporter_otlp_proto_http-1.43.0-py3-none-any.whl
opentelemetry_proto-1.43.0-py3-none-any.whl
opentelemetry_sdk-1.43.0-py3-none-any.whl
opentelemetry_semantic_conventions-0.64b0-py3-none-any.whl
opentelemetry_semantic_conventions_ai-0.5.1-py3-none-any.whl
outlines_core-0.2.14-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
partial_json_parser-0.2.1.1.post7-py3-none-any.whl
prometheus_fastapi_instrumentator-8.0.2-py3-none-any.whl
pybase64-1.4.3-cp312-cp312-manylinux1_x86_64.manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_5_x86_64.whl
pycountry-26.2.16-py3-none-any.whl
pycparser-3.0-py3-none-any.whl
pydantic-2.13.4-py3-none-any.whl
pydantic_core-2.46.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
pydantic_extra_types-2.11.1-py3-none-any.whl
pydantic_settings-2.14.2-py3-none-any.whl
pyjwt-2.13.0-py3-none-any.whl
python_dotenv-1.2.2-py3-none-any.whl
python_json_logger-4.1.0-py3-none-any.whl
python_multipart-0.0.32-py3-none-any.whl
pyzmq-27.1.0-cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl
referencing-0.37.0-py3-none-any.whl
rpds_py-2026.6.3-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
setproctitle-1.3.7-cp312-cp312-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl
sniffio-1.3.1-py3-none-any.whl
sse_starlette-3.4.5-py3-none-any.whl
starlette-1.3.1-py3-none-any.whl
supervisor-4.3.0-py2.py3-none-any.whl
typing_inspection-0.4.2-py3-none-any.whl
uvicorn-0.50.0-py3-none-any.whl
watchfiles-1.2.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
xgrammar-0.2.3-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
EOF
)

# sweetspot's own runtime needs that the GPU image lacks (checked there 2026-12-02 with
# importlib: typer 0.27.2, rich 15.0.0, numpy 2.5.2, scipy 1.18.1, PyYAML 6.0.3, packaging 26.3,
# aiohttp 3.14.3, uvloop 0.23.0, prometheus-client 0.26.0, tokenizers 0.23.2, nvidia-ml-py
# 13.610.43 and all their dependencies are there; pydantic and its three helpers are not).
# These are added only when VLLM_DEPS does not already hold the package (today it holds the four
# pydantic ones). `tune`, `report` and `calibrate --study` need the study storage: optuna and
# what it requires beside numpy, packaging, tqdm and PyYAML (there) -- SQLAlchemy (its greenlet
# is only for asyncio), alembic (SQLAlchemy, Mako, typing-extensions: there), colorlog, and Mako
# (MarkupSafe: there); matplotlib (report figures) is there. The versions are the ones the test
# suite passes with; check_bundle.sh checks the set against the image's package list.
SWEETSPOT_DEPS=(
    pydantic==2.13.4
    pydantic-core==2.46.4
    annotated-types==0.7.0
    typing-inspection==0.4.2
    optuna==5.1.0
    SQLAlchemy==2.1.9
    alembic==1.20.1
    colorlog==6.12.0
    Mako==1.4.3
)

# Files dropped from the vLLM wheel (279 MB -> ~144 MB): FlashAttention 2 (Hopper uses FA3), the
# MoE kernels (dense models only), the Rust front end binary, and deep_gemm for other Pythons.
TRIM_REGEX='^vllm/vllm_flash_attn/_vllm_fa2_C\.abi3\.so$|^vllm/_moe_C_stable_libtorch\.abi3\.so$|^vllm/vllm-rs|^vllm/third_party/deep_gemm/_C\.cpython-3(10|11|13|14)-[^/]*\.so$'

PIP_FLAGS=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
    --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64
    --platform manylinux_2_31_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
    --platform manylinux1_x86_64)

norm() { tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g'; }

command -v zip >/dev/null && command -v unzip >/dev/null || { echo "make_bundle: needs zip and unzip" >&2; exit 1; }
mkdir -p "$CACHE"

# ---- what to fetch --------------------------------------------------------------------------
reqs=("vllm==0.24.0")
expected=("$VLLM_WHEEL")
declare -A have=()
while read -r f; do
    [[ -z $f ]] && continue
    IFS=- read -r dist ver _ <<<"${f%.whl}"
    reqs+=("$dist==$ver")
    expected+=("$f")
    have[$(norm <<<"$dist")]=$ver
done <<<"$VLLM_DEPS"
for r in "${SWEETSPOT_DEPS[@]}"; do
    key=$(norm <<<"${r%%==*}")
    if [[ -n ${have[$key]:-} ]]; then
        [[ ${have[$key]} == "${r#*==}" ]] || { echo "make_bundle: $r clashes with vLLM's ${have[$key]}" >&2; exit 1; }
        echo "sweetspot dep $r: already in the vLLM set"
    else
        echo "sweetspot dep $r: added"
        reqs+=("$r")
        have[$key]=${r#*==}
    fi
done

# ---- download (pip skips files already in the cache) ----------------------------------------
echo "downloading ${#reqs[@]} wheels into $CACHE ..."
"$PY" -m pip download -q --disable-pip-version-check "${PIP_FLAGS[@]}" -d "$CACHE" "${reqs[@]}"
for f in "${expected[@]}"; do
    [[ -f $CACHE/$f ]] || { echo "make_bundle: expected $f, pip fetched another build:" >&2; ls "$CACHE" >&2; exit 1; }
done

# ---- stage: exactly the wanted wheels, vLLM trimmed -----------------------------------------
rm -rf "$BUILD"
mkdir -p "$BUILD/wheels"
for r in "${reqs[@]}"; do
    key=$(norm <<<"${r%%==*}")
    ver=${r#*==}
    n=0
    for f in "$CACHE"/*.whl; do
        b=$(basename "$f")
        IFS=- read -r d v _ <<<"${b%.whl}"
        if [[ $(norm <<<"$d") == "$key" && $v == "$ver" ]]; then
            cp "$f" "$BUILD/wheels/"
            n=$((n + 1))
        fi
    done
    [[ $n == 1 ]] || { echo "make_bundle: $n cached wheels match $r" >&2; exit 1; }
done

W=$BUILD/wheels/$VLLM_WHEEL
mapfile -t drop < <(unzip -Z1 "$W" | grep -E "$TRIM_REGEX")
[[ ${#drop[@]} == 7 ]] || { echo "make_bundle: expected 7 files to trim, found ${#drop[@]}: ${drop[*]}" >&2; exit 1; }
zip -q -d "$W" "${drop[@]}"
unzip -Z1 "$W" | grep -x 'vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so' >/dev/null \
    || { echo "make_bundle: trimmed the Python 3.12 deep_gemm too" >&2; exit 1; }
unzip -tq "$W" >/dev/null
echo "trimmed $VLLM_WHEEL: $(stat -c %s "$CACHE/$VLLM_WHEEL") -> $(stat -c %s "$W") bytes (${#drop[@]} files)"

# ---- tar, split, checksums --------------------------------------------------------------------
(cd "$BUILD" && ls wheels > wheels/MANIFEST.txt \
    && tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$TAR_NAME" wheels)
rm -f "$OUTDIR"/part-* "$OUTDIR/SHA256SUMS"
split -b "$PART_SIZE" -d -a 2 "$BUILD/$TAR_NAME" "$OUTDIR/part-"
(cd "$BUILD" && sha256sum "$TAR_NAME") >"$OUTDIR/SHA256SUMS"
(cd "$OUTDIR" && sha256sum part-*) >>"$OUTDIR/SHA256SUMS"

# check: the parts re-join into the tar
sum=$(cat "$OUTDIR"/part-* | sha256sum | cut -d' ' -f1)
grep -q "^$sum  $TAR_NAME\$" "$OUTDIR/SHA256SUMS" || { echo "make_bundle: parts do not re-join" >&2; exit 1; }
for p in "$OUTDIR"/part-*; do
    (($(stat -c %s "$p") < 64 * 1024 * 1024)) || { echo "make_bundle: $p is 64 MiB or more" >&2; exit 1; }
done

echo "bundle: $(ls "$BUILD/wheels" | grep -c '\.whl$') wheels, $(stat -c %s "$BUILD/$TAR_NAME") bytes, sha256 $sum"
echo "parts (carry one per call, SHA256SUMS with the first):"
(cd "$ROOT" && ls -l .gpu-bundle/part-* .gpu-bundle/SHA256SUMS | awk '{print "  " $NF "  " $5}')
