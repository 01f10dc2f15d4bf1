"""Fuzzing the readers of untrusted bytes: configs, overrides, Golomb payloads, soft labels, checkpoints.

Each target gets random inputs and mutations of valid ones (truncated, a byte flipped, bytes inserted,
deleted or swapped, header fields replaced and the checksum re-sealed so that the decoder's own checks
are reached). Whatever comes in, the target either works, and its result keeps the target's invariant,
or raises the project's own error in one line: ``ConfigError``, ``CorruptPayload`` or ``CheckpointError``.
Derandomized, 1,000 examples a target, so CI sees the same inputs every time.

Strategies are made once, at import: hypothesis validates each new strategy object, which on these
tiny inputs costs more than the code under test.
"""

import copy
import json
import os
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedray.checkpoint import (CHECKPOINT, MAGIC, CheckpointError, checkpoint_round, read_checkpoint,
                               verify_checkpoint, write_checkpoint)
from fedray.compression import (COMPRESSORS, CorruptPayload, decode_tensor, decode_update, encode_tensor, golomb,
                                golomb_decode, golomb_encode, optimal_b, sign)
from fedray.config import Config, ConfigError, apply_overrides, build_config, load_config
from fedray.distill import soft_labels
from fedray.distill.soft_labels import FULL_PRECISION, decode_soft_labels, dequantize, encode_soft_labels, quantize

FUZZ = settings(max_examples=1000, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# per-example folders on tmpfs where there is one: a folder on disk costs 1 to 3 ms to make and remove
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
CONFIGS = sorted(Path(__file__).resolve().parents[1].glob("configs/*.yaml"))
CONFIG_TEXTS = [path.read_bytes() for path in CONFIGS]
CONFIG_TREES = [yaml.safe_load(text) for text in CONFIG_TEXTS]


def text(max_size: int) -> st.SearchStrategy:
    """Unicode text without surrogates (``st.text()``'s default alphabet takes seconds to tabulate on a
    fresh machine)."""
    return st.text(st.characters(exclude_categories=["Cs"]), max_size=max_size)


def one_line(err: BaseException) -> str:
    """The error's message, after checking that it is a single non-empty line."""
    message = str(err)
    assert message and len(message.splitlines()) == 1, repr(message)  # splitlines: \n, \r, \x85, \u2028 ...
    return message


def decoded(decode, *args, valid: bool, naming: str = ""):
    """What ``decode(*args)`` returns, or None when it raises CorruptPayload, which must be one line
    (naming ``naming``) and must not happen to a ``valid`` input."""
    try:
        return decode(*args)
    except CorruptPayload as err:
        assert naming in one_line(err)
        assert not valid, f"a valid input was refused: {err}"
        return None


# --- mutations of valid bytes ---------------------------------------------------------------------

SEED = st.integers(0, 2**32 - 1)
COIN = st.booleans()
MASK = st.integers(1, 255)
SPAN = st.integers(1, 16)
INSERT = st.binary(min_size=1, max_size=16)
EDITS = st.integers(0, 3)
RANDOM_BYTES = st.binary(max_size=80)


def place(draw, size: int) -> int:
    """An integer from 0 to ``size`` (``st.integers`` caches its strategies, so this makes none per example)."""
    return draw(st.integers(0, size))


def pick(draw, options):
    """One of ``options``, a sequence made for this example."""
    return options[place(draw, len(options) - 1)]


def _truncate(draw, buf: bytearray) -> bytearray:
    return buf[:place(draw, len(buf))]


def _flip(draw, buf: bytearray) -> bytearray:
    if buf:
        buf[place(draw, len(buf) - 1)] ^= draw(MASK)
    return buf


def _insert(draw, buf: bytearray) -> bytearray:
    at = place(draw, len(buf))
    return buf[:at] + draw(INSERT) + buf[at:]


def _delete(draw, buf: bytearray) -> bytearray:
    at = place(draw, len(buf))
    return buf[:at] + buf[at + draw(SPAN):]


def _swap(draw, buf: bytearray) -> bytearray:
    """Two adjacent ranges trade places (fields in the wrong order)."""
    i, j, k = sorted(place(draw, len(buf)) for _ in range(3))
    return buf[:i] + buf[j:k] + buf[i:j] + buf[k:]


EDIT = st.sampled_from((_truncate, _flip, _insert, _delete, _swap))


def mutate(draw, data: bytes) -> bytes:
    """``data`` after 0 to 3 random edits (0 edits: the valid input itself)."""
    buf = bytearray(data)
    for _ in range(draw(EDITS)):
        buf = draw(EDIT)(draw, buf)
    return bytes(buf)


def _field_values(code: str) -> st.SearchStrategy:
    """Any value of one ``struct`` field: edge values often, random ones otherwise."""
    if code == "f":
        return st.floats(width=32)
    top = (1 << 8 * struct.calcsize("<" + code)) - 1
    return st.one_of(st.sampled_from([0, 1, 2, top, top >> 1, (top >> 1) + 1]), st.integers(0, 64),
                     st.integers(0, top))


FIELD_VALUES = {code: _field_values(code) for code in "BHIQf"}
HOW_DAMAGED = st.sampled_from(["none", "edited", "fields", "edited and re-sealed", "random"])
FIELDS_CHANGED = st.integers(1, 2)


def damage(draw, payload: bytes, header: struct.Struct) -> bytes:
    """``payload`` intact, with raw edits (its CRC32 catches them), with one or two header fields replaced
    or bytes edited and the CRC32 that ends ``header`` re-sealed (so that the decoder's own checks are
    reached), or random bytes."""
    how = draw(HOW_DAMAGED)
    if how == "none":
        return payload
    if how == "random":
        return draw(RANDOM_BYTES)
    if how == "fields":
        fields = list(header.unpack_from(payload))
        codes = header.format.lstrip("<").replace("4s", "s")  # one letter a field
        for _ in range(draw(FIELDS_CHANGED)):
            i = 1 + place(draw, len(codes) - 3)  # neither the magic nor the CRC
            fields[i] = draw(FIELD_VALUES[codes[i]])
        payload = header.pack(*fields) + payload[header.size:]
    else:
        payload = mutate(draw, payload)
    if how == "edited" or len(payload) < header.size:
        return payload
    fields = list(header.unpack_from(payload))
    body = payload[header.size:]
    fields[-1] = zlib.crc32(header.pack(*fields[:-1], 0)[:-4] + body)
    return header.pack(*fields) + body


# --- 1. the config loader -------------------------------------------------------------------------

def _keys(tree: dict) -> set:
    """Every key of a tree of dicts, at any depth."""
    keys = set(tree)
    for value in tree.values():
        if isinstance(value, dict):
            keys |= _keys(value)
    return keys


def _get(tree: dict, path: tuple):
    """The node of ``tree`` at ``path``."""
    for key in path:
        tree = tree[key]
    return tree


def _paths(tree, prefix=()) -> list[tuple]:
    """Every path into a tree of dicts, sections and leaves alike, the root first."""
    out = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += _paths(value, prefix + (key,))
    return out


KEYS = sorted(_keys(Config().to_dict()).union(*map(_keys, CONFIG_TREES)))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), text(8),
                    st.sampled_from(["auto", "cnn", "mlp", "iid", "sgd", "local", "fedavg", "2020-13-45"]))
YAML_KEYS = st.one_of(st.sampled_from(KEYS), text(6), st.integers(-3, 3), st.booleans())
YAML_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(YAML_KEYS, inner, max_size=3)),
                           max_leaves=8)
RANDOM_TREES = st.dictionaries(YAML_KEYS, YAML_VALUES, max_size=4)
# deeper than PyYAML's recursion goes; the block form is the cheapest to parse (13 ms against 75 ms
# for a flow sequence as deep)
TOO_DEEP = "- " * 600 + "x"
ODD_VALUES = ["", "=", "{", "[a, {b: ]", "!!python/object:os.system", "&a [*a]", "[" * 50, "2020-02-30",
              "2020-13-45", "0x1F", "1e400", ".nan", "~", "{cnn: 100}"]
ODD_FILES = ["", "# only a comment", "~", "[]", "- a", "{federation: {num_clients: 0}}", "\t", TOO_DEEP]
EDIT_ACTIONS = st.sampled_from(["set", "delete", "add"])
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: 5 times faster than PyYAML's own


def _flow(value) -> str:
    """A value as one line of YAML flow text, as a user types it."""
    line = yaml.dump(value, Dumper=DUMPER, default_flow_style=True, width=1 << 16).strip()
    return line.removesuffix("...").strip()


def _dump(tree) -> bytes:
    return yaml.dump(tree, Dumper=DUMPER).encode()


VALUE_TEXT = st.one_of(YAML_VALUES.map(_flow), text(10), st.sampled_from(ODD_VALUES))
SETTING_LINES = st.lists(st.tuples(st.sampled_from(KEYS), VALUE_TEXT), max_size=3)


@st.composite
def edited_config(draw) -> bytes:
    """A shipped config with a few settings replaced by random values, deleted or added."""
    tree = copy.deepcopy(pick(draw, CONFIG_TREES))
    for _ in range(draw(EDITS) + 1):
        paths = _paths(tree)[1:]
        if not paths:
            break
        path = pick(draw, paths)
        node = _get(tree, path[:-1])
        action = draw(EDIT_ACTIONS)
        if action == "add" and isinstance(node[path[-1]], dict):
            node[path[-1]][draw(YAML_KEYS)] = draw(YAML_VALUES)
        elif action == "delete":
            del node[path[-1]]
        else:
            node[path[-1]] = draw(YAML_VALUES)
    return _dump(tree)


@st.composite
def typed_config(draw) -> bytes:
    """A config as a user types it: sections of ``key: value`` lines, values in YAML's own syntax."""
    lines = []
    for _ in range(draw(EDITS) + 1):
        section, entries = pick(draw, KEYS), draw(SETTING_LINES)
        if not entries:
            lines.append(f"{section}: {draw(VALUE_TEXT)}")
        lines += [f"{section}:"] * bool(entries) + [f"  {key}: {value}" for key, value in entries]
    return "\n".join(lines).encode()


CONFIG_FILES = st.one_of(
    st.composite(lambda draw: mutate(draw, pick(draw, CONFIG_TEXTS)))(),
    edited_config(),
    st.composite(lambda draw: mutate(draw, _dump(draw(RANDOM_TREES))))(),
    typed_config(),
    st.sampled_from(ODD_FILES).map(str.encode),
    RANDOM_BYTES,
    text(64).map(str.encode),
)


@FUZZ
@given(CONFIG_FILES)
def test_load_config_returns_a_config_or_one_config_error(data):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as folder:
        path = Path(folder) / "c.yaml"
        path.write_bytes(data)
        try:
            config = load_config(path)
        except ConfigError as err:
            one_line(err)
            return
    assert isinstance(config, Config)
    json.dumps(config.to_dict())  # what the run folder and the checkpoint header record


# --- 2. dotted overrides --------------------------------------------------------------------------

BASE = CONFIG_TREES[[path.stem for path in CONFIGS].index("quickstart")]
BASE_AS_READ = copy.deepcopy(BASE)
DOTTED = sorted(".".join(path) for path in _paths(BASE)[1:]) + ["data.options.x", "federation.architectures.mlp"]
KEY_TEXT = st.one_of(st.sampled_from(DOTTED),
                     st.lists(st.one_of(st.sampled_from(KEYS), text(4)), min_size=1, max_size=4).map(".".join))
# values the shipped configs hold, so that a good share of the overrides build a config
REAL_VALUES = sorted({_flow(value) for tree in CONFIG_TREES for path in _paths(tree)[1:]
                      for value in [_get(tree, path)] if not isinstance(value, dict)} | {"{cnn: 100}", "{mlp: 100}"})
# TOO_DEEP in about one value of 170: it costs 13 ms to parse
OVERRIDE_VALUES = st.one_of(st.sampled_from(REAL_VALUES), YAML_VALUES.map(_flow), text(10),
                            st.sampled_from(ODD_VALUES * 3 + [TOO_DEEP]))
SEPARATORS = st.sampled_from(["="] * 5 + ["==", " = ", ""])
OVERRIDES = st.lists(st.tuples(KEY_TEXT, SEPARATORS, OVERRIDE_VALUES).map("".join), min_size=1, max_size=4)


@FUZZ
@given(OVERRIDES)
def test_overrides_build_a_config_or_raise_one_config_error(overrides):
    try:
        config = build_config(apply_overrides(BASE, overrides))  # apply_overrides calls parse_overrides
    except ConfigError as err:
        one_line(err)
    else:
        assert isinstance(config, Config)
    assert BASE == BASE_AS_READ  # overrides apply to a copy


# --- 3. Golomb positions, tensors and updates -----------------------------------------------------

@st.composite
def golomb_streams(draw) -> tuple:
    """(positions, b, their stream, bits to decode, b to decode with): the stream edited or not, or random bits."""
    n = 1 + place(draw, 600)
    rng = np.random.default_rng(draw(SEED))
    positions = np.sort(rng.choice(n, size=place(draw, min(n, 40)), replace=False))
    b = optimal_b(max(len(positions), 1) / n) if draw(COIN) else place(draw, 12)
    stream = golomb_encode(positions, b)
    if draw(COIN):
        bits = np.frombuffer(mutate(draw, stream.tobytes()), np.uint8) & 1  # a 0/1 byte a bit: edits keep them bits
    else:
        bits = np.unpackbits(np.frombuffer(draw(RANDOM_BYTES), np.uint8))  # 0xff: runs of ones, long quotients
    return positions, b, stream, bits, b if draw(COIN) else place(draw, 70)


@FUZZ
@given(golomb_streams())
@example((np.zeros(0), 0, np.zeros(0), np.array([1, 1, 0] + [0] * 62), 62))  # q = 2, b = 62: a gap of 2^63 + 1
def test_golomb_decode_returns_increasing_positions_or_one_corrupt_payload(case):
    positions, b, stream, bits, b_read = case
    intact = np.array_equal(bits, stream) and b_read == b
    out = decoded(golomb_decode, bits, b_read, valid=intact)
    if out is None:
        return
    assert out.dtype == np.int64 and out.ndim == 1
    assert np.all(out >= 0) and np.all(np.diff(out) > 0)
    if intact:
        np.testing.assert_array_equal(out, positions)


DENSITIES = st.sampled_from([0.01, 0.2, 0.9, 1.0])
KINDS = st.sampled_from(golomb.KINDS)
SHAPES = st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple)


def coded_tensor(kind: str, shape: tuple, rng: np.random.Generator, p: float) -> np.ndarray:
    """A tensor as ``encode_tensor`` gets it: a random update through the compressor of ``kind`` (STC's
    sparse ternary, SBC's one value, top-k's floats; keeping a share ``p``), its signs, summed sign
    votes (int) or itself (dense)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "int":
        return rng.integers(-7, 8, shape)
    if kind == "sign":
        return sign(x)
    return COMPRESSORS[kind](x, p) if kind in COMPRESSORS and x.size else x


@st.composite
def damaged_tensors(draw) -> tuple:
    """(tensor, its shape, its payload, the payload damaged or not, another shape to decode into)."""
    kind, shape = draw(KINDS), draw(SHAPES)
    x = coded_tensor(kind, shape, np.random.default_rng(draw(SEED)), draw(DENSITIES))
    payload = encode_tensor(kind, x)
    return x, shape, payload, damage(draw, payload, golomb._HEADER), draw(SHAPES)


@FUZZ
@given(damaged_tensors())
def test_decode_tensor_returns_the_declared_shape_or_one_corrupt_payload(case):
    x, shape, payload, data, other_shape = case
    for target in (shape, other_shape):
        intact = data == payload and target == shape
        out = decoded(decode_tensor, data, target, "layer.w", valid=intact, naming="layer.w")
        if out is None:
            continue
        assert isinstance(out, np.ndarray) and out.shape == target
        if intact:
            np.testing.assert_array_equal(out, x)


NAMES = ("conv.w", "conv.b", "fc.w")
UPDATE_DAMAGE = st.sampled_from(["none", "stream", "swap", "drop", "extra", "rename"])


@st.composite
def damaged_updates(draw) -> tuple:
    """A coded update of one kind, then one tensor's stream damaged, two streams swapped, or names changed."""
    kind, rng = draw(KINDS), np.random.default_rng(draw(SEED))
    shapes = {name: draw(SHAPES) for name in NAMES[:1 + place(draw, 2)]}
    update = {name: coded_tensor(kind, shape, rng, 0.2) for name, shape in shapes.items()}
    coded = {name: encode_tensor(kind, x) for name, x in update.items()}
    wire, how, name = dict(coded), draw(UPDATE_DAMAGE), pick(draw, NAMES[:len(shapes)])
    if how == "stream":
        wire[name] = damage(draw, wire[name], golomb._HEADER)
    elif how == "swap":
        other = pick(draw, NAMES[:len(shapes)])
        wire[name], wire[other] = wire[other], wire[name]
    elif how == "drop":
        del wire[name]
    elif how == "extra":
        wire["bn.running_mean"] = wire[name]
    elif how == "rename":
        wire[name.upper()] = wire.pop(name)
    return shapes, update, coded, wire


@FUZZ
@given(damaged_updates())
def test_decode_update_returns_every_declared_tensor_or_one_corrupt_payload(case):
    shapes, update, coded, wire = case
    out = decoded(decode_update, wire, shapes, valid=wire == coded)
    if out is None:
        return
    assert set(out) == set(shapes) and all(out[name].shape == shape for name, shape in shapes.items())
    if wire == coded:
        for name, x in update.items():
            np.testing.assert_array_equal(out[name], x)


# --- 4. soft labels -------------------------------------------------------------------------------

BITS = st.sampled_from([1, 2, 3, 8, 9, 16, FULL_PRECISION])
PREVIOUS_GIVEN = st.sampled_from(["own", "none", "wrong shape"])
ANY_BITS = st.one_of(st.none(), st.integers(-2, 40))


@st.composite
def soft_label_cases(draw) -> tuple:
    """Real soft labels on a tiny X^pub (delta-coded or not), their payload, the payload damaged or not,
    the previous labels handed to the decoder, and bits to dequantize with (None: the payload's)."""
    rng = np.random.default_rng(draw(SEED))
    n, c, bits = place(draw, 12), 1 + place(draw, 4), draw(BITS)
    probs = rng.dirichlet(np.ones(c), size=n)
    labels, previous = probs.astype(np.float32), None
    if bits != FULL_PRECISION:
        labels = quantize(probs, bits, rng)
        if draw(COIN):  # last round's labels, about half the rows unchanged
            previous = np.where(rng.random((n, 1)) < 0.5, labels, quantize(rng.dirichlet(np.ones(c), size=n), bits, rng))
    payload = encode_soft_labels(labels, bits, previous)
    data = damage(draw, payload, soft_labels._HEADER)
    given_previous = {"own": previous, "none": None, "wrong shape": np.zeros((1, 7), np.uint8)}[draw(PREVIOUS_GIVEN)]
    return bits, labels, previous, payload, data, given_previous, draw(ANY_BITS)


@FUZZ
@given(soft_label_cases())
def test_decode_soft_labels_returns_labels_or_one_corrupt_payload(case):
    bits, labels, previous, payload, data, given_previous, dequantize_bits = case
    intact = data == payload and (previous is None or given_previous is previous)  # not delta-coded: ignored
    out = decoded(decode_soft_labels, data, given_previous, valid=intact)
    if out is None:
        return
    if intact:
        np.testing.assert_array_equal(out, labels)
    header_bits, delta = data[5], data[6]
    assert isinstance(out, np.ndarray) and out.ndim == 2
    if header_bits == FULL_PRECISION:
        assert out.dtype == np.float32
        return
    assert np.issubdtype(out.dtype, np.integer)
    if not delta or header_bits == bits:  # a delta-coded row comes from previous, whose rows sum to its own L
        assert np.all(out.astype(np.int64).sum(axis=1) == (1 << header_bits) - 1)
        probs = dequantize(out, header_bits)
        assert probs.dtype == np.float32 and np.all((probs >= 0) & (probs <= 1))
    try:  # dequantize with any bits: the grid of those bits, or one ValueError naming them
        probs = dequantize(out, header_bits if dequantize_bits is None else dequantize_bits)
    except ValueError as err:
        assert "bits must be an integer" in one_line(err)
    else:
        assert probs.shape == out.shape and probs.dtype == np.float32


# --- 5. checkpoints -------------------------------------------------------------------------------

CK_CONFIG = build_config({"name": "ck", "federation": {"num_clients": 4, "clients_per_round": 2,
                                                       "architectures": {"mlp": 4}}}).to_dict()
CK_STATE = {"round": 7, "strategy": {"models": {"mlp": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}}}}


def _written_checkpoint() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / CHECKPOINT
        write_checkpoint(path, CK_STATE, CK_CONFIG)
        return path.read_bytes()


CK_BYTES = _written_checkpoint()
CK_HEADER, CK_BODY = CK_BYTES[len(MAGIC):].split(b"\n", 1)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), text(8))
HEADER_VALUES = st.one_of(  # edge values, scalars and whole trees, a third each
    st.sampled_from([7, 7.0, 7.5, "7", -7, 2, 2**64, True, None, "", float("inf"), float("-inf"), float("nan"), 1e300,
                     "0" * 20, f"{len(CK_BODY) - 1:020d}", f"{len(CK_BODY):020d}", "x" * 64, {"\n": 1}]),
    JSON_SCALARS,
    st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(text(5), inner, max_size=3)), max_leaves=6))
HEADER_KEYS = sorted(json.loads(CK_HEADER)) + ["extra"]


@st.composite
def rewritten_header(draw) -> bytes:
    """The checkpoint with header fields replaced by random JSON values, dropped or added."""
    header = json.loads(CK_HEADER)
    for _ in range(draw(EDITS) + 1):
        key = pick(draw, HEADER_KEYS)
        if place(draw, 4) == 0:
            header.pop(key, None)
        else:
            header[key] = draw(HEADER_VALUES)
    return MAGIC + json.dumps(header, sort_keys=draw(COIN)).encode() + b"\n" + CK_BODY


def _deep_config_header(depth: int) -> bytes:
    """The checkpoint with its config nested ``depth`` levels deep, written out by hand (json.dumps
    refuses such depths)."""
    line = json.dumps({**json.loads(CK_HEADER), "config": "DEEP"}).encode()
    return MAGIC + line.replace(b'"DEEP"', b'{"a": ' * depth + b"0" + b"}" * depth) + b"\n" + CK_BODY


ODD_CHECKPOINTS = [MAGIC, MAGIC + b"\n", MAGIC + b"{}\n", MAGIC + b"[" * 100_000 + b"\n", _deep_config_header(900),
                   _deep_config_header(3000)]
CHECKPOINT_FILES = st.one_of(st.composite(lambda draw: mutate(draw, CK_BYTES))(), rewritten_header(), RANDOM_BYTES,
                             st.sampled_from(ODD_CHECKPOINTS), RANDOM_BYTES.map(lambda tail: MAGIC + tail),
                             RANDOM_BYTES.map(lambda tail: b"\x80\x05" + tail))  # format 1: a pickle


def _same_state(state) -> bool:
    w = state["strategy"]["models"]["mlp"]["w"]
    return (set(state) == set(CK_STATE) and state["round"] == 7 and isinstance(w, np.ndarray)
            and np.array_equal(w, CK_STATE["strategy"]["models"]["mlp"]["w"]))


@FUZZ
@given(CHECKPOINT_FILES)
def test_read_checkpoint_returns_the_state_or_one_checkpoint_error(data):
    with tempfile.TemporaryDirectory(dir=SCRATCH) as folder:
        path = Path(folder) / CHECKPOINT
        path.write_bytes(data)
        try:
            state = read_checkpoint(path, CK_CONFIG)
        except CheckpointError as err:
            assert str(path) in one_line(err)
            assert data != CK_BYTES, "a valid checkpoint was refused"
        else:  # the original body, under a header that still says round 7 and agrees with this config
            assert data.endswith(CK_BODY) and _same_state(state)
        try:
            verified = verify_checkpoint(folder, CK_CONFIG)
            assert isinstance(verified, int) and verified == verify_checkpoint(folder)
        except CheckpointError as err:
            one_line(err)
        try:
            assert isinstance(checkpoint_round(folder), (int, type(None)))
        except CheckpointError as err:
            one_line(err)
        assert os.listdir(folder) == [CHECKPOINT] and path.read_bytes() == data  # no .tmp: reading writes nothing
