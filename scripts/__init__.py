"""The project's scripts, by job. None of them is part of the ``fedray`` package; each runs as a file
(``python scripts/<folder>/<name>.py``) and imports its siblings as ``scripts.<folder>.<name>``.

- ``setup.sh``, ``test.sh``, ``quickstart.sh``: the README's commands; ``gpu_check.py``: the checks
  on a machine with a GPU.
- ``setup/``: what ``setup.sh`` installs besides the main environment (the vision and cluster
  environments, Fashion-MNIST) and the pinned versions.
- ``test/``: the test legs besides the main one, the bit-for-bit record of every method, and the
  GPU run (``gpu_pack.sh`` here, ``gpu_all.sh`` there).
- ``bench/``: the benchmarks (docs/performance.md).
- ``repro/``: the reproductions of the papers' tables, their pages and the claims tested on them
  (docs/reproductions.md).
- ``authors/``: fedray beside the authors' own code (docs/authors.md).
- ``docs/``: the generator of every page drawn from recorded runs.
- ``cluster/``: the cluster launcher's config and its rehearsal on one machine (docs/cluster.md).
"""
