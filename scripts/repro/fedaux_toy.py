"""FedAUX's toy examples: certainty-weighted vs mean ensembles, in seconds on a CPU.

- Iris (TNNLS Fig. 2, thesis Fig. 7.2): iris projected on its two principal components, three clients
  with disjoint non-iid data, a linear classifier each; the paper reports 33% for the mean of the
  clients' predictions and 88% for their certainty-weighted mean, weights from a Gaussian KDE
  (:func:`fedaux_toys.iris_split` says how the split is read from the text). Several seeds,
  and the logistic scorer of Alg. 1 without noise and (eps, delta)-DP at a few eps.
- Three Gaussians (TNNLS Fig. 3, arXiv Fig. 14, thesis Fig. 7.3): three clients, each one unit
  Gaussian in 2-D, scored by the DP logistic scorer against a public uniform negative set;
  s_i / sum_j s_j is drawn beside D_i / sum_j D_j, which it should approximate (eq. 7.9). To give the
  weighting something to decide, every point is labelled by whether it lies outside the circle
  through the three centres, and each client trains a linear classifier on its own Gaussian.

The toys themselves are in scripts/repro/toy_ensemble.py; this runs them and writes docs/records/repro_fedaux_toy.json
(every seed's accuracies), then docs/repro_fedaux_toy.md (the setting and sentences computed from
that JSON; ``--plot-only`` writes it again from the JSON alone) and .png.

    python scripts/repro/fedaux_toy.py              # 10 iris seeds, 3 Gaussian seeds, ~30 s
    python scripts/repro/fedaux_toy.py --seeds 3 --out /tmp/toy
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_iris

from fedray.figures import figure, save_figure
from fedray.privacy.certainty import dp_sigma
from fedray.provenance import source
from fedray.repro import listing, markdown_table, record_file, runs_commit_text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a file, it imports its siblings as scripts.repro.*

from scripts.repro.toy_ensemble import GAUSS, gaussian_toy, iris_ensemble, iris_split, iris_toy, outside, shares  # noqa: E402

PAPER_IRIS = {"mean": 33.0, "kde": 88.0}  # TNNLS Fig. 2 / thesis Fig. 7.2, %
IRIS_LAM, IRIS_EPS, DELTA = 0.01, (0.1, 1.0, 10.0), 1e-5
GAUSS_WEIGHTINGS = {"mean": "mean (FedDF)", "logistic": "DP logistic s_i", "kde": "Gaussian KDE",
                    "density": "true D_i"}
IRIS_LABELS = {"mean": "mean", "kde": "Gaussian KDE", "logistic": "logistic, no noise", "logistic_dp": "logistic, DP"}
CLASS_COLOURS = np.array([[0.84, 0.15, 0.16], [0.17, 0.63, 0.17], [0.12, 0.47, 0.71]])  # red, green, blue


# -- iris --------------------------------------------------------------------------------------------
def iris_results(seeds: int) -> dict[float, list[dict[str, float]]]:
    """iris_toy for every seed at every eps of the DP logistic scorer (the other weightings repeat)."""
    return {eps: [iris_toy(seed, IRIS_LAM, eps, DELTA) for seed in range(seeds)] for eps in IRIS_EPS}


def pct(values: list[float]) -> str:
    """mean ± std (min-max) in %."""
    v = 100 * np.asarray(values)
    return f"{v.mean():.1f} ± {v.std():.1f} ({v.min():.1f}-{v.max():.1f})"


# -- three Gaussians ---------------------------------------------------------------------------------------
def gaussian_results(seeds: int) -> list[dict[str, float]]:
    """Accuracy of each weighting on the test set and the mean |s_i/sum s - D_i/sum D| there."""
    rows = []
    for eps in GAUSS["eps"]:
        for seed in range(seeds):
            ensemble, test, _, _ = gaussian_toy(seed, eps, DELTA)
            row = {"eps": eps, "seed": seed}
            row.update({w: ensemble.accuracy(test, outside(test), w) for w in GAUSS_WEIGHTINGS})
            gap = shares(ensemble, "logistic", test) - shares(ensemble, "density", test)
            row["ratio_error"] = float(np.abs(gap).mean())
            rows.append(row)
    return rows


# -- figure ---------------------------------------------------------------------------------------------------
def grid(lo: np.ndarray, hi: np.ndarray, steps: int = 150) -> tuple[np.ndarray, list[float]]:
    xs, ys = np.meshgrid(np.linspace(lo[0], hi[0], steps), np.linspace(lo[1], hi[1], steps))
    return np.c_[xs.ravel(), ys.ravel()], [lo[0], hi[0], lo[1], hi[1]]


def regions(ax, probs: np.ndarray, extent: list[float], alpha: np.ndarray | None = None) -> None:
    """The predicted class's colour at every grid point, faded by ``alpha`` (a client's weight share)."""
    steps = int(np.sqrt(len(probs)))
    rgba = np.c_[CLASS_COLOURS[probs.argmax(axis=1)], 0.45 * (np.ones(len(probs)) if alpha is None else alpha)]
    ax.imshow(rgba.reshape(steps, steps, 4), origin="lower", extent=extent, aspect="auto")


def draw_iris(axes, seed: int) -> None:
    points, labels, splits, ensemble = iris_ensemble(seed, IRIS_LAM, IRIS_EPS[0], DELTA)
    at, extent = grid(points.min(0) - 0.5, points.max(0) + 0.5)
    weight = shares(ensemble, "kde", at)
    for i, ax in enumerate(axes[:3]):
        regions(ax, ensemble.classifiers[i](at), extent, weight[i])
        ax.scatter(*points[splits[i]].T, c=CLASS_COLOURS[labels[splits[i]]], s=12, edgecolors="k", linewidths=0.4)
        ax.set_title(f"iris client {i + 1}: prediction / KDE weight", fontsize=9)
    for ax, w, name in [(axes[3], "mean", "mean"), (axes[4], "kde", "KDE-weighted mean")]:
        regions(ax, ensemble.predict(at, w), extent)
        ax.scatter(*points.T, c=CLASS_COLOURS[labels], s=8)
        ax.set_title(f"{name}: accuracy {ensemble.accuracy(points, labels, w):.2f}", fontsize=9)


def draw_gaussians(top, bottom, seed: int, eps: float) -> None:
    from matplotlib.patches import Circle

    ensemble, test, own, negatives = gaussian_toy(seed, eps, DELTA)
    box = GAUSS["box"]
    at, extent = grid(np.array([-box, -box]), np.array([box, box]))
    for x in own:
        top[0].scatter(*x[:300].T, s=3)
    top[0].scatter(*negatives[:600].T, s=2, c="grey", alpha=0.5)
    top[0].add_patch(Circle((0, 0), GAUSS["radius"], fill=False))
    top[0].set_title("clients' Gaussians (300 each shown), D^- (grey)", fontsize=9)
    steps = int(np.sqrt(len(at)))
    for i, (s_share, d_share) in enumerate(zip(shares(ensemble, "logistic", at), shares(ensemble, "density", at))):
        for ax, share, name in [(top[i + 1], s_share, f"s_{i + 1} / sum s_j (DP, eps {eps:g})"),
                                (bottom[i + 1], d_share, f"D_{i + 1} / sum D_j")]:
            image = ax.imshow(share.reshape(steps, steps), origin="lower", extent=extent, vmin=0, vmax=1)
            ax.set_title(name, fontsize=9)
    top[-1].figure.colorbar(image, ax=bottom[3], fraction=0.046)
    for ax, w, name in [(top[4], "logistic", "logistic-weighted"), (bottom[0], "mean", "mean")]:
        probs = ensemble.predict(at, w)
        regions(ax, np.c_[probs, np.zeros(len(probs))][:, [0, 2, 1]], extent)  # inside red, outside blue
        ax.add_patch(Circle((0, 0), GAUSS["radius"], fill=False, ls="--"))
        accuracy = ensemble.accuracy(test, outside(test), w)
        ax.set_title(f"{name} ensemble: accuracy {accuracy:.2f} (blue: outside)", fontsize=9)


def draw_iris_spread(ax, iris: dict[float, list[dict[str, float]]]) -> None:
    first = iris[IRIS_EPS[0]]
    labels = [IRIS_LABELS[w] for w in ("mean", "kde", "logistic")] + [f"DP eps {e:g}" for e in IRIS_EPS]
    values = [[r[w] for r in first] for w in ("mean", "kde", "logistic")]
    values += [[r["logistic_dp"] for r in iris[e]] for e in IRIS_EPS]
    ax.boxplot(values)
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=35, ha="right", fontsize=7)
    ax.axhline(PAPER_IRIS["mean"] / 100, ls=":", c="grey")
    ax.axhline(PAPER_IRIS["kde"] / 100, ls="--", c="grey")
    ax.set_title(f"iris, {len(first)} seeds (paper: 0.33 dotted, 0.88 dashed)", fontsize=9)


def draw(path: Path, iris: dict[float, list[dict[str, float]]]) -> None:
    fig, axes = figure(3, 5, figsize=(20, 11.5))
    draw_iris(axes[0], seed=0)
    draw_gaussians(axes[1], axes[2], seed=0, eps=1.0)
    draw_iris_spread(axes[2][4], iris)
    save_figure(fig, path, dpi=80, title="FedAUX toys: iris (TNNLS Fig. 2, row 1) and three Gaussians "
                                         "(TNNLS Fig. 3, rows 2-3)")


# -- markdown -----------------------------------------------------------------------------------------------------
def iris_markdown(iris: dict[float, list[dict[str, float]]]) -> list[str]:
    first = iris[IRIS_EPS[0]]
    seeds = len(first)
    rows = [[IRIS_LABELS[w], pct([r[w] for r in first]), f"{PAPER_IRIS[w]:.0f}" if w in PAPER_IRIS else ""]
            for w in ("mean", "kde", "logistic")]
    rows += [[f"logistic, DP eps {e:g}", pct([r["logistic_dp"] for r in iris[e]]), ""] for e in IRIS_EPS]
    mean, kde = 100 * np.mean([r["mean"] for r in first]), 100 * np.mean([r["kde"] for r in first])
    return [
        "## Iris (TNNLS Fig. 2, thesis Fig. 7.2)", "",
        "Iris projected on its two principal components (all 150 points; the accuracy is measured on them, "
        "as the figure does). Clients: 1 holds all setosa, 2 all versicolor and a random half of virginica, "
        "3 the other half of virginica (the papers: clients 1 and 3 \"uniformly predict\" one class). Each "
        "client fits a multinomial logistic regression on the classes it holds. The ensemble predicts "
        "sum_i s_i(x) p_i(x) / sum_j s_j(x) with s_i = 1 (mean), the client's Gaussian KDE density (scipy, "
        f"Scott's rule), or the logistic scorer of Alg. 1 (lambda {IRIS_LAM:g}, delta {DELTA:g}) on 200 random "
        "Fourier features (length 1) against 1000 public points uniform on the data's bounding box.", "",
        f"Accuracy, %, over seeds 0-{seeds - 1} (mean ± std, min-max):", "",
        *markdown_table(["weights", "ours", "paper"], rows), "",
        f"The mean ensemble reaches {mean:.1f}% (paper 33%) and the KDE-weighted one {kde:.1f}% (paper 88%), "
        f"{kde - PAPER_IRIS['kde']:+.1f} points from the paper's.",
        dp_sentence(iris), "",
    ]


def dp_sentence(iris: dict[float, list[dict[str, float]]]) -> str:
    parts = [f"{100 * np.mean([r['logistic_dp'] for r in iris[e]]):.1f}% at eps {e:g}" for e in IRIS_EPS]
    clear = 100 * np.mean([r["logistic"] for r in iris[IRIS_EPS[0]]])
    sizes = [len(s) for s in iris_split(load_iris(return_X_y=True)[1], np.random.default_rng(0))]
    sigmas = [dp_sigma(IRIS_LAM, IRIS_EPS[0], DELTA, n + 1000) for n in sizes]
    return (f"The logistic scores weigh the ensemble to {clear:.1f}% without noise and, made DP, to "
            f"{listing(parts)}. The clients hold {listing([str(n) for n in sizes])} points, so at eps "
            f"{IRIS_EPS[0]:g} eq. 12 adds noise of std {min(sigmas):.2f} to {max(sigmas):.2f} to each of "
            "w's 200 coordinates.")


def gaussian_markdown(rows: list[dict[str, float]]) -> list[str]:
    seeds = len({r["seed"] for r in rows})
    table = []
    for eps in GAUSS["eps"]:
        mine = [r for r in rows if r["eps"] == eps]
        table.append([f"{eps:g}"] + [pct([r[w] for r in mine]) for w in GAUSS_WEIGHTINGS]
                     + [f"{np.mean([r['ratio_error'] for r in mine]):.3f}"])
    at_one = [r for r in rows if r["eps"] == 1.0]
    return [
        "## Three Gaussians (TNNLS Fig. 3, arXiv Fig. 14, thesis Fig. 7.3)", "",
        f"Clients hold {GAUSS['n']} points each of N(c_i, I), c_i at radius {GAUSS['radius']:g} and angles 90, "
        f"210, 330 degrees; D^- is {GAUSS['negatives']} points uniform on [-{GAUSS['box']:g}, {GAUSS['box']:g}]^2; "
        "h_0 is 200 random Fourier features (length 2). Label: outside the circle through the centres; each "
        "client fits a linear classifier on its own points. Test: 1000 fresh points per Gaussian. The "
        f"logistic scorer is Alg. 1's at lambda {GAUSS['lam']:g}, delta {DELTA:g}; the paper draws this toy "
        "without numbers.", "",
        f"Test accuracy, %, over seeds 0-{seeds - 1}, by the weights of the ensemble; last column the mean "
        "|s_i/sum_j s_j - D_i/sum_j D_j| over the test points (eq. 7.9):", "",
        *markdown_table(["eps of s_i"] + list(GAUSS_WEIGHTINGS.values()) + ["share error"], table), "",
        f"At eps 1 the DP logistic weights reach {100 * np.mean([r['logistic'] for r in at_one]):.1f}%, "
        f"against {100 * np.mean([r['density'] for r in at_one]):.1f}% with the true densities and "
        f"{100 * np.mean([r['mean'] for r in at_one]):.1f}% for the plain mean.", "",
    ]


def page(saved: dict) -> str:
    """The page, from what a run of the toys saved (``docs/records/repro_fedaux_toy.json``)."""
    iris = {float(eps): rows for eps, rows in saved["iris"].items()}
    lines = ["# FedAUX toy examples: certainty-weighted vs mean ensembles", "",
             "`scripts/repro/fedaux_toy.py`; the scorers are `fedray/privacy/certainty.py`. The ensembles weigh "
             "by s_i as FedAUX eq. 3 (thesis eq. 7.4), but average the clients' predicted probabilities, not "
             "logits: a client that holds one class has no finite logits.", "",
             *iris_markdown(iris), *gaussian_markdown(saved["gauss"]),
             "![toys](records/repro_fedaux_toy.png)", "",
             f"Wall time {saved['wall_s']:.0f} s; the numbers are `records/repro_fedaux_toy.json`'s; "
             f"{runs_commit_text([saved], 'the toys')}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="iris seeds (the Gaussian toy runs 3)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--plot-only", action="store_true", help="the page and figure again from the saved .json")
    args = parser.parse_args()
    json_path = record_file(args.out / "repro_fedaux_toy", ".json")
    if args.plot_only:
        saved = json.loads(json_path.read_text())
    else:
        start = time.perf_counter()
        saved = {"seeds": args.seeds, "iris": iris_results(args.seeds), "gauss": gaussian_results(min(3, args.seeds))}
        saved["wall_s"] = time.perf_counter() - start
        saved["provenance"] = source()  # the fedray commit the toys ran at (scripts/docs/generate.py names it)
        args.out.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(saved, indent=1))
    draw(record_file(args.out / "repro_fedaux_toy", ".png"), {float(e): rows for e, rows in saved["iris"].items()})
    text = page(saved)
    (args.out / "repro_fedaux_toy.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
