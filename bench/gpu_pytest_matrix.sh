#!/usr/bin/env bash
# The test suite on one GPU host under pytest -n 0, -n 2 and -n auto: wall time of each,
# with nvidia-smi sampled every second (per-GPU utilisation and memory, and which process
# sits on which GPU), to show that with n GPUs worker i runs on GPU i mod n.
# Usage, from the repo root: bench/gpu_pytest_matrix.sh [n0] [n0all] [n2] [nauto]
#   (default: n0 n2 nauto)
# Writes $OUT/pytest_matrix_<k>gpu_<modes>.{json,tgz} (OUT defaults to ./gpu-out), and per mode
# its log and the names of its failures (pytest_<k>gpu_<modes>_<mode>{.log,_failures.txt}).
# n0 runs a subset (N0_TESTS) under -n 0 to stay affordable; n0all runs the whole suite (~6 min).
set -uo pipefail
final="${OUT:-gpu-out}"
out=/tmp/gpu-pytest-matrix
rm -rf "$out"; mkdir -p "$out" "$final"
export PYTHONUNBUFFERED=1 BCG_PROFILE=ci
if ls .whl/*.whl >/dev/null 2>&1; then  # same convention as bench/gpu_session.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
n0_tests="${N0_TESTS:-tests/sim/test_graph_semantics.py tests/library/test_capture.py tests/library/test_breaks.py tests/plugin/test_workers.py tests/harness/test_fuzz_library.py}"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
modes="${*:-n0 n2 nauto}"
tag="${gpus}gpu_${modes// /_}"
nvidia-smi -L >"$out/gpus.txt"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits \
  -l 1 >"$out/gpu_samples.csv" 2>&1 &
sampler_gpu=$!
nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,used_memory --format=csv,noheader,nounits \
  -l 1 >"$out/app_samples.csv" 2>&1 &
sampler_apps=$!
trap 'kill $sampler_gpu $sampler_apps 2>/dev/null' EXIT
: >"$out/runs.csv"
for m in $modes; do
  case $m in
    n0) args=(-n 0 $n0_tests) ;;
    n0all) args=(-n 0) ;;
    n2) args=(-n 2) ;;
    nauto) args=(-n auto) ;;
    *) echo "error: unknown mode $m (n0, n0all, n2, nauto)" >&2; exit 2 ;;
  esac
  start=$(date +%s.%N)
  # -rfE: pytest's summary names every failure; the log is copied under $final as it is
  # written, so a run cut short by the caller's limit still returns what it printed.
  timeout 580 python3 -m pytest "${args[@]}" --bcg-device=cuda -q -p no:cacheprovider -rfEs \
    2>&1 | tee "$out/pytest_$m.log" >"$final/pytest_${tag}_$m.log"
  rc=${PIPESTATUS[0]}
  grep -E '^(FAILED|ERROR) ' "$out/pytest_$m.log" >"$final/pytest_${tag}_${m}_failures.txt"
  end=$(date +%s.%N)
  echo "$m,$rc,$start,$end,$(tail -n 1 "$out/pytest_$m.log" | tr ',' ';')" | tee -a "$out/runs.csv"
done
sleep 2
kill $sampler_gpu $sampler_apps 2>/dev/null
python3 - "$out" "$final/pytest_matrix_$tag.json" <<'EOF'
"""Per run: wall seconds, pytest's summary, and per GPU the mean/max utilisation, the
peak memory and the number of distinct processes seen on it during the run."""
import csv, json, sys, datetime as dt
from pathlib import Path
out, target = Path(sys.argv[1]), Path(sys.argv[2])
def when(text):
    return dt.datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
gpu_rows = [r for r in csv.reader(open(out / "gpu_samples.csv")) if len(r) == 4]
app_rows = [r for r in csv.reader(open(out / "app_samples.csv")) if len(r) == 4]
uuids = {}
for line in (out / "gpus.txt").read_text().splitlines():  # "GPU 0: NVIDIA H200 (UUID: GPU-...)"
    uuids[line.split("UUID: ")[1].rstrip(")")] = line.split(":")[0].split()[1]
runs = []
for mode, rc, start, end, summary in csv.reader(open(out / "runs.csv")):
    t0, t1 = float(start), float(end)
    per_gpu = {}
    for stamp, index, util, mem in gpu_rows:
        if t0 <= when(stamp) <= t1:
            g = per_gpu.setdefault(index.strip(), {"util": [], "mem": [], "pids": set()})
            g["util"].append(float(util)); g["mem"].append(float(mem))
    for stamp, uuid, pid, _ in app_rows:
        if t0 <= when(stamp) <= t1 and uuid.strip() in uuids:
            per_gpu.setdefault(uuids[uuid.strip()], {"util": [], "mem": [], "pids": set()})["pids"].add(pid)
    runs.append({
        "mode": mode, "rc": int(rc), "wall_s": round(t1 - t0, 1), "summary": summary,
        "gpus": {i: {"util_mean": round(sum(g["util"]) / max(len(g["util"]), 1), 1),
                     "util_max": max(g["util"], default=0), "mem_max_mib": max(g["mem"], default=0),
                     "processes": len(g["pids"]), "samples": len(g["util"])}
                 for i, g in sorted(per_gpu.items())},
    })
target.write_text(json.dumps({"gpus": len(uuids), "runs": runs}, indent=1))
print(target.read_text())
EOF
tail -n 3 "$out"/pytest_*.log
tar czf "$final/pytest_matrix_$tag.tgz" -C "$out" .
