"""``python -m verification certify``: run every check of
:data:`verification.certify.checks.CHECKS` under a profile and write ``certificate.json`` and
``certificate.md``.

It loads the target and the ``--ops`` once and passes them to every check. It says loudly when
the simulator stood in for a GPU; exit 1 means a target bug was found, 2 bad input.
"""

from __future__ import annotations

import argparse
import shlex
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from verification.certify import sensitivity
from verification.certify.certificate import certificate, write_certificate
from verification.certify.checks import run_checks
from verification.certify.run import CertifyRun
from verification.commands.options import (
    add_common,
    at_least,
    campaign_config,
    print_finding,
    writable_dir,
)
from verification.commands.progress import progress_bar
from verification.devices import resolve_device
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK
from verification.findings import HARNESS_ERROR
from verification.mutation.engine import require_cosmic_ray
from verification.profiles import (
    CERTIFY_PROFILES,
    DEFAULT_CERTIFY_PROFILE,
    PROFILE_MEANINGS,
    PROFILES,
)
from verification.targets import load_target
from verification.userops.campaign import load_user_ops


def add_parser(commands: argparse._SubParsersAction) -> None:
    profiles = "\n".join(
        f"  {name:9} {PROFILE_MEANINGS[name]} ({PROFILES[name].examples} examples, up to "
        f"{PROFILES[name].max_ops} ops and {PROFILES[name].max_breaks} breaks)"
        for name in CERTIFY_PROFILES
    )
    certify = commands.add_parser(
        "certify",
        help="every check under a profile; writes certificate.md and certificate.json",
        description=f"Run every check under a profile and write a certificate.\n\nprofiles:\n"
        f"{profiles}\nAn option given with a profile overrides it; the certificate says so.",
    )
    add_common(certify, defaults=False)
    certify.add_argument(
        "--out",
        type=Path,
        default=Path("certificate"),
        metavar="DIR",
        help="where certificate.md, certificate.json and reproducers go",
    )
    certify.add_argument(
        "--profile",
        choices=CERTIFY_PROFILES,
        default=DEFAULT_CERTIFY_PROFILE,
        help="budgets: " + ", ".join(f"{n} ({PROFILE_MEANINGS[n]})" for n in CERTIFY_PROFILES),
    )
    certify.add_argument(
        "--ops",
        action="append",
        default=[],
        metavar="MODULE:SPEC",
        help="also fuzz this break op of yours (repeatable; default: none)",
    )
    certify.add_argument(
        "--sensitivity",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="re-run every planted-bug target of verification.planted and record how many the "
        "checks find",
    )
    certify.add_argument(
        "--mutants",
        type=at_least(1),
        metavar="N",
        help="add the harness's mutation score on N mutants (needs cosmic-ray; default: none)",
    )


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    began = time.perf_counter()
    kind = resolve_device(args.device)
    profile = PROFILES[args.profile]
    overrides = {}
    for name in ("examples", "max_ops", "max_breaks", "replays"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
        elif getattr(args, name) != getattr(profile, name):
            overrides[name] = getattr(args, name)
    target = load_target(args.target, args.contract)
    users = load_user_ops(args.ops)
    if args.mutants:
        require_cosmic_ray()  # before the campaign, not after it
    writable_dir(args.out, "--out")
    config = campaign_config(args, target, args.out / "reproducers")
    with warnings.catch_warnings(), progress_bar(quiet=args.quiet) as (start_check, advance):
        # hypothesis warns when it renders a long program's repr; the certificate has them all.
        warnings.filterwarnings("ignore", message="Generating overly large repr")
        run = CertifyRun(
            config,
            target,
            kind,
            advance,
            op_specs=tuple(args.ops),
            users=users,
            sensitivity=args.sensitivity,
            mutants=args.mutants,
        )
        results = run_checks(run, start_check)
    for result in results:
        for finding, text in zip(result.findings, result.reproducers):
            print_finding(f"{result.name} {finding.summary()}", text)
    cert = certificate(
        run,
        results,
        args.profile,
        overrides=overrides,
        command=shlex.join(["python", "-m", "verification", *argv]),
        seconds=time.perf_counter() - began,
    )
    write_certificate(cert, args.out)
    if cert["simulated"]:
        print("WARNING: certified on the CUDA SIMULATOR, not a real GPU; rerun with --device cuda")
    if cert["sensitivity"] is not None:
        print(f"sensitivity: {sensitivity.summary_line(cert['sensitivity'])}")
    verdict = "PASS" if cert["passed"] else "FAIL"
    contract = target.contract.name
    print(f"certify: {verdict} under contract {contract}, certificate written to {args.out}")
    if any(f.kind == HARNESS_ERROR for r in results for f in r.findings):
        return EXIT_HARNESS
    return EXIT_OK if cert["passed"] else EXIT_FOUND
