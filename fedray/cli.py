"""Command line: ``fedray run CONFIG [key=value ...]``, ``fedray resume RUN_DIR``, ``fedray check``,
``fedray report``, ``fedray plot``, ``fedray methods [--json]`` (the methods and their parameters)
and ``fedray schema`` (the config's JSON schema).

``run``, ``resume`` and ``check`` are the Python API's functions (``fedray.api``); this module only
formats their results and errors. Everything is validated before the run starts, by ``check`` as by
``run`` and ``resume``: an unknown key, a wrong type, an impossible federation, an unknown method,
model or data set, a missing data file, more clients than samples, a run folder that cannot be made
or already holds a run, actors a local Ray cannot hold, a cluster that does not answer, a resume
that would not extend its run (``fedray.preflight``) is one line on stderr and exit status 2, and no
run folder is made or Ray started. A run that fails later is one line too (exit status 1), naming
``RUN_DIR/error.log`` with the whole traceback (a temporary file when the run folder cannot be
written) and the checkpoint to resume from. ``report`` and ``plot`` refuse a run folder that is
missing, a file or without event files in one line (exit status 2).

The driver of a Ray run imports no torch (the actors do the work): it checks the data itself, and
the server actor resolves a built-in method before it makes the run folder.
"""

from __future__ import annotations

import argparse
import json
import sys

from fedray import api
from fedray.config import ConfigError
from fedray.runner import RunFailed

EXIT_CONFIG, EXIT_RUN = 2, 1


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line too."""

    def error(self, message: str):
        self.exit(EXIT_CONFIG, f"fedray: error: {message} (see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedray", description="Federated learning on Ray and PyTorch.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment from a YAML config")
    run.add_argument("config", help="YAML config file (see configs/)")
    run.add_argument("overrides", nargs="*", help="dotted overrides, e.g. federation.rounds=5")
    run.add_argument("--run-dir", help="run folder (default: OUTPUT_DIR/NAME-TIMESTAMP)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    resume = sub.add_parser("resume", help="continue a run from its last checkpoint")
    resume.add_argument("run_dir")
    resume.add_argument("--rounds", type=int, help="extend the run to this many rounds")
    resume.add_argument("--no-progress", action="store_true")
    resume.add_argument("--restart", action="store_true",
                        help="run it again from round 1 in its folder, discarding its checkpoint, result.json and "
                             "the rounds its event files logged (a folder that shows progress but holds no "
                             "checkpoint is refused without it)")
    report = sub.add_parser("report", help="summarise a run; with --target, rounds and MB to reach it")
    report.add_argument("run_dir")
    report.add_argument("--target", type=float, help="target test accuracy, e.g. 0.89")
    report.add_argument("--tag", default="eval/accuracy", help="the scalar to compare with the target")
    plot = sub.add_parser("plot", help="draw a scalar of several runs into a PNG")
    plot.add_argument("run_dirs", nargs="+")
    plot.add_argument("--out", default="plot.png")
    plot.add_argument("--tag", default="eval/accuracy")
    plot.add_argument("--x", dest="x_axis", choices=["round", "mb_up"], default="round")
    plot.add_argument("--labels", help="comma-separated legend labels, one per run")
    check = sub.add_parser(
        "check", help="validate a config, its data and where it would run; trains nothing, but imports and calls "
                      "the code the config names by import path (plug-ins are code: docs/security.md)")
    check.add_argument("config")
    check.add_argument("overrides", nargs="*")
    sweep = sub.add_parser("sweep", help="run a grid of a config over seeds as Ray Tune trials (fedray.sweep)")
    sweep.add_argument("config", help="the base YAML config")
    sweep.add_argument("overrides", nargs="*", help="dotted overrides of the base, e.g. federation.rounds=5")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                       help="a dotted key and its values (YAML), e.g. algorithm.name=fedavg,fedprox; repeatable")
    sweep.add_argument("--seeds", default="0", help="seeds: 0-4 or 0,3,7 (default 0); each sets the split, the initial model and the sampling")
    sweep.add_argument("--hold", action="append", default=[], choices=["split", "init", "sampling", "run"],
                       help="keep the base config's split, initial model, sampling, or run (initial model and "
                            "sampling) for every seed; repeatable")
    sweep.add_argument("--out", help="the sweep's folder (default: OUTPUT_DIR/NAME-sweep); run again to resume")
    sweep.add_argument("--trial-cpus", type=float, help="CPUs of each trial (default: one client actor's)")
    sweep.add_argument("--trial-gpus", type=float, default=0.0, help="GPUs of each trial")
    sweep.add_argument("--max-concurrent", type=int, help="at most this many trials at once")
    sweep.add_argument("--no-progress", action="store_true", help="no Tune status table")
    methods = sub.add_parser("methods", help="list the methods (algorithm.name) and their parameters")
    methods.add_argument("--json", action="store_true", help="as JSON")
    sub.add_parser("schema", help="print the config's JSON schema")
    return parser


def _report(args) -> int:
    from fedray.tracking import target_report

    try:
        report = target_report(args.run_dir, args.target, args.tag)
    except ValueError as err:
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(report, indent=2))
    return 0


def _plot(args) -> int:
    from fedray.figures import plot_file
    from fedray.tracking import plot_runs

    labels = args.labels.split(",") if args.labels else None
    if labels and len(labels) != len(args.run_dirs):
        print(f"fedray: error: {len(labels)} labels for {len(args.run_dirs)} runs", file=sys.stderr)
        return EXIT_CONFIG
    try:
        print(plot_runs(args.run_dirs, plot_file(args.out, "--out"), args.tag, args.x_axis, labels))
    except (ValueError, KeyError) as err:
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as err:  # writing the image failed: a full disk, say
        print(f"fedray: error: cannot write {err.filename or args.out}: {err.strerror or err}", file=sys.stderr)
        return EXIT_RUN
    return 0


def _methods(args) -> int:
    from fedray import catalog

    print(json.dumps(catalog.methods(), indent=2) if args.json else catalog.format_methods())
    return 0


def _schema(args) -> int:
    from fedray import catalog

    print(json.dumps(catalog.config_schema(), indent=2))
    return 0


def _seeds(text: str) -> list[int]:
    """``0-4`` -> [0, 1, 2, 3, 4]; ``0,3,7`` -> [0, 3, 7]."""
    seeds = []
    try:
        for part in text.split(","):
            first, _, last = part.partition("-")
            seeds += list(range(int(first), int(last) + 1)) if last else [int(first)]
    except ValueError:
        raise ConfigError(f"--seeds {text!r}: give a range like 0-4 or a list like 0,3,7") from None
    return seeds


def _grid(items: list[str]) -> dict[str, list]:
    """``["training.lr=0.05,0.1"]`` -> ``{"training.lr": [0.05, 0.1]}`` (each value read as YAML)."""
    import yaml

    grid = {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise ConfigError(f"--grid {item!r}: give KEY=V1,V2,..., e.g. algorithm.name=fedavg,fedprox")
        grid[key] = [yaml.safe_load(v) for v in values.split(",")]
    return grid


def _sweep(args) -> int:
    from fedray.sweeps import sweep

    result = sweep(args.config, _grid(args.grid), _seeds(args.seeds), out=args.out, hold=args.hold,
                   overrides=args.overrides, trial_cpus=args.trial_cpus, trial_gpus=args.trial_gpus,
                   max_concurrent=args.max_concurrent, progress=not args.no_progress)
    for group in result.groups:
        point = ", ".join(f"{k}={v}" for k, v in group.items() if k not in ("seeds", "final_accuracy", "best_accuracy"))
        measures = "; ".join(f"{m.split('_')[0]} {g['mean']:.4f}" + (f" [{g['low']:.4f}, {g['high']:.4f}]" if g["low"] is not None else "")
                             for m, g in ((m, group[m]) for m in ("final_accuracy", "best_accuracy") if m in group))
        held = f" ({', '.join(result.hold)} held)" if result.hold else ""
        print(f"{point or 'base'}: {len(group['seeds'])} seeds{held}; {measures or 'no finished trial'}")
    failed = [r for r in result.rows if r["status"] != "done"]
    for row in failed:
        why = f"{row['error']} (traceback: {row['run_dir']}/error.log)" if row.get("error") else "it did not run"
        print(f"fedray: trial {row['trial']} {row['status']}: {why}", file=sys.stderr)
    print(f"trials: {result.out / 'sweep.csv'}  (tensorboard --logdir {result.out / 'trials'})")
    return EXIT_RUN if failed else 0


def _parse(argv: list[str] | None):
    """The arguments; ``key=value`` overrides may also follow an option (``run CFG --no-progress a=1``)."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and not any(item.startswith("-") for item in extra):
        args.overrides += extra
    elif extra:
        parser.exit(EXIT_CONFIG, f"fedray: error: unrecognized arguments: {' '.join(extra)} "
                                 f"(see `fedray {args.command} --help`)\n")
    return args


def main(argv: list[str] | None = None) -> int:
    """The ``fedray`` command; its exit status. A Ctrl-C after the run's own handling ended it
    (while its line prints, or Ray shuts down) ends the command quietly with status 1."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return EXIT_RUN


def _main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    tools = {"report": _report, "plot": _plot, "methods": _methods, "schema": _schema}
    if args.command in tools:
        return tools[args.command](args)
    try:
        if args.command == "check":
            config = api.check(args.config, args.overrides)
            print(f"config ok: {config.name} ({config.algorithm.name}, {config.federation.num_clients} clients, "
                  f"{config.data.dataset})")
            return 0
        if args.command == "sweep":
            return _sweep(args)
        if args.command == "resume":
            result = api.resume(args.run_dir, rounds=args.rounds, progress=not args.no_progress, restart=args.restart)
        else:
            result = api.run(args.config, args.overrides, run_dir=args.run_dir or None, progress=not args.no_progress)
    except ConfigError as err:  # found before anything was made or started
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except RunFailed as err:
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_RUN
    print(json.dumps({"run_dir": str(result.run_dir), **result.final,
                      "best_accuracy": result.summary["best_accuracy"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
