"""``python -m verification bisect MODULE:FN``: the first op where your model diverges
under breakable capture.

FN() builds a model and its static inputs on the device and returns (forward, next_step):
forward() takes no arguments and returns the step's outputs; next_step(step) prepares step
`step`'s inputs in place (copies into static tensors, host metadata updated in place).
bisect builds the model twice from one seed, runs one copy eagerly and captures the other
right after a warm-up, under the target's own contract, then replays it for --steps steps
with new inputs, comparing every break's arguments and results and every output. At the
first difference it narrows down to one op and prints it, its line in your code, the step,
the first differing tensor and the command that finds it again.

exit status: 0 no divergence, 1 one was found (or the model raised), 2 bad input,
3 the harness itself failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from verification.bisect import Tolerance, bisect
from verification.commands.options import Run, add_device, add_quiet, at_least
from verification.devices import resolve_kind
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK, UsageError
from verification.targets import DEFAULT_TARGET, load_target
from verification.targets.upstream import add_target_path


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "bisect",
        help="name the first op where your own model diverges under breakable capture",
        description=__doc__,
    )
    parser.add_argument("model", metavar="MODULE:FN", help="a function building your model")
    parser.add_argument(
        "--target", default=DEFAULT_TARGET, metavar="MODULE", help="importable module under test"
    )
    add_target_path(parser)
    add_device(parser)
    parser.add_argument(
        "--steps", type=at_least(1), default=8, help="steps replayed and compared with eager"
    )
    parser.add_argument(
        "--rtol", type=_non_negative, default=Tolerance.rtol, help="relative tolerance"
    )
    parser.add_argument(
        "--atol", type=_non_negative, default=Tolerance.atol, help="absolute tolerance"
    )
    add_quiet(parser)


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    def say(line: str) -> None:
        if not args.quiet:
            print(f"  {line}", flush=True)

    try:
        # The target first: of a bad target and a missing GPU, bisect names the target.
        run = Run(load_target(args.target), resolve_kind(args.device_choice))
        result = bisect(
            args.model,
            target=run.target,
            kind=run.kind,
            steps=args.steps,
            tol=Tolerance(args.rtol, args.atol),
            say=say,
        )
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as error:
        print(
            f"harness failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}",
            file=sys.stderr,
        )
        return EXIT_HARNESS
    if result.finding is not None:
        for line in result.finding.lines():
            print(line)
    print(result.line())
    return EXIT_FOUND if result.finding is not None else EXIT_OK
