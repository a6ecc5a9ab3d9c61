"""``python -m verification certify``: run every check of
:data:`verification.certify.checks.CHECKS` under a profile and a wall-clock budget, and write
``certificate.json`` and ``certificate.md``.

It loads the target and the ``--ops`` once and passes them to every check. It says loudly when
the simulator stood in for a GPU; exit 1 means a target bug was found, 2 bad input. Off a
terminal it logs a line as each check starts and one as it ends, and the verdict last.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from verification.certify import sensitivity
from verification.certify.certificate import certificate, write_certificate
from verification.certify.checks import run_checks
from verification.certify.persist import avoided_joins
from verification.certify.run import CertifyRun, CheckResult
from verification.certify.schedule import schedule
from verification.commands.options import (
    add_common,
    at_least,
    budget_seconds,
    campaign_config,
    print_finding,
    resolve_run,
    writable_dir,
)
from verification.commands.progress import progress_bar
from verification.errors import EXIT_FOUND, EXIT_HARNESS, EXIT_OK
from verification.findings import HARNESS_ERROR
from verification.mutation.engine import require_cosmic_ray
from verification.plugin.profiles import (
    CERTIFY_PROFILES,
    DEFAULT_CERTIFY_PROFILE,
    PROFILE_MEANINGS,
    PROFILES,
)
from verification.properties import PROPERTIES
from verification.userops.campaign import load_user_ops


def add_parser(commands: argparse._SubParsersAction) -> None:
    profiles = "\n".join(
        f"  {name:9} {PROFILE_MEANINGS[name]} ({_budget_words(name)}, up to "
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
        "--budget",
        type=budget_seconds,
        metavar="SECONDS",
        help="wall-clock seconds for the checks, spread over fuzz and the property checks, or "
        f"none for the example counts alone (default: the profile's; {_default_budget_words()}); "
        "start-up and the planted-bug evidence come on top",
    )
    certify.add_argument(
        "--sensitivity",
        choices=SENSITIVITY_CHOICES,
        default="cached",
        help="the planted-bug evidence that each check can fail here: cached (reuse what this "
        "harness, torch and device measured before, else measure and cache it), fresh "
        "(measure now), off",
    )
    certify.add_argument(
        "--no-sensitivity",
        dest="sensitivity",
        action="store_const",
        const="off",
        help="the same as --sensitivity=off",
    )
    certify.add_argument(
        "--mutants",
        type=at_least(1),
        metavar="N",
        help="add the harness's mutation score on N mutants (needs cosmic-ray; default: none)",
    )


SENSITIVITY_CHOICES = ("cached", "fresh", "off")


def _budget_words(name: str) -> str:
    profile = PROFILES[name]
    if profile.budget_s is None:
        return f"{profile.examples} examples"
    return f"{profile.budget_s:g} s, at most {profile.examples} examples"


def _default_budget_words() -> str:
    return ", ".join(
        f"{name} {PROFILES[name].budget_s:g} s" if PROFILES[name].budget_s else f"{name} none"
        for name in CERTIFY_PROFILES
    )


class _Log:
    """A line as each check starts and ends, where the output is no terminal (a CI log):
    a progress bar is drawn only on one."""

    def __init__(self, quiet: bool) -> None:
        self.on = not quiet and not sys.stdout.isatty()
        self.began = time.perf_counter()

    def _line(self, text: str) -> None:
        if self.on:
            print(f"[{time.perf_counter() - self.began:6.1f} s] {text}", flush=True)

    def start(self, name: str, run: CertifyRun) -> None:
        plan = run.schedule
        if name == "fuzz" and plan.fuzz_s is not None:
            self._line(f"fuzz: started, budget {plan.fuzz_s:.0f} s")
        elif name == "properties":
            each = f", budget {plan.property_s:.0f} s each" if plan.property_s else ""
            self._line(f"properties: started {', '.join(PROPERTIES)}, {plan.jobs} at a time{each}")
        else:
            self._line(f"{name}: started")

    def end(self, result: CheckResult) -> None:
        if result.section is not None:
            self._line(f"{result.name}: {sensitivity.summary_line(result.section)}")
            return
        verdict = result.verdict.upper() if result.verdict == "fail" else result.verdict
        self._line(
            f"{result.name}: {verdict}, {result.examples} examples in {result.seconds:.1f} s"
        )


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    began = time.perf_counter()
    profile = PROFILES[args.profile]
    # --budget none is infinity: no time budget, the example counts alone.
    budget = profile.budget_s if args.budget is None else args.budget
    run = resolve_run(args, budget_s=None if budget == math.inf else budget)
    overrides = {}
    if run.budget_s != profile.budget_s:
        overrides["budget"] = "none" if run.budget_s is None else run.budget_s
    for name in ("examples", "max_ops", "max_breaks", "replays"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(profile, name))
        elif getattr(args, name) != getattr(profile, name):
            overrides[name] = getattr(args, name)
    users = load_user_ops(args.ops)
    if args.mutants:
        require_cosmic_ray()  # before the campaign, not after it
    writable_dir(args.out, "--out")
    config = campaign_config(args, run, args.out / "reproducers")
    log = _Log(args.quiet)
    with progress_bar(quiet=args.quiet) as (start_check, advance):
        certify_run = CertifyRun(
            config,
            advance,
            op_specs=tuple(args.ops),
            users=users,
            sensitivity=args.sensitivity,
            mutants=args.mutants,
            schedule=schedule(run.budget_s, run.kind, len(PROPERTIES)),
        )

        def on_check(name: str, total: int | None, unit: str) -> None:
            log.start(name, certify_run)
            start_check(name, total, unit)

        results = run_checks(certify_run, on_check, log.end)
    for result in results:
        for finding, text in zip(result.findings, result.reproducers):
            print_finding(f"{result.name} {finding.summary()}", text)
    failing = [f for r in results if r.section is None for f in r.findings if f.fails]
    cert = certificate(
        certify_run,
        results,
        args.profile,
        overrides=overrides,
        command=shlex.join(["python", "-m", "verification", *argv]),
        seconds=time.perf_counter() - began,
        joins=avoided_joins(failing, config),
    )
    write_certificate(cert, args.out)
    if cert["simulated"]:
        print("WARNING: certified on the CUDA SIMULATOR, not a real GPU; rerun with --device cuda")
    if cert["sensitivity"] is not None:
        print(f"sensitivity: {sensitivity.summary_line(cert['sensitivity'])}")
    verdict = cert["verdict"].upper()
    contract = run.target.contract.name
    print(f"certify: {verdict} under contract {contract}, certificate written to {args.out}")
    if any(f.kind == HARNESS_ERROR for r in results for f in r.findings):
        return EXIT_HARNESS
    return EXIT_OK if cert["passed"] else EXIT_FOUND
