"""The round loop without Ray (runtime.backend: local) on real small data: methods learn, logs, resume."""

import io

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fedray.checkpoint import CHECKPOINT
from fedray.config import build_config
from fedray.assembly import assemble
from fedray.federation import Federation
from fedray.figures import partition_figure, render
from fedray.tracking import plot_runs, read_scalars, target_report


def digits(algorithm, rounds, **extra):
    tree = {"data": {"dataset": "digits"},
            "federation": {"num_clients": 10, "clients_per_round": 5, "rounds": rounds, "architectures": {"mlp": 10}},
            "training": {"lr": 0.1, "batch_size": 16, "epochs": 1},
            "algorithm": {"name": algorithm}, "runtime": {"backend": "local", "torch_threads": 1}}
    for section, values in extra.items():
        tree.setdefault(section, {}).update(values) if isinstance(values, dict) else tree.__setitem__(section, values)
    return build_config(tree)


def run(config, run_dir, rounds=None):
    fed = Federation(assemble(config), run_dir)
    results = [fed.run_round() for _ in range(rounds or config.federation.rounds)]
    return fed, results


def test_fedavg_learns_digits_and_logs_every_round(tmp_path):
    fed, results = run(digits("fedavg", 5), tmp_path)
    fed.finish()
    assert results[-1].metrics["eval/accuracy"] > 0.80  # measured 0.86; chance 0.10
    scalars = read_scalars(tmp_path)
    assert [s for s, _ in scalars["eval/accuracy/mlp"]] == [1, 2, 3, 4, 5]
    for tag in ("train/loss", "comm/bytes_up", "comm/bytes_down", "time/round_s", "time/client_max_s"):
        assert len(scalars[tag]) == 5
    model_bytes = sum(w.nbytes for w in fed.strategy.models["mlp"].values())
    assert all(v == 5 * model_bytes for _, v in scalars["comm/bytes_up"])  # 5 clients upload theta_i
    accuracies = [v for _, v in scalars["eval/accuracy"]]
    target = (accuracies[1] + accuracies[2]) / 2  # first reached in round 3 (accuracy rises here)
    reached = next(i + 1 for i, a in enumerate(accuracies) if a >= target)
    report = target_report(tmp_path, target)
    assert report["round_reached"] == reached and report["rounds"] == 5
    assert report["mb_up_to_target"] == pytest.approx(reached * 5 * model_bytes / 1e6)
    assert target_report(tmp_path, 1.01)["round_reached"] is None
    png = plot_runs([tmp_path], tmp_path / "p.png", x_axis="mb_up")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with pytest.raises(ValueError, match="has no 'eval/nope' values"):
        plot_runs([tmp_path], tmp_path / "q.png", tag="eval/nope")
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    # the partition heatmap, drawn in a thread at start-up: exactly the figure's pixels
    [image] = acc.Images("data/partition")
    logged = np.asarray(Image.open(io.BytesIO(image.encoded_image_string)).convert("RGB"))
    np.testing.assert_array_equal(logged, render(partition_figure(fed.experiment.counts, fed.experiment.data.classes)))
    assert "config/text_summary" in acc.Tags()["tensors"]


def test_mixed_architectures_log_the_participants_of_each(tmp_path):
    config = digits("fedavg", 3, federation={"architectures": {"mlp": 5, "logreg": 5}, "clients_per_round": 4})
    fed, results = run(config, tmp_path)
    for result in results:
        sampled = [c.arch for c in fed.strategy.sample_clients(result.round)]
        m = result.metrics
        assert (m["clients/participants/mlp"], m["clients/participants/logreg"]) == (sampled.count("mlp"),
                                                                                     sampled.count("logreg"))
    # over three rounds of 4 out of 5 + 5 clients both architectures are drawn, in other proportions
    assert {results[i].metrics["clients/participants/mlp"] for i in range(3)} != {2.0}
    assert "clients/participants/mlp" not in run(digits("fedavg", 1), tmp_path / "one")[1][0].metrics


def test_dsgd_learns(tmp_path):
    config = digits("dsgd", 100, federation={"clients_per_round": 10, "eval_every": 25})
    _, results = run(config, tmp_path)
    assert results[-1].metrics["eval/accuracy"] > 0.88  # measured 0.93


def test_central_baseline_uses_pooled_data(tmp_path):
    fed, results = run(digits("central", 2), tmp_path)
    assert len(fed.experiment.clients) == 1 and fed.experiment.clients[0].num_samples == len(fed.executor.host.train_y)
    assert fed.experiment.data.train_x is None  # the server keeps no training set once the clients hold it
    assert results[-1].metrics["clients/participants"] == 1
    assert results[-1].metrics["eval/accuracy"] > 0.90  # measured 0.95


def test_fedprox_learns_synthetic_natural_split(tmp_path):
    config = build_config({
        "data": {"dataset": "synthetic", "options": {"num_clients": 30}, "partition": "natural"},
        "federation": {"num_clients": 30, "clients_per_round": 10, "rounds": 20,
                       "architectures": {"logreg": 30}, "eval_every": 5},
        "training": {"lr": 0.01, "batch_size": 10, "epochs": 5},
        "algorithm": {"name": "fedprox", "mu": 1.0, "weighted": True},
        "runtime": {"backend": "local", "torch_threads": 1}})
    fed, results = run(config, tmp_path)
    majority = np.bincount(fed.experiment.data.test_y).max() / len(fed.experiment.data.test_y)
    assert results[-1].metrics["eval/accuracy"] > majority + 0.15  # measured 0.67


def test_proximal_term_keeps_clients_near_the_global_model(tmp_path):
    def drift(mu):
        config = build_config({**digits("fedprox", 1).to_dict(), "algorithm": {"name": "fedprox", "mu": mu}})
        fed = Federation(assemble(config), tmp_path / str(mu))
        start = {k: v.copy() for k, v in fed.strategy.models["mlp"].items()}
        fed.run_round()
        return sum(float(np.sum((fed.strategy.models["mlp"][k] - start[k]) ** 2)) for k in start)
    assert drift(10.0) < 0.5 * drift(0.0)


@pytest.mark.parametrize("algorithm", [{"name": "fedavg"}, {"name": "scaffold"}, {"name": "fedopt"},
                                       {"name": "mrtf", "cluster_after": 2, "distill": {"steps": 30}},
                                       {"name": "mrtf", "weights": "code", "ema": True, "std": "batch",
                                        "distill": {"steps": 30, "schedule": "cosine"}},
                                       {"name": "fedgen", "gen_steps": 10}, {"name": "fedgen", "gen_steps": 10, "share": "head"},
                                       {"name": "feddistill", "share_models": True, "share": "head"},
                                       {"name": "feddf", "share": "head", "distill": {"steps": 5}}],
                         ids=lambda a: a["name"] + ("_code" if a.get("ema") else "") + ("_head" if a.get("share") else ""))
def test_local_resume_matches_uninterrupted_run(tmp_path, algorithm):
    """Also SCAFFOLD's control variates (the clients' c_i and the server's c), FedOpt's moments and
    MrTF's refined models, its loss history and last targets (the code's rules), and FedGen's generator,
    its Adam moments and the label prior, and with share: head every client's own feature extractor,
    come back from the checkpoint."""
    config = digits(algorithm["name"], 4, checkpoint_every=2, **({"aux": {"size": 200}} if algorithm["name"] == "feddf" else {}))
    config = build_config({**config.to_dict(), "algorithm": algorithm})
    whole, _ = run(config, tmp_path / "a")
    part, _ = run(config, tmp_path / "b", rounds=2)
    part.finish()
    resumed = Federation(assemble(config), tmp_path / "b", resume=True)
    assert resumed.round == 2
    resumed.run_round(), resumed.run_round()
    for name, value in whole.strategy.models["mlp"].items():
        np.testing.assert_array_equal(value, resumed.strategy.models["mlp"][name])
    resumed.finish()
    assert read_scalars(tmp_path / "a")["eval/accuracy"] == read_scalars(tmp_path / "b")["eval/accuracy"]


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
        Federation(assemble(digits("fedavg", 2)), tmp_path, resume=True)


def test_a_run_without_checkpoints_writes_none_and_still_reports(tmp_path):
    fed = Federation(assemble(digits("fedavg", 2, checkpoint_every=1)), tmp_path, checkpoints=False)
    fed.run_round(), fed.run_round()
    summary = fed.finish()
    assert not (tmp_path / CHECKPOINT).exists() and summary["rounds"] == 2
    assert (tmp_path / "result.json").is_file() and summary["best_accuracy"] > 0.5
