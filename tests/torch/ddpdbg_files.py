"""ddpdbg_files.py -- readers for two of our binary formats, for PyTorch code (stdlib + torch):

- read_checkpoint(path): our training checkpoint (trainer/checkpoint.h: "DDPDBGCK", version,
  byte-order mark, then tagged sections HEADER, LAYOUT, MODEL, [OPTIM], [EMA], RNG, END).
  Returns the model name, nc and a state dict {name: tensor} of every parameter and buffer in
  LAYOUT order (BatchNorm's num_batches_tracked as int64), which load_state_dict takes
  (rtdetr_torch's modules carry our names). OPTIM and EMA are skipped. The END checksum is not
  recomputed (the C reader verifies it; a 64-bit FNV over every word is too slow in Python);
  every section's length is checked against what it holds.
- write_checkpoint(path, model_name, nc, model): the same format with HEADER (progress zero),
  LAYOUT, MODEL, an empty RNG and END with its checksum: what `ddpdbg-train dump weights=`
  and `train resume=` read, for weights made in PyTorch. No OPTIM or EMA section.
- read_arrays(path): named float32 arrays in tests/golden/README.md's format (what
  `ddpdbg-train dump` writes): {name: tensor}, in file order.

Every problem is a ValueError naming the file and what was expected.
"""
import struct

import torch

CHECKPOINT_MAGIC = b"DDPDBGCK"
CHECKPOINT_VERSION = 1
BYTE_ORDER_MARK = 0x01020304
ARRAYS_MAGIC = 0x47444450  # "PDDG"
ARRAYS_VERSION = 1


class _Reader:
    """Little-endian fields from a bytes object, failing with the file's name."""

    def __init__(self, data, path, what):
        self.data, self.path, self.what, self.at = data, path, what, 0

    def take(self, n):
        if self.at + n > len(self.data):
            raise ValueError("%s: %s ends %d bytes early (truncated or corrupt)"
                             % (self.path, self.what, self.at + n - len(self.data)))
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def unpack(self, fmt):
        values = struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))
        return values if len(values) > 1 else values[0]

    def string(self):
        return self.take(self.unpack("I")).decode()

    def shape(self):
        return [self.unpack("q") for _ in range(self.unpack("I"))]

    def floats(self, shape):
        n = 1
        for d in shape:
            n *= d
        raw = bytearray(self.take(4 * n))  # writable: frombuffer warns on read-only memory
        return torch.frombuffer(raw, dtype=torch.float32).reshape(shape) if n else torch.zeros(shape)


def _sections(data, path):
    """{tag: payload bytes} of a checkpoint, checking magic, version and byte order."""
    r = _Reader(data, path, "the checkpoint")
    if r.take(8) != CHECKPOINT_MAGIC:
        raise ValueError("%s: not a ddpdbg checkpoint (no DDPDBGCK magic)" % path)
    version, mark = r.unpack("II")
    if version != CHECKPOINT_VERSION or mark != BYTE_ORDER_MARK:
        raise ValueError("%s: checkpoint version %d, byte-order mark %#x: expected version %d, %#x"
                         % (path, version, mark, CHECKPOINT_VERSION, BYTE_ORDER_MARK))
    sections = {}
    while True:
        tag = r.take(8).rstrip(b"\0").decode()
        payload = r.take(r.unpack("Q"))
        sections[tag] = payload
        if tag == "END":
            break
    if r.at != len(data):
        raise ValueError("%s: %d bytes after the END section" % (path, len(data) - r.at))
    for tag in ("HEADER", "LAYOUT", "MODEL"):
        if tag not in sections:
            raise ValueError("%s: no %s section" % (path, tag))
    return sections


def read_checkpoint(path):
    """(model_name, nc, state_dict) of one of our checkpoints (see the module comment)."""
    with open(path, "rb") as f:
        sections = _sections(f.read(), path)
    header = _Reader(sections["HEADER"], path, "section HEADER")
    model_name, nc = header.string(), header.unpack("q")

    layout = _Reader(sections["LAYOUT"], path, "section LAYOUT")
    params = [(layout.string(), layout.shape()) for _ in range(layout.unpack("I"))]
    buffers = []
    for _ in range(layout.unpack("I")):
        name, counter = layout.string(), layout.unpack("B")
        buffers.append((name, None if counter else layout.shape()))
        if counter:
            layout.shape()  # a counter's shape is written as 0-d
    model = _Reader(sections["MODEL"], path, "section MODEL")
    state = {name: model.floats(shape) for name, shape in params}
    for name, shape in buffers:
        state[name] = torch.tensor(model.unpack("q")) if shape is None else model.floats(shape)
    for reader in (layout, model):
        if reader.at != len(reader.data):
            raise ValueError("%s: %s has %d bytes more than its contents"
                             % (path, reader.what, len(reader.data) - reader.at))
    return model_name, nc, state


def _fnv_words(data):
    """checkpoint.c's checksum: FNV-1a 64 over the 8-byte little-endian words of data, each
    byte of a last partial word as a word of its own, then the byte count."""
    h, prime, mask = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1
    whole = len(data) // 8 * 8
    for w in struct.unpack("<%dQ" % (whole // 8), data[:whole]):
        h = ((h ^ w) * prime) & mask
    for b in data[whole:]:
        h = ((h ^ b) * prime) & mask
    return ((h ^ len(data)) * prime) & mask


def write_checkpoint(path, model_name, nc, model):
    """Writes model's parameters then buffers (named_parameters, named_buffers order: ours,
    for rtdetr_torch modules) as one of our checkpoints."""
    def text(s):
        return struct.pack("<I", len(s.encode())) + s.encode()

    def shape(t):
        return struct.pack("<I%dq" % t.dim(), t.dim(), *t.shape)

    params, buffers = list(model.named_parameters()), list(model.named_buffers())
    header = text(model_name) + struct.pack("<qqqqqqd", nc, 0, 0, 0, 0, 0, 0.0)
    layout = struct.pack("<I", len(params)) + b"".join(text(n) + shape(p) for n, p in params)
    layout += struct.pack("<I", len(buffers))
    values = b"".join(p.detach().cpu().float().contiguous().numpy().tobytes() for _, p in params)
    for name, b in buffers:
        counter = not b.is_floating_point()
        layout += text(name) + struct.pack("<B", counter) + (struct.pack("<I", 0) if counter else shape(b))
        values += struct.pack("<q", int(b)) if counter else b.detach().cpu().float().contiguous().numpy().tobytes()
    data = CHECKPOINT_MAGIC + struct.pack("<II", CHECKPOINT_VERSION, BYTE_ORDER_MARK)
    for tag, payload in (("HEADER", header), ("LAYOUT", layout), ("MODEL", values),
                         ("RNG", struct.pack("<I", 0))):
        data += tag.encode().ljust(8, b"\0") + struct.pack("<Q", len(payload)) + payload
    data += b"END".ljust(8, b"\0") + struct.pack("<Q", 8)
    with open(path, "wb") as f:
        f.write(data + struct.pack("<Q", _fnv_words(data)))


def read_arrays(path):
    """{name: float32 tensor} of a tests/golden-format file, in file order."""
    with open(path, "rb") as f:
        r = _Reader(f.read(), path, "the array file")
    header = r.unpack("256i")
    if header[0] != ARRAYS_MAGIC or header[1] != ARRAYS_VERSION:
        raise ValueError("%s: not an array file of version %d (magic %#x, version %d)"
                         % (path, ARRAYS_VERSION, header[0], header[1]))
    arrays = {}
    for _ in range(header[2]):
        name = r.take(64).rstrip(b"\0").decode()
        dims = r.unpack("7i")
        arrays[name] = r.floats(list(dims[1:1 + dims[0]]))
    if r.at != len(r.data):
        raise ValueError("%s: %d bytes after the last of %d arrays"
                         % (path, len(r.data) - r.at, header[2]))
    return arrays
