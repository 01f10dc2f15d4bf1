"""FedNova (Wang et al., NeurIPS 2020) as a fedray method of a user's own: ``algorithm.name: fednova:FedNova``."""

from .method import FedNova, FedNovaClient, FedNovaParams, FedNovaUpload, a_norm

__all__ = ["FedNova", "FedNovaClient", "FedNovaParams", "FedNovaUpload", "a_norm"]
