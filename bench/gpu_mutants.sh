#!/usr/bin/env bash
# The library's GPU-only mutants (results/mutation/README.md), applied by hand to scratch
# copies, since the GPU machine has no cosmic-ray: for each, the library's tests that should
# kill it, then the harness alone (fuzz, then check all) on the GPU.
# Usage, from the repo root: bench/gpu_mutants.sh; writes $OUT/gpu_mutants.jsonl (OUT
# defaults to ./gpu-out) and one log per mutant and stage. An rc of 1 is a kill, 0 a
# survivor. DEVICE=sim tries the script on a machine without a GPU.
set -uo pipefail
out="${OUT:-gpu-out}"
mkdir -p "$out"
export BCG_PROFILE=ci PYTHONUNBUFFERED=1
device="${DEVICE:-cuda}"
site="${PYTHONPATH:-}"
# name | file | sed expression | the library tests expected to kill it
mutants=(
  "arguments_range_end|breakable_cudagraph/arguments.py|s/if start <= address < end:/if start <= address <= end:/|test_pool_memory_ranges"
  "arguments_nbytes_1|breakable_cudagraph/arguments.py|s/storage.nbytes() > 0 else/storage.nbytes() > 1 else/|one_byte"
  "arguments_layout_and|breakable_cudagraph/arguments.py|s/        or tensor.layout is not torch.strided/        and tensor.layout is not torch.strided/|sparse"
)
: >"$out/gpu_mutants.jsonl"
for row in "${mutants[@]}"; do
  IFS='|' read -r name file expr tests <<<"$row"
  copy="/tmp/mutant-$name"
  rm -rf "$copy" && cp -r . "$copy" && sed -i "$expr" "$copy/$file"
  if cmp -s "$file" "$copy/$file"; then
    echo "{\"mutant\": \"$name\", \"error\": \"the edit no longer applies\"}" | tee -a "$out/gpu_mutants.jsonl"
    continue
  fi
  verdicts=()
  (cd "$copy" && PYTHONPATH="$copy${site:+:$site}" timeout 300 python3 -m pytest -q -p no:cacheprovider \
    --bcg-device="$device" tests/library/test_arguments.py -k "$tests") >"$out/$name.tests.log" 2>&1
  verdicts+=("\"tests_rc\": $?")
  for stage in "fuzz --device $device" "check all --device $device"; do
    key=$(echo "$stage" | cut -d' ' -f1)
    (cd /tmp && PYTHONPATH="$copy${site:+:$site}" timeout 300 python3 -P -m verification $stage) \
      >"$out/$name.$key.log" 2>&1
    verdicts+=("\"${key}_rc\": $?")
  done
  line="{\"mutant\": \"$name\", $(IFS=,; echo "${verdicts[*]}")}"
  echo "$line" | tee -a "$out/gpu_mutants.jsonl"
done
