#!/usr/bin/env bash
# One batched GPU session (the device tool's machine): versions, the whole test suite on
# real CUDA, the 2,000-example fuzz campaign, the peer adapter, and the benchmarks.
# Logs go to $OUT (or ./gpu-out); results/gpu/summary is written from them afterwards.
set -uo pipefail
final="${OUT:-gpu-out}"
out=/tmp/gpu-session
rm -rf "$out"; mkdir -p "$out" "$final"; : >"$out/steps.txt"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
step() {  # step NAME TIMEOUT CMD...: runs CMD, logs to $out/NAME.log, records rc and time
  local name=$1 limit=$2; shift 2
  local t0; t0=$(date +%s%N)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf '%s rc=%s seconds=%d.%03d cmd=%s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) "$*" | tee -a "$out/steps.txt"
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
  python3 -c 'import breakable_cuda_graphs as b; print("breakable_cuda_graphs", b.__version__)'
} >"$out/versions.txt" 2>&1
cat "$out/versions.txt"
for phase in ${GPU_PHASES:-tests certify fuzz peer bench}; do
  case $phase in
    certify) step certify 120 python3 -m verification certify --device cuda --out "$out/certificate" ;;
    tests) step pytest 240 python3 -m pytest -n 8 --bcg-device=cuda -q -p no:cacheprovider -rs ;;
    fuzz)
      step fuzz2000 150 python3 -m verification fuzz --device cuda --examples 2000 --seed 1 --report "$out/fuzz-report"
      step fuzz2000_big 150 python3 -m verification fuzz --device cuda --examples 2000 --seed 2 --max-ops 16 --max-breaks 6 --report "$out/fuzz-big-report" ;;
    peer) step peer 120 python3 -m verification fuzz --device cuda --target verification.targets.breakable_cuda_graphs --examples 300 --seed 1 --report "$out/peer-report" ;;
    bench)
      step capture_time 60 python3 bench/capture_time.py --device cuda
      step fuzz_throughput 90 python3 bench/fuzz_throughput.py --device cuda --programs 100
      cp results/*cuda*.json "$out/" 2>/dev/null ;;
  esac
done
tail -n 3 "$out"/*.log
# The device tool returns at most 8 files: one archive plus the two summaries.
tar czf "$final/logs.tgz" -C "$out" .
cp "$out/steps.txt" "$out/versions.txt" "$final/"
