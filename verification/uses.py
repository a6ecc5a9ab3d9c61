"""The grammar of uses: every way a caller can use a target's public API, as data.

Each :class:`Use` is one dimension, derived from the API surface (an entry point, a thing that
crosses it, a lifetime event), with the values a real caller may give it, what in the harness
draws it (a catalog the fuzzer draws program steps from, or the property check whose
scenarios vary it) and an engine that uses it. ``tests/harness/test_uses.py`` resolves every
``drawn_by`` to the catalog or check it names and keeps the table in ``docs/harness.md``
equal to :func:`markdown_table`, so a dimension is never listed without something drawing it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The entry points a target exposes, as a caller meets them.
DECORATOR = "eager_break_during_capture"
CAPTURE = "BreakableCUDAGraphCapture"
REPLAY = "replay()"
RUNNER = "runner / capture set"
STEP = "between steps"


@dataclass(frozen=True)
class Use:
    """One dimension: at ``entry``, ``crossing`` (what crosses the entry point) varies over
    ``values``; ``drawn_by`` is ``fuzz:<module>:<name>`` (the catalog programs draw it from)
    or ``check:<name>`` (the property check that draws it); ``engine`` uses it."""

    entry: str
    crossing: str
    dimension: str
    values: tuple[str, ...]
    drawn_by: str
    engine: str


USES: tuple[Use, ...] = (
    Use(
        DECORATOR,
        "the callable",
        "how it is defined and bound",
        ("function", "nn.Module method", "staticmethod", "classmethod", "partial", "__call__"),
        "fuzz:verification.ops.bindings:BINDINGS",
        "vLLM attention layers' decorated `forward` (vllm/attention/layer.py)",
    ),
    Use(
        DECORATOR,
        "the callable",
        "one function shared by many steps",
        ("own function", "shared by every layer", "a second slot"),
        "fuzz:verification.ops.breaks:ENGINE_KEY",
        "one `unified_attention_with_output` for all layers (vLLM)",
    ),
    Use(
        DECORATOR,
        "the call",
        "the region's `with` block around it",
        ("none", "autocast", "no_grad", "inference_mode", "default dtype", "sdpa_kernel"),
        "fuzz:verification.ops.ambient:AMBIENT",
        "LoRA under autocast; sampling under no_grad (vLLM, SGLang)",
    ),
    Use(
        DECORATOR,
        "an argument",
        "how buffers are passed and returned",
        ("positional", "keywords", "container", "nested", "view", "strided view", "pair"),
        "fuzz:verification.ops.out_buffer:FORMS",
        "vLLM's out-buffer attention; SGLang's `forward_extend(..., out)`",
    ),
    Use(
        DECORATOR,
        "an argument",
        "host metadata the runner rewrites in place",
        ("dataclass", "list", "dict", "tensor on the host", "plain int"),
        "fuzz:verification.ops.host:HOST_FORMS",
        "attention metadata with sequence lengths (vLLM `CommonAttentionMetadata`)",
    ),
    Use(
        DECORATOR,
        "an argument",
        "Python attributes on a tensor",
        ("none", "an attribute on a view"),
        "fuzz:verification.ops.ambient:TAG",
        "structured-output code tagging logits (vLLM)",
    ),
    Use(
        DECORATOR,
        "an argument",
        "dtype, shape and layout",
        ("float32/16, bfloat16, float64, float8, int, bool", "0-d", "views", "transposes"),
        "fuzz:verification.programs:default_input_dtypes",
        "fp8 KV caches, bf16 activations (vLLM, SGLang)",
    ),
    Use(
        DECORATOR,
        "the result",
        "what a break returns",
        ("None", "an argument", "a fresh tensor", "a view of an argument", "changing per call"),
        "fuzz:verification.programs:break_step_allowed",
        "the logits processor returning its argument or a new tensor (vLLM)",
    ),
    Use(
        DECORATOR,
        "the result",
        "how long a returned tensor is the caller's",
        ("held by the caller only", "read after later allocations"),
        "check:pool",
        "a logits processor returning a new tensor (vLLM `LogitsProcessor`)",
    ),
    Use(
        DECORATOR,
        "the call",
        "called inside another break",
        ("top level", "inside a break's eager run", "inside a nested capture"),
        "check:nested",
        "attention calling a decorated KV-transfer op (vLLM `maybe_transfer_kv_layer`)",
    ),
    Use(
        DECORATOR,
        "the call",
        "the thread calling it",
        ("the capturing thread", "another thread, eagerly, during a capture"),
        "check:threads",
        "micro-batching threads (vLLM `ubatching`)",
    ),
    Use(
        DECORATOR,
        "the call",
        "the stream it runs on",
        ("the capture stream", "a side stream joined or not", "the default stream"),
        "check:stream-order",
        "overlapped communication streams (SGLang two-batch overlap)",
    ),
    Use(
        DECORATOR,
        "the call",
        "it raises",
        ("at capture", "at replay", "caught inside the region"),
        "check:faults",
        "an attention backend refusing a shape (vLLM)",
    ),
    Use(
        CAPTURE,
        "the object",
        "which thread constructs, enters and replays it",
        ("one thread", "built in one, captured in another", "replayed from another"),
        "check:threads",
        "runners built before micro-batching threads capture (vLLM `gpu_model_runner`)",
    ),
    Use(
        CAPTURE,
        "the object",
        "the capture error mode",
        ("global", "thread_local", "relaxed"),
        "check:threads",
        "vLLM passes none (global); SGLang thread_local",
    ),
    Use(
        CAPTURE,
        "an argument",
        "the pool it is given",
        ("none", "shared with earlier captures", "a fresh handle"),
        "check:pool",
        "one pool for every batch size (vLLM `graph_pool`, SGLang `global_graph_memory_pool`)",
    ),
    Use(
        CAPTURE,
        "the object",
        "what `with ... as` binds",
        ("the capture itself, replayed through that name",),
        "fuzz:verification.execute:CapturedProgram",
        "`with BreakableCUDAGraphCapture(...) as capture:` (vLLM's and SGLang's return self)",
    ),
    Use(
        CAPTURE,
        "the object",
        "entered inside another capture",
        ("no", "a new object", "one made before", "inside a break", "the open one again"),
        "check:nested",
        "a drafter captured inside a target step (speculative decoding)",
    ),
    Use(
        CAPTURE,
        "the object",
        "dropped, collected, frozen collector",
        ("kept", "freed by the collector mid-capture", "collector paused by the caller"),
        "check:faults",
        "vLLM and SGLang freeze the collector around capture",
    ),
    Use(
        CAPTURE,
        "the object",
        "dropped with the collector off",
        ("freed by reference counting alone",),
        "check:pool",
        "vLLM's `gc.freeze()` after capture keeps what only the collector frees",
    ),
    Use(
        REPLAY,
        "the object",
        "how often and how many captures",
        ("once", "thousands of cycles", "capture, reset, capture again"),
        "check:repetition",
        "every decode step replays (all engines)",
    ),
    Use(
        REPLAY,
        "the call",
        "started from inside a break",
        ("no", "another capture's replay inside a break"),
        "check:nested",
        "a drafter's graph replayed inside the target model's step (EAGLE in SGLang)",
    ),
    Use(
        REPLAY,
        "the call",
        "which stream and order of captures",
        ("the capture stream", "another stream", "any order of sizes"),
        "check:engine",
        "the runner replaying the size of the batch (vLLM, SGLang)",
    ),
    Use(
        RUNNER,
        "the object",
        "sizes, order and shared pool of a capture set",
        ("largest first", "any order", "one pool"),
        "check:engine",
        "capture of every batch size, largest first (vLLM `capture_model`)",
    ),
    Use(
        RUNNER,
        "an argument",
        "input signatures the runner keys on",
        ("shapes", "dtypes", "containers", "non-tensor values"),
        "check:runner",
        "torch.compile's cudagraph wrapper keyed by shapes (vLLM piecewise backend)",
    ),
    Use(
        STEP,
        "state",
        "what a replay leaves its caller's thread",
        ("grad and inference mode, autocast, default dtype", "the device generator's state"),
        "fuzz:verification.execute:state_left",
        "sampling after a replayed step draws from the advanced generator (all engines)",
    ),
    Use(
        STEP,
        "state",
        "what a failed step leaves for the next",
        ("allocator blocks", "current stream", "an open capture", "the collector"),
        "check:faults",
        "a capture that raised, followed by the next batch size's capture (vLLM)",
    ),
)


def markdown_table() -> str:
    """The grammar as the table ``docs/harness.md`` shows."""
    lines = [
        "| entry point | what crosses | dimension | values | drawn by | an engine that uses it |",
        "|---|---|---|---|---|---|",
    ]
    for use in USES:
        cells = (
            f"`{use.entry}`",
            use.crossing,
            use.dimension,
            "; ".join(use.values),
            f"`{use.drawn_by}`",
            use.engine,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
