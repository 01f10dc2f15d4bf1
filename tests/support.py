"""Helpers shared by tests: build a method's halves from a config the way a run does; a user's observer."""

from fedray.algorithms import ServerContext
from fedray.method import resolve
from fedray.observers import Observer


def make_strategy(config, specs, build_model, **context):
    """The config's method's server half over ``specs`` (``resolve`` validates its parameters)."""
    return resolve(config).make_strategy(ServerContext(config, specs, build_model, **context))


class ClientCounter(Observer):
    """A user's observer (``fedray.observers``): counts the clients whose updates reached the
    aggregate, logs that as a metric of each round, and keeps its running total across a resume."""

    key = "client_counter"

    def __init__(self):
        self.total, self.rounds = 0, []

    def aggregated(self, fed, step):
        self.total += len(step.updates)
        step.metrics["user/clients_total"] = float(self.total)

    def ended(self, fed, step):
        self.rounds.append(step.round)

    def finished(self, fed, summary):
        summary["client_counter"] = {"total": self.total, "rounds": self.rounds}

    def state_dict(self):
        return self.total

    def load_state_dict(self, state):
        self.total = state
