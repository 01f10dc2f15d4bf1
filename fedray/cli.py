"""Command line: ``fedray run CONFIG [key=value ...]``, ``fedray resume RUN_DIR``, ``fedray check``.

Everything is validated before the run starts, by ``check`` as by ``run`` and ``resume``: an unknown
key, a wrong type, an impossible federation, an unknown method, model or data set, a missing data
file, more clients than samples, a run folder that cannot be made or already holds a run, actors a
local Ray cannot hold, a cluster that does not answer, a resume that would not extend its run
(``fedray.preflight``) is one line on stderr and exit status 2, and no run folder is made or Ray
started. A run that fails later is one line too (exit status 1), naming ``RUN_DIR/error.log`` with
the whole traceback (a temporary file when the run folder cannot be written) and the checkpoint to
resume from. ``report`` and ``plot`` refuse a run folder that is missing, a file or without event
files in one line (exit status 2).

The driver of a Ray run imports no torch (the actors do the work): it checks the data itself, and
the server actor resolves the method before it makes the run folder.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fedray.backends import backend
from fedray.config import Config, ConfigError, load_config, shown
from fedray.runner import RunFailed, run_experiment, vectorize_note

EXIT_CONFIG, EXIT_RUN = 2, 1


def _resolve(config: Config):
    from fedray.method import resolve

    return resolve(config)


def _default_run_dir(config: Config) -> Path:
    return Path(config.output_dir) / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _resume_config(run_dir: Path, rounds: int | None) -> Config:
    """The run's config, with ``--rounds``; refused when its checkpoint cannot be resumed from, or
    ``--rounds`` would not take the run past the checkpoint's round (``preflight.check_resume``)."""
    from fedray import preflight, rundir

    preflight.check_folder(run_dir, f"run folder {run_dir}")
    rundir.check_free(run_dir)
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a fedray run folder: {path} is missing")
    config = load_config(path, [f"federation.rounds={rounds}"] if rounds is not None else [])
    preflight.check_resume(run_dir, config, rounds_given=rounds is not None)
    return config


def _preflight(args, config: Config) -> Path:
    """What ``check``, ``run`` and ``resume`` refuse before a run starts, each problem one
    ConfigError line (``fedray.preflight``); returns the run folder."""
    from fedray import preflight, rundir

    preflight.check_data(config)
    if args.command == "resume":
        run_dir = Path(args.run_dir)  # checked by ``_resume_config``
    elif getattr(args, "run_dir", None):
        run_dir = Path(args.run_dir)
        rundir.check_free(run_dir)
        preflight.check_new_run_dir(run_dir, f"--run-dir {run_dir}")
    else:
        run_dir = _default_run_dir(config)
        preflight.check_new_run_dir(run_dir, f"bad config value output_dir = {config.output_dir!r}")
    backend(config.runtime.backend).check(config)  # Ray: the cluster answers, the actors fit
    return run_dir


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
    check = sub.add_parser("check", help="validate a config (and that its data set is there), run nothing")
    check.add_argument("config")
    check.add_argument("overrides", nargs="*")
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
    if args.command == "report":
        return _report(args)
    if args.command == "plot":
        return _plot(args)
    try:
        if args.command == "resume":
            config = _resume_config(Path(args.run_dir), args.rounds)
        else:
            config = load_config(args.config, args.overrides)
        method = None
        if args.command == "check" or config.runtime.backend == "local":
            method = _resolve(config)
        run_dir = _preflight(args, config)
    except (ConfigError, FileNotFoundError, ValueError) as err:
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as err:  # a file or folder the checks read: one line, its name cut
        print(f"fedray: error: {shown(err.filename)}: {err.strerror}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "check":
        note = vectorize_note(config, method.cohort_refusal)
        if note:
            print(f"fedray: note: {note}", file=sys.stderr)
        print(f"config ok: {config.name} ({config.algorithm.name}, {config.federation.num_clients} clients, "
              f"{config.data.dataset})")
        return 0

    def announce(folder: Path):
        nonlocal run_dir
        run_dir = folder
        print(f"fedray: run folder {run_dir}  (tensorboard --logdir {run_dir.parent})", file=sys.stderr)

    try:
        summary = run_experiment(config, run_dir, resume=args.command == "resume",
                                 progress=not args.no_progress, method=method, announce=announce,
                                 fresh=args.command == "run" and not args.run_dir)
    except ConfigError as err:  # the method, resolved in the server actor: nothing has run
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except RunFailed as err:
        print(f"fedray: error: {err}", file=sys.stderr)
        return EXIT_RUN
    print(json.dumps({"run_dir": str(run_dir), **summary["final"],
                      "best_accuracy": summary["best_accuracy"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
