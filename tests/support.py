"""Helpers shared by tests: build a method's halves from a config the way a run does."""

from fedray.algorithms import ServerContext
from fedray.experiment import resolve


def make_strategy(config, specs, build_model, **context):
    """The config's method's server half over ``specs`` (``resolve`` validates its parameters)."""
    return resolve(config).make_strategy(ServerContext(config, specs, build_model, **context))
