#!/usr/bin/env bash
# The GPU checks of ssmpde, as run on a lent CUDA machine without network (see
# docs/benchmarks.md, "Selective scans on a GPU"), from the repository root. The long steps run detached, so that a later call
# can collect them, and log to $LOGS (default /tmp/ssmpde-gpu): the mamba-ssm build
# (mamba_build.log), the training (train.log); the tuning sweep writes its result there
# (tune.json). The other steps print to the terminal.
#
#   bash benchmarks/gpu/session.sh all      # the whole prepared device run (below), in about
#                                           # 7 minutes; results in $OUT (or $LOGS)
#   bash benchmarks/gpu/session.sh setup    # carried wheels; start the mamba-ssm build detached
#   bash benchmarks/gpu/session.sh data     # Darcy data: 1000 + 200 FNO samples at 85²
#   bash benchmarks/gpu/session.sh test     # kernel tests compiled on CUDA (tests/kernels)
#   bash benchmarks/gpu/session.sh tune S   # sweep the 1D scan's tuning for S seconds
#   bash benchmarks/gpu/session.sh bench    # python -m benchmarks.bench_scan --gpu (waits for
#                                           # the build; with the tune step's best setting if
#                                           # it ran)
#   bash benchmarks/gpu/session.sh train N  # GeoMaNO Darcy preset, N epochs, detached
#   bash benchmarks/gpu/session.sh wait S   # wait up to S seconds for the training; summarise
#
# The training's figures then go to benchmarks/results/training_darcy_gpu.json with
#
#   python -m benchmarks.gpu.training_result /tmp/run-geomano-darcy/metrics.jsonl --device NAME
#
# Wheels for packages the machine lacks (netCDF4, cftime, pyFFTW; dask, partd, locket for
# writing datasets) and mamba-ssm's source distribution travel in .whl/; fetch them on a machine
# with the package registry, in the repository root:
#
#   bash benchmarks/gpu/session.sh wheels   # then carry .whl (ignored by git)
#
# Before a device session, on the CPU machine: `bash benchmarks/gpu/session.sh wheels` and
# `python -m benchmarks.gpu.kernel_resources --variants` (every recurrent kernel variant
# compiles for sm_90; no GPU needed). Then `all` is one call of the device tool (carry .whl;
# timeout_s 540):
#   1. setup (about 20 s), then the mamba-ssm build (about 2 minutes, detached) beside the
#      compiled tests of the recurrent 1D kernels (test.log; cut at 150 s);
#   2. the recurrent kernels' tuning sweep at Mamba's size, float32 (tune_recurrent.json; 80 s);
#   3. bench_scan --gpu --no-2d with that tuning: both Triton kernels and mamba-ssm at Mamba's
#      size, GeoMaNO's 1936 tokens and length 64, float32 and bfloat16, fwd and fwd+bwd
#      (scan_gpu.json, bench.log);
#   4. one GeoMaNO Darcy epoch on synthetic inputs (epoch.log).
# Each step has its own time limit (8 minutes in all at worst), so a slow one cannot eat the
# next one's time; a Triton kernel that fails on the GPU is reported and the rest still run.
set -u
LOGS=${LOGS:-/tmp/ssmpde-gpu}
mkdir -p "$LOGS"
# the carried wheels and mamba-ssm; ssmpde and benchmarks import from the working directory
export PYTHONPATH=/tmp/site:/tmp/mamba/src:/tmp/mamba/build
export PYTHONUNBUFFERED=1
step=${1:?usage: session.sh wheels|all|setup|data|test|tune S|bench|train N|wait S}

case "$step" in
all)
    dest=${OUT:-$LOGS}
    mkdir -p "$dest"
    start=$SECONDS
    bash "$0" setup || exit 1
    timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
        tests/kernels/test_scan_gpu.py tests/kernels/test_scan_triton.py -k recurrent \
        >"$dest/test.log" 2>&1
    echo "tests: $(tail -1 "$dest/test.log") ($((SECONDS - start)) s)"
    timeout 60 bash "$0" wait-build
    timeout 110 python3 -m benchmarks.gpu.tune_scan --kernel recurrent --budget 80 \
        --repeats 8 --out "$dest/tune_recurrent.json" >"$dest/tune.log" 2>&1
    tail -2 "$dest/tune.log"
    echo "tuned ($((SECONDS - start)) s)"
    tuning=()
    [ -f "$dest/tune_recurrent.json" ] && grep -q '"best"' "$dest/tune_recurrent.json" \
        && tuning=(--tuning "$dest/tune_recurrent.json")
    timeout 150 python3 -m benchmarks.bench_scan --gpu --no-2d --repeats 10 "${tuning[@]}" \
        --out "$dest/scan_gpu.json" 2>&1 | tee "$dest/bench.log"
    echo "benchmarked ($((SECONDS - start)) s)"
    timeout 50 python3 -m benchmarks.gpu.epoch_time --epochs 1 2>&1 | tee "$dest/epoch.log"
    cp "$LOGS/mamba_build.log" "$dest/" 2>/dev/null
    echo "done in $((SECONDS - start)) s"
    ;;
wait-build)
    for _ in $(seq 600); do
        grep -q "built selective_scan_cuda\|Error\|error:" "$LOGS/mamba_build.log" && break
        sleep 1
    done
    tail -3 "$LOGS/mamba_build.log"
    ;;
wheels)
    mkdir -p .whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl netCDF4 cftime pyFFTW dask partd locket || exit 1
    # mamba-ssm ships only a source distribution; its metadata step needs torch, not CUDA.
    MAMBA_SKIP_CUDA_BUILD=TRUE python3 -m pip download -q --no-deps --no-build-isolation \
        -d .whl mamba-ssm==2.3.2.post1
    ;;
setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, triton, numba, xarray, netCDF4; print('torch', torch.__version__, \
'cuda', torch.version.cuda, 'triton', triton.__version__, 'numba', numba.__version__)"
    setsid nohup python3 -m benchmarks.gpu.build_mamba_ssm .whl/mamba_ssm-*.tar.gz \
        --out /tmp/mamba >"$LOGS/mamba_build.log" 2>&1 &
    ;;
data)
    start=$SECONDS
    python3 -m ssmpde.cli generate darcy --preset fno --samples 1200 --seed 0 \
        --batch-size 32 --no-progress --out /tmp/darcy85.nc || exit 1
    echo "generated 1200 Darcy samples in $((SECONDS - start)) s"
    ;;
test)
    python3 -m pytest -q -p no:cacheprovider tests/kernels/test_scan_gpu.py \
        tests/kernels/test_scan_triton.py tests/kernels/test_reference.py \
        tests/kernels/test_cross_scan.py -W ignore::DeprecationWarning
    ;;
tune|bench)
    bash "$0" wait-build
    if [ "$step" = tune ]; then
        python3 -m benchmarks.gpu.tune_scan --budget "${2:-240}" --out "$LOGS/tune.json"
    else
        tuning=()
        [ -f "$LOGS/tune.json" ] && tuning=(--tuning "$LOGS/tune.json")
        python3 -m benchmarks.bench_scan --gpu --repeats ${REPEATS:-20} "${tuning[@]}"
    fi
    ;;
train)
    epochs=${2:?epochs}
    setsid nohup python3 -m ssmpde.cli train geomano --preset darcy --data /tmp/darcy85.nc \
        --num-test 200 --epochs "$epochs" --batch-size 4 --device cuda --no-progress \
        --out /tmp/run-geomano-darcy >"$LOGS/train.log" 2>&1 &
    ;;
wait)
    for _ in $(seq "${2:?seconds}"); do
        pgrep -f "ssmpde.cli train" >/dev/null || break
        sleep 1
    done
    tail -5 "$LOGS/train.log"
    cat /tmp/run-geomano-darcy/metrics.jsonl
    ;;
*)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac
