"""``python -m verification certify``: run every check of
:data:`verification.certify.checks.CHECKS` under a profile and write ``certificate.json`` and
``certificate.md``.

It loads the target and the ``--ops`` once and passes them to every check. It says loudly when
the simulator stood in for a GPU; exit 1 means a target bug was found, 2 bad input.
"""

from __future__ import annotations

import argparse
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
from verification.errors import EXIT_FOUND, EXIT_OK
from verification.profiles import CERTIFY_PROFILES, DEFAULT_CERTIFY_PROFILE, PROFILES
from verification.targets import load_target
from verification.userops.campaign import load_user_ops


def add_parser(commands: argparse._SubParsersAction) -> None:
    certify = commands.add_parser("certify", help="run every check and write a certificate")
    add_common(certify, defaults=False)
    certify.add_argument("--out", type=Path, default=Path("certificate"))
    certify.add_argument("--profile", choices=CERTIFY_PROFILES, default=DEFAULT_CERTIFY_PROFILE)
    certify.add_argument(
        "--ops", action="append", default=[], metavar="MODULE:SPEC", help="ops to certify"
    )
    certify.add_argument(
        "--sensitivity",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="re-run the planted-bug targets of verification.planted and record how many "
        "were found",
    )
    certify.add_argument("--mutants", type=at_least(1), help="add the harness's mutation score")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    kind = resolve_device(args.device)
    profile = PROFILES[args.profile]
    for name in ("examples", "max_ops", "max_breaks", "replays"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
    target = load_target(args.target, args.contract)
    users = load_user_ops(args.ops)
    writable_dir(args.out, "--out")
    config = campaign_config(args, target, args.out / "reproducers")
    with progress_bar() as (start_check, advance):
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
    cert = certificate(run, results, args.profile)
    write_certificate(cert, args.out)
    if cert["simulated"]:
        print("WARNING: certified on the CUDA SIMULATOR, not a real GPU; rerun with --device cuda")
    if cert["sensitivity"] is not None:
        print(f"sensitivity: {sensitivity.summary_line(cert['sensitivity'])}")
    verdict = "PASS" if cert["passed"] else "FAIL"
    contract = target.contract.name
    print(f"certify: {verdict} under contract {contract}, certificate written to {args.out}")
    return EXIT_OK if cert["passed"] else EXIT_FOUND
