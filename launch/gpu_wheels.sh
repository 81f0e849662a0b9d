#!/usr/bin/env bash
# Make the folder of wheels that launch/gpu_run.sh installs on a GPU machine without a network (issue #27).
#
#   bash launch/gpu_wheels.sh [DEST]          # DEST defaults to launch/wheels (ignored by git)
#
# The GPU machine's Python (3.12, x86_64) already has NumPy, SciPy, Numba, numba-cuda, CuPy, mpi4py,
# pytest, pytest-xdist, rich and typing-extensions; it lacks what polydg and its tests need besides:
# pymetis, shapely, meshio, pyamg and mpich (MPI for mpi4py, with mpiexec).  Their own requirements are
# among the machine's packages (meshio: numpy, rich; pymetis: typing-extensions; shapely: numpy; pyamg:
# numpy, scipy), so each is fetched alone (--no-deps), at the version this machine tests against when
# it has one.  polydg itself comes along as a wheel of this working tree.  About 18 MB in all: the
# device tool carries at most 64 MiB with the working tree (`carry: ["launch/wheels"]`).
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-launch/wheels}
PY=${PYTHON:-python}
GPU_PYTHON=${GPU_PYTHON_VERSION:-3.12}

rm -rf "$DEST"
mkdir -p "$DEST"

# the versions installed here (what the suite passes with), else the newest
specs=$("$PY" - <<'EOF'
import importlib.metadata as md
out = []
for name in ("pymetis", "shapely", "meshio", "pyamg", "mpich"):
    try:
        out.append(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        out.append(name)
print(" ".join(out))
EOF
)
echo "gpu_wheels: $specs for CPython $GPU_PYTHON, manylinux x86_64"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$GPU_PYTHON" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -d "$DEST" $specs

# polydg: a wheel of the working tree's tracked files, built in a copy (no build/ or egg-info left here)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$build"
"$PY" -m pip wheel -q --no-deps -w "$DEST" "$build" >/dev/null

# the shared polygonal meshes some tests read (../shared/meshes stays behind: only the checkout travels)
[ -d ../shared/meshes ] && cp -r ../shared/meshes "$DEST/meshes"

ls -l "$DEST"
echo "gpu_wheels: $(ls "$DEST" | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST"
