"""Every drawing of fedray: the one module that imports matplotlib.

- :func:`partition_figure`: the heatmap of a data split, logged at the start of a run.
- :func:`tree_figure`: Clustered FL's parameter tree (``TreeView.figure``), logged when it changes.
- :func:`render`: a figure as the (H, W, 3) pixels TensorBoard logs.
- :func:`curves_figure` and :func:`plot_file`: the figure ``fedray plot`` draws from runs' event files
  (``fedray.tracking.plot_runs`` reads them) and the file it writes.
- :func:`figure` and :func:`save_figure`: a blank figure with axes and its file, for the
  reproduction scripts and the methods' own diagnostic figures.

Every figure is drawn on an Agg canvas of its own, off-screen and outside pyplot: it needs no
display, pyplot's list of open figures never holds it (nothing to close, nothing leaks) and any
thread may draw it. matplotlib is imported on the first drawing, not with this module, so that
importing fedray (every Ray actor does) does not load it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from fedray.parameter_tree import TreeView


def new_figure(figsize: tuple[float, float] | None = None, dpi: float | None = None) -> Figure:
    """An empty figure on an Agg canvas of its own (matplotlib's default size and dpi where None)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def render(figure: Figure) -> np.ndarray:
    """A figure on its own Agg canvas drawn to an (H, W, 3) uint8 image, the pixels
    ``RunWriter.log_figure`` would log; it touches no global state, so any thread may draw it."""
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


def partition_figure(counts: np.ndarray, class_names: list[str] | None = None) -> Figure:
    """Heatmap of a split: clients on the y axis, classes on the x axis, sample counts as colour.

    Readable from 10 to 500 clients (the height grows slowly with the client count, client ticks are
    thinned).

    Args:
        counts: (clients x classes) matrix, e.g. from :func:`fedray.data.partition.label_counts`.
        class_names: Optional class names for the x axis.

    Returns:
        The figure; its first axes holds the single image, the second the colour bar.
    """
    num_clients, num_classes = counts.shape
    fig = new_figure((min(4.0 + 0.35 * num_classes, 16.0), min(3.0 + 0.04 * num_clients, 12.0)), dpi=100)
    ax = fig.add_subplot()
    image = ax.imshow(counts, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(image, ax=ax, label="samples")
    ax.set_title(f"{num_clients} clients, {int(counts.sum())} samples")
    ax.set_ylabel("client")
    ax.set_xlabel("class")
    if class_names is not None and num_classes <= 30:
        ax.set_xticks(range(num_classes), [str(n) for n in class_names], rotation=45 if num_classes > 10 else 0,
                      ha="right" if num_classes > 10 else "center", fontsize=8)  # fmt: skip
    elif num_classes <= 30:
        ax.set_xticks(range(num_classes))
    if num_clients <= 30:
        ax.set_yticks(range(num_clients))
    fig.tight_layout()
    return fig


def tree_figure(view: TreeView, title: str = "") -> Figure:
    """A parameter tree (a ``TreeView``, thesis Fig. 6.5): each cluster at its depth with its clients
    and the round it was made, leaves spread left to right, a parent above the middle of its children;
    active clusters green, dropped ones grey."""
    order = view.preorder()
    depth = dict(order)
    leaves = [v for v, _ in order if view.nodes[v].is_leaf]
    x = {v: float(i) for i, v in enumerate(leaves)}
    for v, _ in reversed(order):
        if v not in x:
            x[v] = float(np.mean([x[c] for c in view.nodes[v].children]))
    fig = new_figure((max(4.0, 1.6 * len(leaves)), 1.5 + 1.2 * max(depth.values())))
    ax = fig.add_subplot()
    for v, n in view.nodes.items():
        for c in n.children:
            ax.plot([x[v], x[c]], [-depth[v], -depth[c]], color="grey", lw=1)
    for v, n in view.nodes.items():
        color = "lightgrey" if n.dropped else ("palegreen" if n.is_leaf else "lightblue")
        ax.text(x[v], -depth[v], f"{v}\n{len(n.clients)} clients\nround {n.created}", ha="center",
                va="center", fontsize=8, bbox={"boxstyle": "round", "fc": color})
    ax.set_xlim(-0.7, len(leaves) - 0.3)
    ax.set_ylim(-max(depth.values()) - 0.6, 0.6)
    ax.axis("off")
    ax.set_title(title or "parameter tree (green: active clusters, grey: dropped)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_file(out: str | Path, what: str = "out") -> Path:
    """The file ``fedray.tracking.plot_runs`` writes for ``out``: ``.png`` added when it has no suffix, as matplotlib
    adds it. Raises ValueError (one line; ``what`` names the setting) when it cannot be written: a
    folder, a missing or unwritable folder, or a format matplotlib does not write."""
    from matplotlib.backend_bases import FigureCanvasBase

    out = Path(out)
    if os.path.isdir(out):
        raise ValueError(f"{what} {out} is a folder: name a file in it, e.g. {out / 'plot.png'}")
    out = out if out.suffix else out.with_suffix(".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise ValueError(f"{what} {out}: matplotlib cannot write {out.suffix} files; end the name in "
                         f"{', '.join('.' + f for f in sorted(formats))}")
    folder = out.parent
    if not os.path.isdir(folder):
        found = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)  # the nearest that is there
        if found is not None and not os.path.isdir(found):
            raise ValueError(f"{what} {out}: {found} is a file, not a folder; name a file in a folder")
        raise ValueError(f"{what} {out}: the folder {folder} does not exist; make it or name a file in another")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {out}: the folder {folder} is not writable; name a file in another")
    return out


def curves_figure(curves: list[tuple[str, list[float], list[float]]], xlabel: str, ylabel: str) -> Figure:
    """Curves on one axes, each ``(label, x values, y values)``, with markers, a grid and a legend: the
    figure ``fedray plot`` draws (``fedray.tracking.plot_runs`` reads the runs into it)."""
    fig = new_figure((7, 4.5))
    ax = fig.add_subplot()
    for label, xs, ys in curves:
        ax.plot(xs, ys, marker="o", markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def figure(rows: int = 1, cols: int = 1, figsize: tuple[float, float] | None = None, **kwargs: Any
           ) -> tuple[Figure, Any]:
    """A figure of ``figsize`` inches and its ``rows`` x ``cols`` axes (``kwargs`` as
    ``Figure.subplots`` takes them: ``sharex``, ``sharey``, ``squeeze``, ...)."""
    fig = new_figure(figsize)
    return fig, fig.subplots(rows, cols, **kwargs)


def save_figure(fig: Figure, path: str | Path, dpi: int = 100, title: str | None = None) -> None:
    """Give ``fig`` its title, lay it out and write it to ``path``."""
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
