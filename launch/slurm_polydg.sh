#!/bin/bash
# polydg's assembly on several ranks of a Slurm cluster (issue #20).
#
#   sbatch launch/slurm_polydg.sh                      # from the checkout, after editing the lines below
#   sbatch --ntasks-per-node=16 launch/slurm_polydg.sh # sbatch options override the #SBATCH lines
#
# Edit first: the #SBATCH lines (account, partition, ranks, cores, time) and
# the variables under "what to run". Slurm reads #SBATCH lines only before
# the first command, so they come first.
#
# Ranks: one per GPU (--gpus-per-task=1, --ntasks-per-node = GPUs per node,
# --cpus-per-task = cores per GPU). Slurm then shows each task only its own
# GPU (--gpus-per-task implies --gpu-bind=per_task:1), and polydg, which
# gives node-local rank r GPU r mod (the GPUs it sees), uses that one.
# --backend auto below runs the assembly on it (CuPy and numba-cuda: pip
# install -e ".[mpi,gpu]") and falls back to the CPU, saying so, where no
# GPU is usable.
#
# CPU-only cluster: make the --gpus-per-task line a comment (##SBATCH); each
# rank then runs --cpus-per-task Numba threads. One rank per NUMA domain (or
# socket) with threads inside usually beats one rank per core: fewer ranks
# mean fewer duplicated partition-boundary faces and a smaller halo, while
# the threads share the rank's memory.
#
#SBATCH --job-name=polydg
#SBATCH --account=CHANGE_ME
#SBATCH --partition=CHANGE_ME
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-task=1
#SBATCH --cpus-per-task=8
#SBATCH --mem=0
#SBATCH --time=00:30:00
#SBATCH --output=polydg-%j.out
#
# --mem=0 asks for the nodes' whole memory: rank 0 reads, agglomerates and
# partitions the whole mesh, and with --solve or --output (without
# --no-gather) gathers the whole matrix, so it needs several times the
# memory of the other ranks.

set -euo pipefail

# ---- where polydg lives ------------------------------------------------------
POLYDG_DIR=${POLYDG_DIR:-$SLURM_SUBMIT_DIR}   # the checkout (sbatch from it, or set POLYDG_DIR)
# A virtual environment with pip install -e ".[mpi]"; empty: the python on PATH
# (sbatch passes on the submitting shell's environment, an activated one included).
VENV=${VENV:-}
# Site modules, if any (a compiler and the site MPI that mpi4py was built against):
# module load gcc openmpi

# ---- what to run ---------------------------------------------------------------
MESH=${MESH:-cube:40}              # generator spec or mesh file (a file must be readable on rank 0's node)
AGGLOMERATE=${AGGLOMERATE:-50000}  # about this many polytopic elements (METIS); 0 keeps the input cells
DEGREE=${DEGREE:-2}                # P, or P1:P2 for random degrees per element
PROBLEM=${PROBLEM:-paper-3d}
REPEAT=${REPEAT:-3}                # median of REPEAT assemblies
OUT=${OUT:-$SLURM_SUBMIT_DIR/polydg-$SLURM_JOB_ID}
# More options: e.g. "--solve iterative --output $OUT" (rank 0 gathers the matrix, solves and writes), or
# "--no-gather --output $OUT" (each rank writes its rows to $OUT/rows-rank<R>.npz; rank 0 stays small).
EXTRA=${EXTRA:-}

# ---- how ranks start -----------------------------------------------------------
# srun starts the ranks itself and hands them Slurm's PMI; --mpi must match
# the MPI that mpi4py was built against (pmix for a recent Open MPI, pmi2 for
# MPICH and Intel MPI; srun --mpi=list shows what the cluster offers).
# On a cluster, build mpi4py against the site MPI (pip install --no-binary
# mpi4py mpi4py after module load) so that it uses the fast interconnect;
# the mpich wheel of the [mpi] extra uses TCP and shared memory only. On
# one node the wheel also works by its own launcher: LAUNCHER="mpiexec -n $SLURM_NTASKS".
LAUNCHER=${LAUNCHER:-"srun --mpi=pmi2"}

# Since Slurm 22.05 srun no longer inherits --cpus-per-task from sbatch: pass it
# on, or every rank would be bound to one core whatever was asked for.
export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
# Threads per rank. polydg runs one Numba thread per rank unless these are
# set; here each rank owns --cpus-per-task cores and uses them all. The BLAS
# threads stay at 1: the kernels do not call BLAS, and BLAS threads would
# compete with Numba's.
export NUMBA_NUM_THREADS=$SLURM_CPUS_PER_TASK
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
export OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
# Numba's compiled kernels are cached per version of polydg's sources; a
# shared directory compiles once for all ranks and jobs (the first job pays
# about a minute). Local disks per node work too, each compiling once.
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-$HOME/.cache/polydg}

cd "$POLYDG_DIR"
if [ -n "$VENV" ]; then
    # shellcheck disable=SC1091
    source "$VENV/bin/activate"
fi
mkdir -p "$OUT"
echo "polydg: $SLURM_NTASKS ranks x $SLURM_CPUS_PER_TASK threads on $SLURM_JOB_NUM_NODES node(s): $SLURM_JOB_NODELIST"

# --backend auto: the rank's GPU when CuPy and a device are usable, else the CPU.
# shellcheck disable=SC2086  # LAUNCHER and EXTRA are lists of words
$LAUNCHER python -m polydg.assemble --mesh "$MESH" --agglomerate "$AGGLOMERATE" --degree "$DEGREE" \
    --problem "$PROBLEM" --repeat "$REPEAT" --backend auto --json "$OUT/summary.json" $EXTRA

# A launcher that polydg did not recognise as several ranks (no PMI_SIZE,
# OMPI_COMM_WORLD_SIZE or PMIX_SIZE in the ranks' environment) starts N
# independent one-process runs, which all succeed: catch that here.
python - "$OUT/summary.json" "$SLURM_NTASKS" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
ranks, asked = summary.get("ranks", 1), int(sys.argv[2])
if ranks != asked:
    sys.exit(f"polydg ran on {ranks} rank(s), {asked} were started: check LAUNCHER's --mpi against mpi4py's MPI")
t = summary["timings"]
print(f"{summary['dofs']:,} dofs on {ranks} ranks ({summary['backend']}): total assembly "
      f"{t['total_assembly']:.3f} s (slowest rank), "
      f"kernel-time balance {summary.get('balance', {}).get('kernel_time', 1.0):.2f}; summary in {sys.argv[1]}")
EOF
