"""golden_writer.py -- the one writer of tests/golden/*.bin (format in README.md, read by
tests/golden.c): named float32 arrays in insertion order behind a 256-int32 header.
Imported by make_golden.py, make_loss.py, make_optim.py and make_scipy.py; needs numpy only
(torch tensors are accepted through their .detach())."""
import struct

import numpy as np

MAGIC = 0x47444450      # int32 0: the bytes "PDDG"
VERSION = 1             # int32 1: bump on any layout change (tests/golden.h GOLDEN_VERSION)
HEADER_INTS = 256
NAME_LEN = 64
MAX_DIMS = 6


class GoldenWriter:
    """Named float32 arrays, written in insertion order."""

    def __init__(self):
        self.arrays = {}

    def add(self, name, value):
        if hasattr(value, "detach"):  # a torch.Tensor
            value = value.detach().cpu().numpy()
        a = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        assert name not in self.arrays, name
        assert len(name.encode()) < NAME_LEN and a.ndim <= MAX_DIMS, name
        self.arrays[name] = a

    def save(self, path):
        with open(path, "wb") as f:
            header = [MAGIC, VERSION, len(self.arrays)] + [0] * (HEADER_INTS - 3)
            f.write(struct.pack("<%di" % HEADER_INTS, *header))
            for name, a in self.arrays.items():
                dims = list(a.shape) + [0] * (MAX_DIMS - a.ndim)
                f.write(name.encode().ljust(NAME_LEN, b"\0"))
                f.write(struct.pack("<7i", a.ndim, *dims))
                f.write(a.astype("<f4").tobytes())
        total = sum(a.size for a in self.arrays.values())
        print("wrote %s: %d arrays, %d floats" % (path, len(self.arrays), total))
