#!/usr/bin/env bash
# Verify tapegrad's CUDA backend on a GPU machine in one call (under 8 minutes):
#
#   bash benchmarks/gpu_check.sh            # from the repository checkout
#
# Runs, each under its own timeout and whatever the others did: the GPU model,
# `pytest -m gpu` (every op spec, layer, optimizer and a LeNet step on CUDA
# against the CPU, each fused kernel against its NumPy reference), `tapegrad
# train --device cuda` on digits, `tapegrad check --device cuda` (the gradcheck
# table), bench_train.py and bench_layers.py with --device cuda against PyTorch
# CUDA in the same run; then one summary table. Needs no network and installs
# nothing: the checkout is imported through PYTHONPATH. Full logs go to
# $GPU_CHECK_LOGDIR (default: $OUT/gpu_check_logs if $OUT is set, else a new
# temporary folder). Environment: PYTHON (default python, else python3),
# GPU_CHECK_BUDGET (seconds for all steps together, default 450).
# Exit status: 0 when every step passed, 1 otherwise.
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python}
command -v "$PY" >/dev/null 2>&1 || PY=python3
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1  # a step killed by its timeout still leaves its rows in the log
BUDGET=${GPU_CHECK_BUDGET:-450}
if [ -n "${GPU_CHECK_LOGDIR:-}" ]; then LOGDIR=$GPU_CHECK_LOGDIR
elif [ -n "${OUT:-}" ]; then LOGDIR=$OUT/gpu_check_logs
else LOGDIR=$(mktemp -d /tmp/gpu_check.XXXXXX); fi
mkdir -p "$LOGDIR"
START=$(date +%s)
NAMES=() STATUS=() SECS=() KEYS=()
STEP_STATUS="" ELAPSED=0

record() {  # name status seconds key
    NAMES+=("$1") STATUS+=("$2") SECS+=("$3") KEYS+=("$4")
}

# run NAME CAP_SECONDS CMD...: the command's output to $LOGDIR/NAME.log; sets RC
run() {
    local name=$1 cap=$2 left t t0
    shift 2
    left=$((BUDGET - ($(date +%s) - START)))
    t=$((cap < left ? cap : left))
    RC=-1
    STEP_STATUS=""  # stays empty for a skipped step: finish then records nothing more
    if [ "$t" -lt 10 ]; then
        record "$name" "skipped: time budget spent" 0 ""
        return
    fi
    echo
    echo "=== $name (timeout ${t}s): $*"
    t0=$(date +%s)
    timeout -k 10 "$t" "$@" >"$LOGDIR/$name.log" 2>&1
    RC=$?
    ELAPSED=$(($(date +%s) - t0))
    case $RC in
        0) STEP_STATUS=pass ;;
        124|137) STEP_STATUS="TIMEOUT after ${t}s" ;;
        *) STEP_STATUS="FAIL (exit $RC)" ;;
    esac
}

finish() {  # name key (default: the log's last line); nothing for a step run skipped
    local key=$2
    [ -n "$STEP_STATUS" ] || return 0
    [ -n "$key" ] || key=$(tail -n 1 "$LOGDIR/$1.log" 2>/dev/null)
    record "$1" "$STEP_STATUS" "$ELAPSED" "$key"
}

# show NAME HEAD PATTERN TAIL: a long log's first lines, the lines matching PATTERN
# and its last lines; a short one whole
show() {
    local log=$LOGDIR/$1.log
    [ -f "$log" ] || return
    if [ "$(wc -l <"$log")" -le $(($2 + $4 + 2)) ]; then
        cat "$log"
    else
        head -n "$2" "$log"
        [ -n "$3" ] && grep -E "$3" "$log" | head -n 40
        tail -n "$4" "$log"
    fi
}

COMMIT="no git checkout"
if HEAD=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null); then
    COMMIT="commit $HEAD"
    git -C "$REPO" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT (+ local changes)"
fi
echo "tapegrad gpu_check: $(date -u '+%Y-%m-%d %H:%M UTC'), $COMMIT, logs in $LOGDIR"

# ------------------------------------------------------------------ the GPU
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
"$PY" - >"$LOGDIR/env.log" 2>&1 <<'EOF'
import platform, numpy
print(f"python {platform.python_version()}, numpy {numpy.__version__}")
try:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
          f"{n} GPU(s); GPU 0: {name}, {props['totalGlobalMem'] / 2**30:.0f} GiB, "
          f"compute capability {props['major']}.{props['minor']}")
except Exception as exc:
    print(f"cupy: no usable GPU ({type(exc).__name__}: {exc})")
try:
    import torch
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuda available: {torch.cuda.is_available()}")
except ImportError:
    print("torch: not installed")
import tapegrad
print(f"tapegrad.cupy_available(): {tapegrad.cupy_available()}")
EOF
cat "$LOGDIR/env.log"
[ -n "$GPU" ] && echo "nvidia-smi: $GPU"
if grep -q "cupy_available(): True" "$LOGDIR/env.log"; then
    HAVE_GPU=1
    [ -n "$GPU" ] || GPU=$(grep -o 'GPU 0: [^,]*' "$LOGDIR/env.log" | cut -c8-)
else
    HAVE_GPU=0
    GPU="none"
    echo
    echo "NO GPU PRESENT: CuPy sees no usable NVIDIA GPU on this machine, so this is a dry run:"
    echo "every CUDA step below is expected to skip or to fail with 'needs CuPy and a GPU'."
fi

# ------------------------------------------------------------------ the steps
# a test module that fails to import must not cost the GPU tests of all the others
run pytest-gpu 190 "$PY" -m pytest -m gpu -q -p no:cacheprovider --tb=line -rfE \
    --continue-on-collection-errors "$REPO/tests"
show pytest-gpu 0 "^(FAILED|ERROR)|: [A-Za-z]*(Error|Exception)" 2
finish pytest-gpu "$(tail -n 1 "$LOGDIR/pytest-gpu.log" 2>/dev/null | tr -d '=' | sed 's/^ *//')"

if "$PY" -c "import sklearn" >/dev/null 2>&1; then
    run train-digits 45 "$PY" -m tapegrad train --device cuda --data digits --epochs 2 -q \
        --out "$LOGDIR/train-digits"
    show train-digits 0 "" 6
    finish train-digits "$(grep -sE '^done:|Error' "$LOGDIR/train-digits.log" | tail -n 1)"
else
    echo
    echo "=== train-digits: scikit-learn is not installed here, and the digits dataset ships"
    echo "    inside it: tapegrad train --device cuda skipped"
    record train-digits "skipped: no scikit-learn" 0 "digits ships in scikit-learn"
fi

run check-cuda 120 "$PY" -m tapegrad check --device cuda
show check-cuda 2 " (FAIL|ERROR) " 2
finish check-cuda ""

run bench-train 60 "$PY" benchmarks/bench_train.py --device cuda --steps 6 --warmup 2
cat "$LOGDIR/bench-train.log" 2>/dev/null
finish bench-train "$(grep -sE 'B=[0-9]+ ' "$LOGDIR/bench-train.log" | sed 's/^ *//;s/  */ /g' \
    | paste -sd ';' -)"

run bench-layers 50 "$PY" benchmarks/bench_layers.py --device cuda --repeats 12
cat "$LOGDIR/bench-layers.log" 2>/dev/null
finish bench-layers "$(awk '$0 ~ /^(conv|max_pool|batch_norm|cross_entropy)/ && NF >= 6 \
    {n++; r = $(NF-3); if (r + 0 > w + 0) {w = r; row = $1 " " $2}} \
    END {if (n) printf "%d rows, worst median ratio %s (%s)", n, w, row}' \
    "$LOGDIR/bench-layers.log" 2>/dev/null)"

# ------------------------------------------------------------------ summary
TOTAL=$(($(date +%s) - START))
echo
echo "=================================== summary ==================================="
echo "GPU: $GPU"
printf '%-13s %-28s %5s  %s\n' step status s result
failed=0
for i in "${!NAMES[@]}"; do
    printf '%-13s %-28s %5s  %s\n' "${NAMES[$i]}" "${STATUS[$i]}" "${SECS[$i]}" \
        "$(echo "${KEYS[$i]}" | cut -c1-110)"
    case ${STATUS[$i]} in pass|skipped:\ no\ scikit-learn) ;; *) failed=$((failed + 1)) ;; esac
done
echo "total ${TOTAL}s (budget ${BUDGET}s); logs: $LOGDIR"
if [ "$HAVE_GPU" = 0 ]; then
    echo "NOT VERIFIED: no GPU on this machine (dry run)"
    exit 1
elif [ "$failed" = 0 ]; then
    echo "VERIFIED on hardware: $(date -u +%Y-%m-%d), $GPU"
    exit 0
else
    echo "$failed step(s) did not pass: see the logs above"
    exit 1
fi
