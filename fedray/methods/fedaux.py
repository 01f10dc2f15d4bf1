"""FedAUX: Sattler, Korjakow, Rischke, Samek, "FedAUX: Leveraging Unlabeled Auxiliary Data in
Federated Learning", IEEE TNNLS 2021; thesis chapter 7, Algorithms 14 and 15.

    Alg. 14, preparation (once):                                                   # prepare / prepared
        split D_aux into D^- and D_distill                                         # aux.negatives
        server: h_0^P <- train_self_supervised(h^P, D_aux) for every prototype P   # pretrain: (SimCLR)
        client i: w_i* <- argmin_w J(w, h_0^P, D_i, D^-) + N(0, sigma^2 I)        # eqs. 7.6, 7.7, 7.13
                  gamma_i <- max_{x in D_i u D^-} ||h_0^P(x)||;  upload w_i*, gamma_i  # normaliser: paper
        server: s_i(x) <- sigmoid(<w_i*, h_0^P(x) / gamma_i>) + 1e-8, x in D_distill  # eq. 7.8, kept
    Alg. 15, round t:                                                              # as FedDF, with
        theta_i <- train(theta^{R[i]}, D_i), starting from h_0 in round 1            # pretrain:
        theta^P <- sum |D_i| theta_i / sum |D_i|  within each prototype
        distil every theta^P towards softmax(sum_i s_i(x) f_i(x) / sum_j s_j(x))    # eq. 7.4

The clients receive h_0 (theta^0 of their architecture) and the features of D^- under it, not the
raw images (section 7.2: "to save communication"); both are counted in ``comm/bytes_down``.
sigma^2 = 8 ln(1.25/delta) / (eps^2 lambda^2 (|D_i| + |D^-|)^2) (Alg. 14; eq. 7.13's |D_aux| is a
typo) for eps < 1; for eps >= 1, where that formula is not proven, the smallest sigma for which
(eps, delta) holds exactly (Balle and Wang 2018, Theorem 8; :func:`fedray.privacy.dp_sigma`). The
scores are computed once, from the frozen h_0, and kept for the whole run (they are in the
checkpoint). ``regularization: code`` fits w_i as the authors' code does (sklearn C = 1/lambda: J
with lambda / N), which spreads the scores far more (see docs/methods.md) at N times the sensitivity;
``intercept: true``, ``scorer_tol: 1e-4`` and ``scorer_dtype: float32`` are the rest of the code's fit
(an unpenalised, noised intercept, sklearn's default tolerance, on float32 features).
``normaliser: public`` (the default) departs from Alg. 14 to make its privacy hold: gamma is the
largest feature norm over the public D^- alone, and each own feature is clipped to norm 1 after
dividing by it (:mod:`fedray.privacy.certainty` says why Alg. 14's gamma_i voids Theorem 4's bound);
``normaliser: paper`` is Alg. 14's gamma_i, with privacy/epsilon inf.
``scorer`` other than ``logistic`` is thesis Fig. 7.4's ablation: those scorers are
not private, and travel as fitted estimators; ``equal`` is FedDF with pre-training (FedDF+P) and
skips the preparation altogether.

Folding (``fedray.fold``, as FedDF's, :mod:`fedray.methods.feddf`): eq. 7.4's ensemble is
sum_i s_i(x) f_i(x) / sum_i s_i(x), two sums with a coefficient per sample, which the hosts fold
where the clients' logits are. So the host needs s_i: the client scores D_distill (and, for the
weighted-ensemble diagnostic, the test inputs) in its preparation with the scorer it releases and
keeps the scores in its state (``client.state``: the clients stay on their home hosts, and the
scores are checkpointed with them). These are the numbers the server computes from the upload
(Alg. 14), which it still does, for its diagnostics and for ``runtime.fold: false``. h_0's features
of D_distill and of the test inputs are the same for every client of an architecture: a host
computes them once per architecture during the preparation.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Optional

import numpy as np
import torch
from pydantic import Field

from fedray.config import Config
from fedray.distill import predict_features
from fedray.fold import Sum
from fedray.messages import ClientTask, ClientUpdate, RoundPlan
from fedray.methods.base import ServerContext, VirtualClient, task_seed
from fedray.methods.feddf import FedDF, FedDFClient, FusionParams, TEST_INPUTS
from fedray.privacy import SCORERS, dp_mu, privacy_spent, scorer_from_upload
from fedray.round import Round
from fedray.weights import Weights, set_weights

ScorerName = Literal["logistic", "kde", "isolation_forest", "one_class_svm", "svm_rbf", "random", "equal"]


class FedAUXParams(FusionParams):  # no ``share``: the scores weigh whole models
    scorer: ScorerName = "logistic"
    lam: float = Field(0.1, gt=0)  # lambda of J (eq. 7.7); the paper's default
    eps: Optional[float] = Field(0.1, gt=0)  # (eps, delta) of the released w_i* (eq. 7.10); null: no noise, not private
    delta: float = Field(1e-5, gt=0, lt=1)
    # "paper": w* minimises J (eq. 7.7) exactly; "code": the authors' sklearn C = 1/lambda, i.e. J with
    # lambda / N: much sharper scores, N times the sensitivity (privacy/epsilon: the exact eps at delta)
    regularization: Literal["paper", "code"] = "paper"
    # the scorer's normaliser gamma: "public", the largest feature norm over the public negatives D^-,
    # each own feature clipped to norm 1 after it (what makes Theorem 1's (eps, delta) hold); "paper",
    # Alg. 1's gamma_i over D_i u D^-, released without noise: no guarantee (privacy/epsilon inf)
    normaliser: Literal["public", "paper"] = "public"
    # the authors' code's fit beside its C: an unpenalised intercept b, noised as w (true; the paper's
    # scorer has none, and with one Theorem 1 bounds nothing: privacy/epsilon inf), sklearn's L-BFGS
    # tolerance (the code leaves sklearn's default, 1e-4; the default here fits J to 1e-10), and the
    # precision of the fit (the code fits on the model's float32 features; at tol 1e-4 it matters)
    intercept: bool = False
    scorer_tol: float = Field(1e-10, gt=0)
    scorer_dtype: Literal["float64", "float32"] = "float64"
    show_clients: int = Field(4, ge=0)  # rows of the figure of each client's top-scored auxiliary inputs

    @property
    def noise_eps(self) -> float:
        """eps as the Gaussian mechanism takes it: ``eps: null`` is eps = inf, sigma 0 (no noise)."""
        return math.inf if self.eps is None else self.eps


class FedAUXClient(FedDFClient):
    """Rounds as FedDF's client, its terms weighted by s_i; once before them, the certainty scorer
    (Alg. 14, client side) and the scores s_i, which the client keeps."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._h0: dict[tuple[str, str], np.ndarray] = {}  # h_0's features, by architecture and input set

    @classmethod
    def keeps_state(cls, params: FedAUXParams) -> bool:
        return super().keeps_state(params) or params.scorer != "equal"  # its scores

    def prepare(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Any:
        theta, negatives = downloads[:2]  # h_0 and the features h_0(D^-) (then, with log_ensemble, the test inputs)
        self.hold_test_inputs(task, downloads)
        model = self.model(task.arch)
        set_weights(model, theta)
        own = predict_features(model, client.x).cpu().numpy().astype(np.float64)
        p = self.params
        extra = {"regularization": p.regularization, "normaliser": p.normaliser, "intercept": p.intercept,
                 "tol": p.scorer_tol, "dtype": p.scorer_dtype} if p.scorer == "logistic" else {}
        scorer = SCORERS[p.scorer](own, np.asarray(negatives, dtype=np.float64), np.random.default_rng(task.seed),
                                   p.lam, p.noise_eps, p.delta, **extra)
        # s_i on D_distill (eq. 7.8) and on the test set, from the scorer as released (the server's numbers)
        client.state["scores"] = scorer.score(self.h0_features(task.arch, model, "aux")).astype(np.float32)
        if TEST_INPUTS in task.payload_keys:
            client.state["test_scores"] = scorer.score(self.h0_features(task.arch, model, "test")).astype(np.float32)
        return scorer.upload()

    def h0_features(self, arch: str, model: torch.nn.Module, inputs: str) -> np.ndarray:
        """h_0(x) of D_distill (``aux``) or of the test inputs, by ``model`` holding h_0: once per
        architecture on this host, since every client's h_0 is the same."""
        if (arch, inputs) not in self._h0:
            x = self.aux_x if inputs == "aux" else self.test_x
            self._h0[arch, inputs] = predict_features(model, x).cpu().numpy().astype(np.float64)
        return self._h0[arch, inputs]

    def receive(self, task: ClientTask, downloads: tuple[Any, ...], client: VirtualClient) -> Weights:
        self._h0.clear()  # a round: the preparation is over
        return super().receive(task, downloads, client)

    @classmethod
    def collected(cls, params: FedAUXParams) -> dict[str, type]:
        """FedDF's; with a scorer and ``log_ensemble`` also the test outputs weighted by s_i."""
        weighted = params.log_ensemble and params.scorer != "equal"
        return {**super().collected(params), **({"test_weighted": Sum} if weighted else {})}

    def certainty(self, update: ClientUpdate, client: VirtualClient) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        if self.params.scorer == "equal":
            return None, None  # FedDF+P
        if "scores" not in client.state:
            raise RuntimeError(f"client {update.client_id} holds no certainty scores on this host: "
                               f"its preparation (Alg. 14) did not run here")
        return client.state["scores"], client.state.get("test_scores")


class FedAUX(FedDF):
    name = "fedaux"
    description = "FedAUX: FedDF with pre-training on aux data and distillation weighted by private certainty scores"
    paper = ('Sattler, Korjakow, Rischke, Samek 2021, "FedAUX: Leveraging Unlabeled Auxiliary Data in Federated '
        'Learning", IEEE TNNLS; thesis Algs. 14-15, eqs. 7.4-7.13 (Sattler 2021, TU Berlin)')
    Params = FedAUXParams
    Client = FedAUXClient
    state_attrs = ("models", "scores", "test_scores")

    @classmethod
    def config_problem(cls, config: Config, params: FedAUXParams) -> Optional[str]:
        problem = super().config_problem(config, params)
        if problem is None and not config.aux.negatives:
            return ("bad config value aux.negatives = 0: fedaux scores each client against a negative set; "
                    "set aux.negatives (FedAUX: 0.2)")
        if problem is None and not config.pretrain.epochs:
            return ("bad config value pretrain.epochs = 0: fedaux scores with, and starts from, a pre-trained "
                    "feature extractor h_0; set pretrain.epochs (e.g. pretrain.epochs=30)")
        return problem

    def __init__(self, params: FedAUXParams, ctx: ServerContext):
        super().__init__(params, ctx)
        self.scores: dict[int, np.ndarray] = {}  # s_i on D_distill (eq. 7.8), fixed for the run
        self.test_scores: dict[int, np.ndarray] = {}  # s_i on the test set, for the weighted-ensemble diagnostic
        n_max = max(len(c.indices) for c in ctx.clients) + (0 if ctx.negatives_x is None else len(ctx.negatives_x))
        self.n_max = n_max
        self.epsilon, self.delta = privacy_spent(params.scorer, params.noise_eps, params.delta, params.regularization, n_max,
                                                 params.normaliser, params.intercept)
        self.teachers: list[int] = []  # the last round's teacher clients

    # -- preparation (Alg. 14) -------------------------------------------------------------------
    def features(self, arch: str, x: torch.Tensor) -> np.ndarray:
        """h_0^arch(x): the features of the pre-trained initial model."""
        return predict_features(self.work_model(arch, self.ctx.initial(arch)), x).cpu().numpy().astype(np.float64)

    def prepare(self) -> Optional[RoundPlan]:
        """Every client (not only a round's sample) gets h_0 and h_0(D^-), and answers with its scorer."""
        if self.params.scorer == "equal":
            return None  # FedDF+P: nothing to learn about the clients
        negatives = torch.from_numpy(np.ascontiguousarray(self.ctx.negatives_x)).to(self.ctx.device)
        broadcast: dict[str, Any] = {}
        for arch in self.ctx.architectures:
            broadcast[f"model/{arch}"] = self.ctx.initial(arch)
            broadcast[f"negatives/{arch}"] = self.features(arch, negatives).astype(np.float32)
        tasks = [ClientTask(c.client_id, 0, c.arch, (f"model/{c.arch}", f"negatives/{c.arch}"),
                            task_seed(self.config.seed, 0, c.client_id)) for c in self.ctx.clients]
        return self.with_test_inputs(RoundPlan(tasks=tasks, broadcast=broadcast))  # for the clients' test scores

    def prepared(self, updates: list[ClientUpdate]) -> dict[str, float]:
        """s_i on D_distill (eq. 7.8) and, for diagnostics, on the test set, from each client's scorer
        (as the clients have them: the server's own copy, for its figures and unfolded rounds)."""
        distill = {arch: self.features(arch, self.aux) for arch in self.ctx.architectures}
        test = {arch: self.features(arch, self.test_x) for arch in self.ctx.architectures}
        for u in sorted(updates, key=lambda u: u.client_id):
            scorer = scorer_from_upload(u.payload)
            self.scores[u.client_id] = scorer.score(distill[u.arch]).astype(np.float32)
            self.test_scores[u.client_id] = scorer.score(test[u.arch]).astype(np.float32)
        metrics = {"privacy/epsilon": self.epsilon, "privacy/delta": self.delta,
                   "fedaux/score_mean": float(np.mean([s.mean() for s in self.scores.values()])),
                   "fedaux/score_std": float(np.mean([s.std() for s in self.scores.values()]))}  # within a client
        aucs = [a for a in (self.score_auc(cid) for cid in self.test_scores) if a is not None]
        if aucs:
            metrics["fedaux/score_auc"] = float(np.mean(aucs))
        return metrics

    def score_auc(self, client_id: int) -> Optional[float]:
        """Diagnostic (the server knows no client's labels; the simulation does): how well the client's
        scores rank test inputs of the classes it holds (>= 10% of its data) above the others (ROC AUC)."""
        from sklearn.metrics import roc_auc_score

        if self.ctx.label_counts is None:
            return None
        counts = self.ctx.label_counts[client_id]
        held = counts / max(counts.sum(), 1) >= 0.1
        own = held[self.ctx.test_y]
        if own.all() or not own.any():
            return None
        return float(roc_auc_score(own, self.test_scores[client_id]))

    # -- rounds (Alg. 15) ------------------------------------------------------------------------
    def aggregate(self, round: Round) -> dict[str, float]:
        self.teachers = sorted(u.client_id for u in round.updates)  # for this round's histogram
        return super().aggregate(round)

    def artifacts(self, round: int) -> dict[str, Any]:
        if not self.scores:
            return {}
        if round == 0:
            out: dict[str, Any] = {"fedaux/scores": np.concatenate(list(self.scores.values()))}
            if self.params.show_clients:
                out["fedaux/top_scored"] = self.top_scored_figure()
            return out
        return {"fedaux/round_scores": np.concatenate([self.scores[i] for i in self.teachers])}

    def summary(self) -> dict[str, Any]:
        return {"privacy": {"scorer": self.params.scorer, "epsilon": self.epsilon, "delta": self.delta,
                            "lambda": self.params.lam, "regularization": self.params.regularization,
                            "normaliser": self.params.normaliser, "intercept": self.params.intercept, "n_max": self.n_max,
                            # Delta / sigma of the noise at the paper's sensitivity: what an exact figure is computed from
                            "mu": None if math.isinf(self.params.noise_eps)
                            else dp_mu(self.params.noise_eps, self.params.delta)}}

    def top_scored_figure(self, per_client: int = 8):
        """The auxiliary inputs each of a few clients scores highest (FedAUX's empirical-privacy
        figure), beside what the client really holds (a diagnostic the server could not draw)."""
        from fedray.figures import figure

        shown = sorted(self.scores)[: self.params.show_clients]
        fig, axes = figure(len(shown), per_client, figsize=(1.2 * per_client, 1.4 * len(shown)), squeeze=False)
        for row, cid in zip(axes, shown):
            for ax, index in zip(row, np.argsort(-self.scores[cid])[:per_client]):
                ax.imshow(_displayable(self.ctx.aux_x[index]), cmap="gray")
                ax.set_xticks([]), ax.set_yticks([])
            row[0].set_ylabel(self._holds(cid), fontsize=7)
        fig.suptitle("auxiliary inputs each client scores highest (rows: clients)", fontsize=9)
        fig.tight_layout()
        return fig

    def _holds(self, client_id: int) -> str:
        counts = self.ctx.label_counts
        if counts is None:
            return f"client {client_id}"
        names = self.ctx.class_names or [str(c) for c in range(counts.shape[1])]
        top = np.argsort(-counts[client_id])[:2]
        share = counts[client_id] / max(counts[client_id].sum(), 1)
        return f"client {client_id}\n" + "\n".join(f"{names[c]} {100 * share[c]:.0f}%" for c in top if share[c] > 0)


def _displayable(x: np.ndarray) -> np.ndarray:
    """An input (C, H, W) as an image in [0, 1] for ``imshow`` (H, W) or (H, W, 3)."""
    image = np.asarray(x, dtype=np.float64)
    image = (image - image.min()) / max(image.max() - image.min(), 1e-12)
    if image.ndim == 3:
        image = image[0] if image.shape[0] == 1 else np.moveaxis(image, 0, -1)
    return image
