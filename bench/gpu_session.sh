#!/usr/bin/env bash
# One batched GPU session on the device tool's machine. Each phase is one step with its own
# time limit, so a call stays inside the tool's 600 s; GPU_PHASES picks the phases of a call.
# Logs go under /tmp/gpu-session, and $OUT (default ./gpu-out) gets one archive plus the
# step list and versions (the tool returns at most 8 files).
set -uo pipefail
final="${OUT:-gpu-out}"
out=/tmp/gpu-session
mkdir -p "$out" "$final"; touch "$out/steps.txt"
export PYTHONUNBUFFERED=1 BCG_PROFILE=ci
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
  save  # after every step, so a call cut short by the tool's limit still returns what ran
}
save() {
  tar czf "$final/logs.tgz" -C "$out" . 2>/dev/null
  cp "$out/steps.txt" "$out/versions.txt" "$final/" 2>/dev/null
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
  python3 -c 'import breakable_cuda_graphs as b; print("breakable_cuda_graphs", b.__version__)'
  python3 -c 'import cuda.bindings as c; print("cuda-bindings", c.__version__)'
  python3 -c 'import hypothesis; print("hypothesis", hypothesis.__version__)'
  nproc
} >"$out/versions.txt" 2>&1
cat "$out/versions.txt"
# The suite, or part of it (suite_part NAME LIMIT PATH...), as CI runs it but on the GPU.
# -v puts each failing test's name in the log as it fails, so a run the step's limit kills
# still names its failures; -rfE adds pytest's summary of them when it ends. The log goes
# straight under $final (the tool returns what is there even when its own limit ends the
# call), and NAME.summary.txt gets the last pytest line, the card, and every failed test.
suite_part() {
  local name=$1 limit=$2; shift 2
  step "$name" "$limit" bash -o pipefail -c 'python3 -m pytest -n auto --bcg-device=cuda -p no:cacheprovider -v -rfE "$@" 2>&1 | tee "'"$final/$name.log"'"' _ "$@"
  {
    local card last
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    last=$(grep -E '^=+ .*(passed|failed|error).* in [0-9.]+s' "$final/$name.log" | tail -n 1)
    echo "$name on $card: ${last:-no pytest summary, the step limit ended it}"
    grep -E '^(FAILED|ERROR) |\] (FAILED|ERROR) ' "$final/$name.log" | sed -E 's/^\[gw[0-9]+\] \[ *[0-9]+%\] //' | sort -u
  } >"$final/$name.summary.txt"
  cat "$final/$name.summary.txt"
}
# Each planted stream-order bug checked RUNS times (seeds 1..RUNS), JOBS at once (a loaded
# host, as under pytest -n auto): how many runs find it. A run's log is under $out/stream20.
stream_runs() {
  local runs=${STREAM_RUNS:-20} jobs=${STREAM_JOBS:-4} card start
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  start=$(date +%s)
  mkdir -p "$out/stream20"
  for bug in capture_ignores_the_default_stream unordered_side_stream replay_eager_on_capture_stream; do
    planted "$bug"
    local t0; t0=$(date +%s)
    for seed in $(seq 1 "$runs"); do
      while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 0.2; done
      # No run starts after 420 s of the phase, so the call ends inside its 600 s; the
      # summary's count of runs then says how many ran.
      if [ $(($(date +%s) - start)) -gt 420 ]; then break; fi
      ( timeout 120 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification check stream-order \
          --target "planted_$bug" --device cuda --examples 2 --seed "$seed" >"$out/stream20/${bug}_$seed.log" 2>&1
        echo "rc=$?" >>"$out/stream20/${bug}_$seed.log" ) &
    done
    wait
    local found lapsed ran
    ran=$(ls "$out"/stream20/"${bug}"_*.log 2>/dev/null | wc -l)
    found=$(grep -l '^FINDING stream-order: target-bug' "$out"/stream20/"${bug}"_*.log 2>/dev/null | wc -l)
    lapsed=$(grep -l '^FINDING stream-order: harness-error' "$out"/stream20/"${bug}"_*.log 2>/dev/null | wc -l)
    echo "stream20 $bug on $card: found in $found of $ran runs ($lapsed with a harness error), $jobs at once, $(($(date +%s) - t0)) s" | tee -a "$final/stream20.summary.txt"
  done
  save
}
# A planted copy of a property target, importable by module name for the CLI.
planted() {
  mkdir -p /tmp/planted
  printf 'from verification.planted.property_targets import build\nglobals().update({k: v for k, v in vars(build(%s)).items() if k != "__name__"})\n' "'$1'" >"/tmp/planted/planted_$1.py"
}
for phase in ${GPU_PHASES:-suite2 certify_library suite1}; do
  case $phase in
    # The suite in one call (194 s on an H100, 230 s on an H200, -n auto on 16 cores), or in
    # two (suiteA, suiteB) where one would not fit a call's 600 s.
    suite) suite_part suite 540 ;;
    suiteA) suite_part suiteA 540 tests/harness/properties tests/harness/bisect tests/harness/fuzz_op ;;
    suiteB) suite_part suiteB 540 --ignore=tests/harness/properties --ignore=tests/harness/bisect --ignore=tests/harness/fuzz_op tests ;;
    stream20) stream_runs ;;
    suite2) step matrix_2gpu_nauto 270 env OUT="$out" bash bench/gpu_pytest_matrix.sh nauto ;;
    suite1) step matrix_1gpu_nauto 200 env OUT="$out" CUDA_VISIBLE_DEVICES=0 bash bench/gpu_pytest_matrix.sh nauto ;;
    n2) step matrix_2gpu_n2 300 env OUT="$out" bash bench/gpu_pytest_matrix.sh n2 ;;
    n0) step matrix_2gpu_n0 150 env OUT="$out" bash bench/gpu_pytest_matrix.sh n0 ;;
    matrix) step matrix 330 env OUT="$out" bash bench/gpu_pytest_matrix.sh nauto n2 n0 ;;
    probes) step pool_recovery 120 python3 -m bench.probes.pool_recovery ;;
    checkall)
      for t in breakable_cudagraph verification.planted.vllm_minimal verification.targets.breakable_cuda_graphs; do
        step "check_all_$t" 120 python3 -m verification check all --target "$t" --device cuda
      done ;;
    certify_library) step certify_library 150 python3 -m verification certify --device cuda --out "$out/certify-library" ;;
    certify_vllm) step certify_vllm_minimal 240 python3 -m verification certify --target verification.planted.vllm_minimal --device cuda --examples 2000 --max-ops 16 --no-sensitivity --out "$out/certify-vllm-minimal" ;;
    certify)
      step certify_vllm_minimal 240 python3 -m verification certify --target verification.planted.vllm_minimal --device cuda --examples 2000 --max-ops 16 --no-sensitivity --out "$out/certify-vllm-minimal"
      step certify_peer 90 python3 -m verification certify --target verification.targets.breakable_cuda_graphs --device cuda --profile quick --no-sensitivity --out "$out/certify-peer" ;;
    fuzzop)
      step fuzzop_varlen 100 python3 -m verification fuzz-op examples.varlen_attention:SPEC --device cuda --examples 1000 --seed 1 --report "$out/fo-varlen"
      step fuzzop_masked 100 python3 -m verification fuzz-op examples.masked_compaction:SPEC --device cuda --examples 1000 --seed 1 --report "$out/fo-masked" ;;
    stream)
      planted unordered_side_stream
      for i in 1 2; do
        step "stream_order_planted_$i" 40 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification check stream-order --target planted_unordered_side_stream --device cuda --examples 5 --seed "$i"
      done
      step stream_order_library 60 python3 -m verification check stream-order --device cuda --examples 25 ;;
    replay_as_eager)
      # What a break sees at replay (the region's ambient state, the runner's metadata, a
      # tensor's attributes): the three idioms, the library's tests of them, and the replay
      # cost per break against the commit before (carry .baseline, a copy of that package).
      step replay_as_eager_probe 60 python3 -m bench.probes.replay_as_eager --device cuda
      step replay_as_eager_tests 120 python3 -m pytest -q -rfE -p no:cacheprovider tests/library/test_replay_as_eager.py tests/harness/test_replay_semantics.py --bcg-device=cuda
      step host_cost_vs_baseline 240 python3 -m bench.probes.host_cost_per_break --device cuda --rounds 5 --baseline .baseline/breakable_cudagraph ;;
    repetition) step repetition_10000 120 python3 -m verification check repetition --device cuda --cycles 10000 --examples 1 ;;
    mutant)
      # The GPU-only survivors of results/mutation, applied by hand to scratch copies.
      step mutants 500 env OUT="$out" bash bench/gpu_mutants.sh ;;
    fuzz1000)
      # Engine-shaped programs by default: no target-bug finding on the library, the minimal
      # vLLM target, or a correct target whose breaks return nothing (judged by out-buffer).
      step fuzz1000_library 200 python3 -m verification fuzz --device cuda --examples 1000 -q
      step fuzz1000_vllm_minimal 200 python3 -m verification fuzz --device cuda --examples 1000 -q --target verification.planted.vllm_minimal
      mkdir -p /tmp/planted
      printf 'from verification.planted.targets import build\nglobals().update({k: v for k, v in vars(build(None)).items() if k != "__name__"})\n' >/tmp/planted/planted_clean.py
      step fuzz1000_clean 200 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification fuzz --device cuda --examples 1000 -q --target planted_clean --contract out-buffer ;;
    fuzzop3)
      # The planted engine ops of tests/engine_faults.py on the GPU, whose capture pool is
      # poisoned before each capture: each faulty op found under its name (the slot mapping at
      # capture, from a count the segment before computes), each correct op clean.
      for op in ROTARY_RESHAPE SLOTS_BY_CAPTURED_COUNT BITMASK_ALIAS_VARIES BEAM_OFFSETS_ONCE KV_WRITE_DECLARED_WHOLE ROTARY_CORRECT SLOTS_CORRECT BITMASK_CORRECT BEAM_CORRECT KV_WRITE_CORRECT; do
        step "fuzzop3_$op" 60 python3 -m verification fuzz-op "tests.engine_faults:$op" --device cuda --examples 100 --seed 1
      done
      step fuzzop3_tests 120 python3 -m pytest -q -p no:cacheprovider -n 4 --bcg-device=cuda -rfE tests/harness/fuzz_op/test_engine_faults.py ;;
    fuzzop4)
      # The ops whose faults show only against a replay (tests/state_faults.py: a cache keyed
      # on version counters, a side stream started before the caller's work, an answer that
      # changes, a call counter, a workspace keyed without the dtype) and the held-out engine
      # ops kept in tests, on the GPU; then their tests and float8's with short tracebacks.
      for op in BLOCKS_VERSION_CACHED SIDE_STREAM_UNORDERED PICK_RANDOM_TIE STEP_IN_MODULE WORKSPACE_BY_SHAPE BLOCKS_CORRECT SIDE_STREAM_CORRECT PICK_CORRECT STEP_CORRECT WORKSPACE_CORRECT; do
        step "fuzzop4_$op" 60 python3 -m verification fuzz-op "tests.state_faults:$op" --device cuda --examples 50 --seed 1
      done
      for op in tests/harness/fuzz_op/heldout_ops/[a-z]*.py; do
        name=$(basename "$op" .py)
        step "heldout_$name" 60 python3 -m verification fuzz-op "tests.harness.fuzz_op.heldout_ops.$name:SPEC" --device cuda --examples 50 --seed 1
      done
      step fuzzop4_tests 180 python3 -m pytest -q -p no:cacheprovider -n 4 --bcg-device=cuda -rfE --tb=short \
        tests/harness/fuzz_op/test_state_faults.py tests/harness/fuzz_op/test_held_out_ops.py \
        tests/harness/fuzz_op/test_engine_faults.py "tests/harness/fuzz_op/test_dtypes_shapes_and_reads.py::test_a_correct_float8_quant_op_passes_fuzz_op" ;;
    seedscan)
      # Which campaign seeds find each engine bug on this card (the suite's test uses one).
      step seedscan 240 python3 -m bench.engine_bug_seeds --seeds 0-7 ;;
    fp8) step fuzzop_fp8_1000 150 python3 -m verification fuzz-op tests.faulty_ops:FLOAT8_QUANT --device cuda --examples 1000 --seed 1 ;;
    upstream)
      # The module files a target loads travel in .upstream/ (vLLM's wheel is too big to carry).
      for t in vllm sglang piecewise_cuda_graphs; do
        step "certify_$t" 150 python3 -m verification certify --target "verification.targets.$t" --target-path .upstream --device cuda --no-sensitivity --out "$out/upstream-$t"
      done ;;
    duties)
      # A target guarding the collector and its capture threads itself, relying on its caller
      # for a side stream: the correct one passes check all, each planted duty bug is found by
      # its check, and the tests of both; then the pool check on vLLM's module, whose one
      # 2 MiB segment against a one-graph capture reserving nothing is no finding now.
      step duties_check_all_clean 150 python3 -m verification check all --target verification.planted.duty_targets --device cuda
      mkdir -p /tmp/planted
      for bug in collector_frozen_only:faults collector_enabled_on_exit:faults device_synced_per_segment:threads; do
        printf 'from verification.planted.duty_targets import build\nglobals().update({k: v for k, v in vars(build(%s)).items() if k != "__name__"})\n' "'${bug%%:*}'" >"/tmp/planted/duty_${bug%%:*}.py"
        step "duties_${bug%%:*}" 90 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification check "${bug##*:}" --target "duty_${bug%%:*}" --device cuda --examples 25
      done
      step duties_tests 200 python3 -m pytest -q -p no:cacheprovider -n 4 --bcg-device=cuda -rfE tests/harness/properties/test_declared_duties.py tests/harness/properties/test_caller_duties.py tests/harness/properties/test_pool.py
      step duties_vllm_pool 150 python3 -m verification check pool --target verification.targets.vllm --target-path .upstream --device cuda ;;
    pool_direct)
      # Where a capture given pool=p puts its memory, asked of torch's allocator: a capture
      # ignoring its pool is found by that question, the library and vLLM's minimal capture keep
      # their memory in the pool given, an out-of-order demonstration that cannot corrupt is an
      # `undecided` note (never a harness error), and the question's reproducer stands alone.
      step pool_direct_tests 240 python3 -m pytest -q -p no:cacheprovider -n 4 --bcg-device=cuda -rfE tests/harness/properties/test_pool_placement.py tests/harness/properties/test_pool.py tests/harness/properties/test_standalone.py::test_every_fixed_scenario_reproducer_passes_on_the_library_importing_only_torch_and_it
      planted pool_not_honoured
      step pool_direct_planted 120 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification check pool --target planted_pool_not_honoured --device cuda --examples 5
      step pool_direct_library 150 python3 -m verification check pool --device cuda ;;
    threads_lifetime)
      # Captures built in one thread and captured, replayed and reset in others, on the GPU:
      # the lifetime tests (library and minimal vLLM clean, both planted lifetime bugs found
      # in one line), the threads tests and reproducer, then the check on the library, the
      # minimal vLLM and (where .upstream travels) the engines' adapters.
      step threads_lifetime_tests 240 python3 -m pytest -q -p no:cacheprovider -n 4 --bcg-device=cuda -rfE \
        tests/harness/properties/test_lifetimes.py tests/harness/properties/test_threads.py \
        "tests/harness/properties/test_program_reproducers.py::test_a_drawn_program_reproducer_fails_on_the_planted_bug_importing_only_torch_and_it[threads]"
      for t in breakable_cudagraph verification.planted.vllm_minimal; do
        step "threads_lifetime_check_$t" 120 python3 -m verification check threads --target "$t" --device cuda --examples 25
      done
      if [ -d .upstream ]; then
        for t in vllm sglang piecewise_cuda_graphs; do
          step "threads_lifetime_check_$t" 120 python3 -m verification check threads --target "verification.targets.$t" --target-path .upstream --device cuda --examples 20
        done
      fi ;;
    causes)
      # Causes as values on the GPU: the nested-op raise named as such, a planted mismatch
      # named at the break where replay parts from eager (run the upstream phase beside it:
      # its certificates should list the simulator's causes, a nested-check SIGABRT merged).
      step causes_tests 120 python3 -m pytest -q -p no:cacheprovider -n 0 --bcg-device=cuda -rfE tests/harness/test_root_causes.py tests/harness/test_divergence.py tests/harness/test_oracle.py ;;
    ranks_nccl)
      # Programs on two ranks over NCCL, one GPU each (a machine of 2 GPUs): fuzz --ranks 2 and
      # check ranks clean on the library, the minimal vLLM target and (where .upstream travels)
      # the engines' adapters; each planted rank bug found by its check (rc 1), its reproducer
      # written under $out/ranks-*. NVML's device count, so the parent forks its ranks before
      # the CUDA runtime starts.
      export PYTORCH_NVML_BASED_CUDA_CHECK=1
      for t in breakable_cudagraph verification.planted.vllm_minimal; do
        step "ranks_nccl_fuzz_$t" 240 python3 -m verification fuzz --ranks 2 --device cuda --examples 300 --target "$t" --report "$out/ranks-$t"
        step "ranks_nccl_check_$t" 200 python3 -m verification check ranks --device cuda --examples 40 --target "$t" --report "$out/ranks-check-$t"
      done
      if [ -d .upstream ]; then
        for t in vllm sglang; do
          step "ranks_nccl_check_$t" 200 python3 -m verification check ranks --device cuda --examples 40 --target "verification.targets.$t" --target-path .upstream
        done
      fi
      mkdir -p /tmp/planted
      for bug in rank_dependent_break:fuzz collective_captured:fuzz capture_set_rank_local:check capture_awaits_peers:check; do
        printf 'from verification.planted.rank_targets import build\nglobals().update({k: v for k, v in vars(build(%s)).items() if k != "__name__"})\n' "'${bug%%:*}'" >"/tmp/planted/ranks_${bug%%:*}.py"
        if [ "${bug##*:}" = fuzz ]; then
          step "ranks_nccl_planted_${bug%%:*}" 120 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification fuzz --ranks 2 --device cuda --examples 5 --hang-seconds 30 --target "ranks_${bug%%:*}" --report "$out/ranks-planted"
        else
          step "ranks_nccl_planted_${bug%%:*}" 120 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification check ranks --device cuda --examples 4 --hang-seconds 30 --target "ranks_${bug%%:*}" --report "$out/ranks-planted"
        fi
      done ;;
    sweep8) step capture_sweep_8 300 python3 -m bench.capture_sweep --layers 8 --out "$out/capture_sweep_8" ;;
    sweep32) step capture_sweep_32 400 python3 -m bench.capture_sweep --layers 32 --out "$out/capture_sweep_32" ;;
    sweep) step capture_sweep 560 python3 -m bench.capture_sweep --layers 8 32 --out "$out/capture_sweep" ;;
    share)
      # Shared executables through CUDA's own graph API (cuda-bindings): the library's tests
      # and the planted sharing bugs' tests on the GPU, then check pool with sharing on.
      step share_tests 200 python3 -m pytest -q -p no:cacheprovider -n 4 --bcg-device=cuda -rfE tests/library/test_shared_executables.py tests/harness/properties/test_shared_executables.py tests/library/test_break_holding_cache.py
      step share_check_pool 200 env BREAKABLE_CUDAGRAPH_SHARE_EXECUTABLES=1 python3 -m verification check pool --device cuda ;;
    memory)
      step memory_accounting 200 env OUT="$out" python3 -m bench.probes.memory_accounting
      step graph_exec_memory 60 python3 -m bench.probes.graph_exec_memory --out "$out/graph_exec_memory"
      step idioms_and_memory 200 python3 -m pytest -q -p no:cacheprovider --bcg-device=cuda tests/sim/test_model_idioms.py tests/sim/test_memory_accounting.py ;;
    certify_time)
      # The default certify as a new user runs it (evidence measured, then cached) and without
      # the evidence, each timed to its verdict.
      step certify_fresh 150 env BCG_CACHE_DIR=/tmp/bcg-cache python3 -m verification certify --device cuda --out "$out/certify-fresh"
      step certify_cached 150 env BCG_CACHE_DIR=/tmp/bcg-cache python3 -m verification certify --device cuda --out "$out/certify-cached"
      step certify_no_sensitivity 150 python3 -m verification certify --device cuda --no-sensitivity --out "$out/certify-no-sensitivity" ;;
    sweep_rounds) step capture_sweep_rounds 450 python3 -m bench.capture_sweep --layers 8 --rounds 3 --out "$out/capture_sweep_rounds" ;;
    dedup) step graph_exec_update 120 python3 -m bench.probes.graph_exec_update --out "$out/graph_exec_update" ;;
    overlap)
      step instantiate_overlap_thread_local 150 python3 -m bench.probes.instantiate_overlap --rounds 4 --out "$out/overlap"
      step instantiate_overlap_global 120 python3 -m bench.probes.instantiate_overlap --mode global --rounds 3 --out "$out/overlap" ;;
    profile)
      # Where the per-capture loop (vLLM's runner) spends its sweep against the minimal one and
      # the capture set: each under cProfile, allocator snapshots counted and timed.
      step capture_profile 300 python3 -m bench.probes.capture_breakdown --rounds 2 --profile --variants per_capture,minimal,capture_set --out "$out/profile" ;;
    breakdown) step capture_breakdown 420 python3 -m bench.probes.capture_breakdown --rounds 3 --variants capture_set,own_storage,minimal --out "$out/breakdown" ;;
    bisect)
      # Each planted model of tests/harness/bisect by the command a user runs, then the tests.
      for m in frozen_host_value cpu_scalar_temperature attention_not_a_break break_caches_a_tensor host_branch rebound_input rebound_positions host_read_not_a_break returns_argument_or_new stream_race; do
        step "bisect_$m" 60 python3 -m verification bisect "tests.harness.bisect.planted_models:$m" --device cuda --steps 3
      done
      step bisect_correct_20 60 python3 -m verification bisect tests.harness.bisect.planted_models:correct --device cuda --steps 20
      step bisect_llama_20 120 python3 -m verification bisect tests.harness.bisect.llama_model:llama --device cuda --steps 20
      step bisect_example 60 python3 -m verification bisect examples.bisect_transformer:transformer --device cuda
      step bisect_tests 200 python3 -m pytest -q -p no:cacheprovider -n 8 --bcg-device=cuda -rfE tests/harness/bisect tests/library/test_capture_set.py tests/harness/properties/test_capture_sets.py ;;
    bisect_agree)
      # The op and line bisect names for every planted model, and each model's op trace, on
      # the GPU and on the simulator (GPU hidden), then where the two differ (rc 1 if any).
      step bisect_agree_cuda 300 python3 -m bench.bisect_agreement --device cuda --out "$out/bisect-cuda.json"
      step bisect_agree_sim 300 python3 -m bench.bisect_agreement --device sim --out "$out/bisect-sim.json"
      step bisect_agree_compare 30 python3 -m bench.bisect_agreement --compare "$out/bisect-cuda.json" "$out/bisect-sim.json" --md "$out/bisect-agreement.md"
      step bisect_op_traces 120 python3 -m pytest -q -p no:cacheprovider --bcg-device=cuda -rfEs tests/harness/bisect/test_op_traces.py ;;
    hangs)
      # A call that never returns is a finding and the run goes on: the bound's own tests, the
      # planted replay deadlock through nested (in a child, as on a GPU), and fuzz after a hang.
      step hangs_tests 200 python3 -m pytest -q -p no:cacheprovider -n 0 --bcg-device=cuda -rfE tests/harness/test_bounds.py tests/harness/properties/test_hangs.py tests/harness/properties/test_nested.py
      mkdir -p /tmp/planted
      printf 'from verification.planted.property_targets import build\nglobals().update({k: v for k, v in vars(build("replay_inside_break_deadlocks")).items() if k != "__name__"})\n' >/tmp/planted/planted_replay_deadlock.py
      step hangs_check_nested_planted 120 env PYTHONPATH="$PYTHONPATH:/tmp/planted" python3 -m verification check nested --target planted_replay_deadlock --device cuda --hang-seconds 10 --report "$out/hangs-nested" ;;
    bench)
      step bench 150 python3 -m bench --device cuda --out "$out/bench"
      step replay_probe 60 python3 -m bench.replay_probe ;;
  esac
done
tail -n 3 "$out"/*.log
save
