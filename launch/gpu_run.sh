#!/usr/bin/env bash
# One prepared GPU run (issue #27): install the carried wheels offline, then launch/gpu_run.py's stages.
#
#   bash launch/gpu_run.sh [--simulator] [--quick] [OUTDIR] [-- DRIVER OPTIONS]
#
# OUTDIR defaults to $OUT (the device tool's folder that comes back) or gpu-results/.  It receives
# results.json (every stage: status, seconds, limit, summary, details), run.log and tests-junit.xml.
#
# On a GPU machine without a network: made beforehand with launch/gpu_wheels.sh, launch/wheels/ holds
# pymetis, shapely, meshio, pyamg, mpich and polydg; they are installed into the running Python's
# environment (or, where that is read-only, under a prefix in /tmp), and mpich's mpiexec is put on PATH.
# The working tree's polydg comes first on PYTHONPATH: the code under test is the tree's.
#
# --simulator runs the same stages on a CPU machine under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1,
# the "cudasim" backend) at tiny sizes; the install step then only checks, without installing, that the
# wheels folder (when there is one) covers CPython 3.12 on manylinux x86_64.  --quick runs one item per
# stage (the bench: one assembly and one nonlinear linearisation).  Stage limits and the whole run's
# (8 minutes on an H100) are in launch/gpu_run.py (BUDGET, RUN_TOTAL; the simulator's SIMULATOR_BUDGET);
# `-- --budget bench=200 --stages bench` and the like override them.
set -u
cd "$(dirname "$0")/.."
REPO=$(pwd)
SIMULATOR=0
DRIVER=()
OUTDIR="${OUT:-$REPO/gpu-results}"
while [ $# -gt 0 ]; do
    case "$1" in
        --simulator) SIMULATOR=1; DRIVER+=(--simulator) ;;
        --quick) DRIVER+=(--quick) ;;
        --) shift; DRIVER+=("$@"); break ;;
        -*) echo "gpu_run.sh: unknown option $1" >&2; exit 2 ;;
        *) OUTDIR=$1 ;;
    esac
    shift
done
mkdir -p "$OUTDIR"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || PY=python
WHEELS=$REPO/launch/wheels
INSTALL_JSON=$(mktemp)
trap 'rm -f "$INSTALL_JSON"' EXIT
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# the shared meshes the tests read: beside the checkout, else the copy among the wheels
if [ ! -d "$REPO/../shared/meshes" ] && [ -d "$WHEELS/meshes" ]; then
    export POLYDG_SHARED_MESHES="$WHEELS/meshes"
fi

record_install() {  # status method seconds note
    "$PY" - "$INSTALL_JSON" "$1" "$2" "$3" "$4" <<'EOF'
import json, os, shutil, sys
path, status, method, seconds, note = sys.argv[1:6]
wheels = os.path.join(os.getcwd(), "launch", "wheels")
json.dump({"status": status, "seconds": float(seconds), "summary": {
    "method": method, "mpiexec": shutil.which("mpiexec"), "note": note[-1500:],
    "wheels": sorted(os.listdir(wheels)) if os.path.isdir(wheels) else []}}, open(path, "w"), indent=1)
EOF
}

t0=$(date +%s.%N)
elapsed() { "$PY" -c "import sys; print(round($(date +%s.%N) - $t0, 1))"; }
echo "== stage install"
if [ ! -d "$WHEELS" ]; then
    if [ "$SIMULATOR" = 1 ]; then
        record_install skipped none "$(elapsed)" "no launch/wheels here (made by launch/gpu_wheels.sh)"
    else
        record_install failed none "$(elapsed)" "no launch/wheels: run launch/gpu_wheels.sh and carry launch/wheels"
    fi
elif [ "$SIMULATOR" = 1 ]; then
    # the folder covers the GPU machine's Python (3.12, manylinux x86_64): a dry run of the install, offline
    check=$(mktemp -d)
    log=$(timeout 60 "$PY" -m pip install --dry-run --ignore-installed --no-deps --no-index --find-links "$WHEELS" \
        --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --target "$check" \
        pymetis shapely meshio pyamg mpich polydg 2>&1)
    rc=$?
    rm -rf "$check"
    if [ $rc = 0 ]; then
        record_install ok dry-run "$(elapsed)" "$(echo "$log" | grep -i 'would install')"
    else
        record_install failed dry-run "$(elapsed)" "$log"
    fi
else
    # into the running Python's environment, as a user's `pip install "polydg[mpi,solvers]"` would
    log=$(timeout 30 "$PY" -m pip install -q --no-index --find-links "$WHEELS" --no-cache-dir --no-compile \
        --disable-pip-version-check "polydg[mpi,solvers]" 2>&1)
    rc=$?
    method=environment
    if [ $rc != 0 ]; then
        # a read-only environment: everything under a prefix of its own
        PREFIX=/tmp/polydg-prefix
        log="$log
$(timeout 30 "$PY" -m pip install -q --ignore-installed --no-index --no-deps --no-cache-dir --no-compile \
            --prefix "$PREFIX" "$WHEELS"/*.whl 2>&1)"
        rc=$?
        method=prefix
        SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$PREFIX', 'platbase': '$PREFIX'}))")
        export PYTHONPATH="$REPO:$SITE${PYTHONPATH#$REPO}"
        export PATH="$PREFIX/bin:$PATH"
        export LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        [ -e "$PREFIX/lib/libmpi.so.12" ] && export MPI4PY_LIBMPI="$PREFIX/lib/libmpi.so.12"
    fi
    # mpich's mpiexec sits beside the interpreter's scripts, its libmpi in the environment's lib/
    SCRIPTS=$("$PY" -c "import sysconfig; print(sysconfig.get_path('scripts'))")
    case ":$PATH:" in *":$SCRIPTS:"*) ;; *) export PATH="$PATH:$SCRIPTS" ;; esac
    LIBMPI=$("$PY" -c "import sys; print(sys.prefix)")/lib/libmpi.so.12
    [ -z "${MPI4PY_LIBMPI:-}" ] && [ -e "$LIBMPI" ] && export MPI4PY_LIBMPI="$LIBMPI"
    probe=$("$PY" -c "import polydg, pymetis, shapely, meshio, pyamg; from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])" 2>&1)
    prc=$?
    if [ $rc = 0 ] && [ $prc = 0 ] && command -v mpiexec >/dev/null; then
        record_install ok "$method" "$(elapsed)" "$probe"
    else
        record_install failed "$method" "$(elapsed)" "$log
$probe
mpiexec: $(command -v mpiexec || echo 'not found')"
    fi
fi
echo "== stage install: $("$PY" -c "import json; print(json.load(open('$INSTALL_JSON'))['status'])") in $(elapsed) s"

# the stages get what the install step left of the whole run's 470 s (RUN_TOTAL; a --total given after -- wins);
# the simulator's total is the driver's (the sum of its SIMULATOR_BUDGET)
TOTAL=$("$PY" -c "print(max(60, round(480 - $(elapsed))))")
[ "$SIMULATOR" = 1 ] && TOTAL=0
"$PY" launch/gpu_run.py --out "$OUTDIR" --install-json "$INSTALL_JSON" --total "$TOTAL" "${DRIVER[@]}"
