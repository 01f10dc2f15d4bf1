"""Record every method's results exactly, and compare a later commit's with the record, bit for bit.

A refactor of the runtime or of the method contract must leave results unchanged to the last bit on
the machine that recorded them (``tests/test_golden.py`` is the tolerant check that holds on every
CPU; this one is exact and meant for one machine and one torch). For each config below the run's
final checkpoint is flattened into arrays: the server's state (models, optimiser and method state),
every client's state, and every metric of every round except the timings (``time/*``) and the
runtime's own counters (``runtime/*``), which measure the transport rather than the method.

    python scripts/test/bitwise.py --record snapshot.npz           # before the change
    python scripts/test/bitwise.py --compare snapshot.npz          # after each step: exit 1 on a difference
    python scripts/test/bitwise.py --compare snapshot.npz --only fedavg stc --no-ray

The configs: the twelve of the golden test, every configuration whose server needs each client's own
upload (``share: head``, FedDistill without shared models, FedGen's count-weighted teacher, MrTF's
refinement, FedEnsemble, CFL), the remaining methods, the FedNova example, ``runtime.fold: false``,
cohort training, a resumed run, and a few runs on actors (a local Ray of 2 CPUs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedray.checkpoint import CHECKPOINT, read_checkpoint  # noqa: E402
from fedray.config import build_config  # noqa: E402
from tests.test_golden import CONFIGS as GOLDEN, tiny  # noqa: E402

DISTILL = {"distill": {"steps": 3, "lr": 1e-3}}
AUX = {"aux": {"size": 200}}
ONE_WIDTH = {"federation": {"architectures": {"mlp": 6}}}  # FedGen's generator feeds one feature size


def changed(config, **sections):
    """``config`` with some keys of its sections replaced."""
    tree = config.to_dict()
    for section, values in sections.items():
        tree[section] = {**tree.get(section, {}), **values}
    return build_config(tree)


def local_configs() -> dict[str, Any]:
    """name -> Config (local backend, one torch thread: the tiny digits runs of the golden test)."""
    configs = dict(GOLDEN)
    gathering = {
        "fedavg_head": tiny({"name": "fedavg", "share": "head"}),
        "fedprox_head": tiny({"name": "fedprox", "mu": 0.1, "share": "head"}),
        "fedmmd_head": tiny({"name": "fedmmd", "share": "head"}),
        "feddf_head": tiny({"name": "feddf", "share": "head", **DISTILL}, **AUX),
        "fedgen_head": tiny({"name": "fedgen", "gen_steps": 5, "share": "head"}, **ONE_WIDTH),
        "fedgen_counts": tiny({"name": "fedgen", "gen_steps": 5, "teacher": "counts"}, **ONE_WIDTH),
        "feddistill": tiny({"name": "feddistill"}),
        "feddistill_plus_head": tiny({"name": "feddistill", "share_models": True, "share": "head"}),
        "mrtf": tiny({"name": "mrtf", "distill": {"steps": 5}}),
        "fedensemble": tiny({"name": "fedensemble"}),
    }
    others = {
        "fedopt": tiny({"name": "fedopt"}),
        "central": tiny({"name": "central"}),
        "scaffold": tiny({"name": "scaffold"}, training={"momentum": 0.0}),
        "fedmmd": tiny({"name": "fedmmd"}),
        "fedgen": tiny({"name": "fedgen", "gen_steps": 5}, **ONE_WIDTH),
        "feddistill_plus": tiny({"name": "feddistill", "share_models": True}),
        "mrtf_pa": tiny({"name": "mrtf", "refine": False}),
        "fedaux": tiny({"name": "fedaux", **DISTILL}, aux={"size": 200, "negatives": 0.25},
                       pretrain={"epochs": 1, "batch_size": 64}),
        "fedprox_vectorize": tiny({"name": "fedprox", "mu": 0.1}, runtime={"vectorize": True}),
        "fedavg_label_flip": tiny({"name": "fedavg"}, data={"adversaries": "label_flip", "adversary_fraction": 0.34}),
        "fedavg_noisy": tiny({"name": "fedavg"}, data={"adversaries": "noisy", "adversary_fraction": 0.34, "noise": 0.5}),
        "dsgd_byzantine": tiny({"name": "dsgd"}, data={"adversaries": "byzantine", "adversary_fraction": 0.34}),
    }
    unfolded = {f"{name}_nofold": changed(GOLDEN[name], runtime={"fold": False}) for name in ("fedavg", "feddf", "fd", "cfd")}
    return {**configs, **gathering, **others, **unfolded}


def ray_configs() -> dict[str, Any]:
    """name -> Config on a local Ray: four client hosts of half a CPU each; a stateless method's clients go to
    any host (the fold tree), a stateful one's stay at home."""
    ray = {"backend": "ray", "num_cpus": 2, "actor_cpus": 0.5, "clients_per_actor": "auto", "torch_threads": 1}
    return {f"ray_{name}": tiny(algorithm, runtime=ray, **extra) for name, (algorithm, extra) in {
        "fedavg": ({"name": "fedavg"}, {}),
        "stc": ({"name": "stc", "p_up": 0.05, "p_down": 0.05}, {}),
        "feddf": ({"name": "feddf", **DISTILL}, AUX),
        "fedavg_head": ({"name": "fedavg", "share": "head"}, {}),
        "fedavg_byzantine": ({"name": "fedavg"}, {"data": {"adversaries": "byzantine", "adversary_fraction": 0.34}}),
        "cfl": ({"name": "cfl", "eps1": 10.0, "eps2": 0.01, "alpha_thresh": 0.5},
                {"federation": {"clients_per_round": 6, "rounds": 4, "architectures": {"mlp": 6}},
                 "data": {"groups": 2, "group_shift": "label_swap"}}),
    }.items()}


def leaves(tree: Any, prefix: str) -> dict[str, np.ndarray]:
    """Every array or number in ``tree`` (dicts, lists, dataclasses and objects walked), by path; a leaf
    that is neither (a string, None, an empty container) is kept as its ``repr``."""
    if isinstance(tree, dict) and tree:
        return {k: v for key, value in tree.items() for k, v in leaves(value, f"{prefix}.{key}").items()}
    if isinstance(tree, (list, tuple)) and tree:
        return {k: v for i, value in enumerate(tree) for k, v in leaves(value, f"{prefix}.{i}").items()}
    if hasattr(tree, "detach"):
        return {prefix: tree.detach().cpu().numpy()}
    if isinstance(tree, (np.ndarray, np.generic, int, float, bool)):
        return {prefix: np.asarray(tree)}
    if hasattr(tree, "__dict__") and not isinstance(tree, type):
        return leaves({"type": type(tree).__qualname__, **vars(tree)}, prefix)
    return {prefix: np.asarray(repr(tree))}


def snapshot(run_dir: Path) -> dict[str, np.ndarray]:
    """The run's last checkpoint as flat arrays: ``strategy.*``, ``clients.*`` and ``history.R.tag``."""
    state = read_checkpoint(run_dir / CHECKPOINT)
    history = [{tag: value for tag, value in entry.items() if not tag.startswith(("time/", "runtime/"))}
               for entry in state["history"]]
    return leaves({"strategy": state["strategy"], "clients": state["clients"], "history": history}, "run")


def run_one(config, folder: Path, resume_at: int | None = None) -> dict[str, np.ndarray]:
    import fedray

    if resume_at is None:
        fedray.run(config, run_dir=folder, progress=False)
    else:
        rounds = config.federation.rounds
        fedray.run(config, {"federation.rounds": resume_at}, run_dir=folder, progress=False)
        fedray.resume(folder, rounds=rounds, progress=False)
    return snapshot(folder)


def fednova(folder: Path) -> dict[str, np.ndarray]:
    """The example plug-in, run from examples/ as a user runs it, two rounds."""
    import os

    import fedray

    here = os.getcwd()
    sys.path.insert(0, str(ROOT / "examples"))
    os.chdir(ROOT / "examples")
    try:
        fedray.run("fednova.yaml", {"federation.rounds": 2, "runtime.backend": "local"}, run_dir=folder,
                   progress=False)
    finally:
        os.chdir(here)
    return snapshot(folder)


def jobs(use_ray: bool) -> dict[str, Callable[[Path], dict[str, np.ndarray]]]:
    out: dict[str, Callable[[Path], dict[str, np.ndarray]]] = {
        name: (lambda folder, c=config: run_one(c, folder)) for name, config in local_configs().items()}
    out["fedavg_resumed"] = lambda folder: run_one(GOLDEN["fedavg"], folder, resume_at=1)
    out["stc_resumed"] = lambda folder: run_one(GOLDEN["stc"], folder, resume_at=2)
    out["fednova"] = fednova
    if use_ray:
        out.update({name: (lambda folder, c=config: run_one(c, folder)) for name, config in ray_configs().items()})
    return out


def compare(recorded: dict[str, np.ndarray], now: dict[str, np.ndarray]) -> list[str]:
    """One line per difference: arrays that differ in any bit, or keys only one side has."""
    problems = [f"only recorded: {k}" for k in sorted(set(recorded) - set(now))]
    problems += [f"only now: {k}" for k in sorted(set(now) - set(recorded))]
    for key in sorted(set(recorded) & set(now)):
        a, b = recorded[key], now[key]
        same = a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()  # -0.0 and NaNs too
        if not same:
            detail = ""
            if a.shape == b.shape and a.dtype.kind == "f" and b.dtype.kind == "f":
                detail = f" (max |diff| {float(np.max(np.abs(a.astype(np.float64) - b))):.3g})"
            problems.append(f"differs: {key} {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}{detail}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path, metavar="NPZ", help="run every config and save the snapshot")
    mode.add_argument("--compare", type=Path, metavar="NPZ", help="run every config and compare with the snapshot")
    parser.add_argument("--only", nargs="+", help="these configs only")
    parser.add_argument("--no-ray", action="store_true", help="skip the runs on actors")
    args = parser.parse_args()

    selected = jobs(not args.no_ray)
    if args.only:
        unknown = sorted(set(args.only) - set(selected))
        if unknown:
            parser.error(f"unknown configs {unknown}; known: {', '.join(selected)}")
        selected = {name: selected[name] for name in args.only}
    arrays: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, job in selected.items():
            print(f"{name} ...", flush=True)
            arrays.update({f"{name}/{k}": v for k, v in job(Path(tmp) / name).items()})
    if args.record:
        np.savez_compressed(args.record, **arrays)
        print(f"recorded {len(arrays)} arrays of {len(selected)} configs in {args.record}")
        return 0
    with np.load(args.compare) as saved:
        recorded = {k: saved[k] for k in saved.files if k.split("/", 1)[0] in selected}
    unrecorded = sorted(set(selected) - {k.split("/", 1)[0] for k in recorded})
    if unrecorded:
        print(f"not in the record (not compared): {', '.join(unrecorded)}")
        arrays = {k: v for k, v in arrays.items() if k.split("/", 1)[0] not in unrecorded}
    problems = compare(recorded, arrays)
    for line in problems:
        print(line)
    print(f"{len(arrays)} arrays of {len(selected) - len(unrecorded)} configs: "
          + ("bit-identical" if not problems else f"{len(problems)} differences"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
