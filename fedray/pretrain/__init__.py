"""Self-supervised pre-training of feature extractors on the auxiliary data (no Ray).

- :mod:`fedray.pretrain.simclr`: SimCLR (augmentations, NT-Xent, projection head), FedAUX's P1, and
  the disk cache of pre-trained initial models.
"""

from fedray.pretrain.simclr import augment, augment_torchvision, nt_xent, pretrain_features, pretrained_weights

__all__ = ["augment", "augment_torchvision", "nt_xent", "pretrain_features", "pretrained_weights"]
