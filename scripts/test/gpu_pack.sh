#!/bin/bash
# Packs what scripts/test/gpu_all.sh needs on a GPU machine that has torch but no Ray, no pydantic and no
# network, into .gpu/ (ignored by git; carry it with the device call):
# - Ray's files for CPython 3.12 as one tar.xz, without the parts fedray does not import (Java jars,
#   RLlib, Serve, Data, Train, LLM): 79 MB as a wheel, about 26 MB so;
# - the small wheels fedray needs beside it (pydantic, jsonschema and theirs);
# - Fashion-MNIST's four idx files from Debian's dataset-fashion-mnist (30 MB).
# Everything that travels must stay under the device call's 64 MiB: with .gpu/ (58 MB), move
# docs/records/*.json, docs/records/*.png and tests/golden.npz (10 MB) out of the tree for the call.
set -eu
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
mkdir -p .gpu/wheels .gpu/datasets/fashion-mnist
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
version() { $PY -c "import importlib.metadata as m; print(m.version('$1'))"; }
wheels=(ray pydantic pydantic_core annotated-types typing-inspection typing_extensions jsonschema
        jsonschema-specifications referencing rpds-py)
specs=(); for w in "${wheels[@]}"; do specs+=("$w==$(version "$w")"); done
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .gpu/wheels "${specs[@]}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unzip -q .gpu/wheels/ray-*.whl -d "$tmp"
rm -rf "$tmp"/ray/{jars,rllib,serve,data,train,llm}
tar -C "$tmp" -cf - . | xz -T0 -9e > .gpu/ray.tar.xz
rm .gpu/wheels/ray-*.whl
mv .gpu/wheels/*.whl .gpu/ && rmdir .gpu/wheels
cp /usr/share/datasets/fashion-mnist/*.gz .gpu/datasets/fashion-mnist/
du -sh .gpu
