#!/usr/bin/env bash
# Install the wheel bundle made by make_bundle.sh on the GPU machine: runs THERE, from the repo
# root, once every .gpu-bundle/part-* and .gpu-bundle/SHA256SUMS have arrived (README.md here).
#
#   benchmarks/gpu/install.sh            # or SITE=/somewhere benchmarks/gpu/install.sh
#   export PYTHONPATH=/tmp/gpu-site      # then vLLM 0.24.0 and its deps import
#
# The machine has no pip, no unzip and no network: the wheels are unpacked with python3's
# zipfile, in parallel. Idempotent: a finished install leaves $SITE/.done (the tar's sha256) and a
# second run with the same bundle does nothing; a different bundle replaces it.
set -euo pipefail

t0=$(date +%s.%N)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=$ROOT/.gpu-bundle
SITE=${SITE:-/tmp/gpu-site}
WORK=${WORK:-/tmp/gpu-bundle-work}
TAR_NAME=sweetspot-gpu-bundle.tar
PY=${PYTHON:-python3}

elapsed() { echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}'; }
die() { echo "install: $*" >&2; exit 1; }

[[ -f $BUNDLE/SHA256SUMS ]] || die "$BUNDLE/SHA256SUMS missing (carry it with the first part)"
want=$(awk -v n="$TAR_NAME" '$2 == n {print $1}' "$BUNDLE/SHA256SUMS")
[[ -n $want ]] || die "no $TAR_NAME line in SHA256SUMS"

if [[ -f $SITE/.done ]]; then
    if [[ $(cat "$SITE/.done") == "$want" ]]; then
        echo "install: $SITE already holds bundle ${want:0:12} (remove $SITE/.done to redo); 0.0 s"
        exit 0
    fi
    echo "install: $SITE holds another bundle; replacing it"
fi

# 1. every part there and intact (names the missing ones: a machine given back loses them all)
missing=()
while read -r _ p; do
    if [[ $p == part-* && ! -f $BUNDLE/$p ]]; then missing+=("$p"); fi
done <"$BUNDLE/SHA256SUMS"
((${#missing[@]} == 0)) || die "missing ${missing[*]}: carry them (all calls on one warm machine)"
(cd "$BUNDLE" && grep ' part-' SHA256SUMS | sha256sum -c --quiet) || die "a part is corrupt"

# 2. re-join, check the tar, unpack it
rm -rf "$WORK"
mkdir -p "$WORK"
grep ' part-' "$BUNDLE/SHA256SUMS" | awk '{print $2}' | sort | sed "s|^|$BUNDLE/|" | xargs cat >"$WORK/$TAR_NAME"
(cd "$WORK" && grep "  $TAR_NAME\$" "$BUNDLE/SHA256SUMS" | sha256sum -c --quiet) || die "tar sha256 mismatch"
if command -v tar >/dev/null; then
    tar -xf "$WORK/$TAR_NAME" -C "$WORK"
else
    "$PY" -m tarfile -e "$WORK/$TAR_NAME" "$WORK"
fi
rm -f "$WORK/$TAR_NAME"
echo "install: bundle checked and unpacked ($(ls "$WORK/wheels" | grep -c '\.whl$') wheels) at $(elapsed) s"

# 3. unzip every wheel into $SITE.partial, then move it into place
rm -rf "$SITE.partial"
mkdir -p "$SITE.partial"
"$PY" - "$WORK/wheels" "$SITE.partial" <<'PYEOF'
import os, sys, zipfile
from concurrent.futures import ProcessPoolExecutor

src, dst = sys.argv[1], sys.argv[2]
CHUNK = 32 << 20  # uncompressed bytes per task


def target(name):
    """Where a wheel member goes: .data/{purelib,platlib} to the root, other .data skipped."""
    top, _, rest = name.partition("/")
    if top.endswith(".data"):
        kind, _, rest2 = rest.partition("/")
        return rest2 if kind in ("purelib", "platlib") and rest2 else None
    return name


def extract(task):
    wheel, names = task
    n = 0
    with zipfile.ZipFile(wheel) as z:
        for name in names:
            info = z.getinfo(name)
            rel = target(name)
            if rel is None or name.endswith("/"):
                continue
            out = os.path.join(dst, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as f, open(out, "wb") as g:
                while buf := f.read(1 << 20):
                    g.write(buf)
            mode = (info.external_attr >> 16) & 0o777
            if mode & 0o111:
                os.chmod(out, mode | 0o644)
            n += 1
    return n


tasks = []
for w in sorted(os.listdir(src)):
    if not w.endswith(".whl"):
        continue
    path = os.path.join(src, w)
    with zipfile.ZipFile(path) as z:
        chunk, size = [], 0
        for info in z.infolist():
            chunk.append(info.filename)
            size += info.file_size
            if size >= CHUNK:
                tasks.append((path, chunk))
                chunk, size = [], 0
        if chunk:
            tasks.append((path, chunk))
tasks.sort(key=lambda t: -len(t[1]))
with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as ex:
    files = sum(ex.map(extract, tasks))
print(f"install: {files} files from {len(tasks)} chunks")
PYEOF
rm -rf "$SITE"
mv "$SITE.partial" "$SITE"
echo "$want" >"$SITE/.done"
rm -rf "$WORK"
echo "install: done in $(elapsed) s: $(du -sh "$SITE" | cut -f1) in $SITE; export PYTHONPATH=$SITE"
