"""probe.py -- the ctypes binding of libddpdbg_probe.so (probe/abi.h, ABI version 1).

Events without text are buffered here (8 int64 words each, abi.h's DDPDBG_EVENT_WORDS) and
handed over in one ddpdbg_emit_many call per bucket, per phase, per 64 events, or once the
oldest buffered event is FLUSH_NS old: a ctypes call costs microseconds, an event in C tens of
nanoseconds, and a rank that dies (SIGKILL) loses only what it buffered in its last millisecond
(the ring, which the launcher drains, holds the rest). Anything that emits text flushes the
buffer first, so the ring's order is the order events were made in. A probe that fails says so
once and turns into a no-op; it never raises into the caller.
"""
import ctypes
import os
import sys
import threading
import time
from array import array

ABI_VERSION = 1
EVENT_WORDS = 8
FLUSH_EVENTS = 64  # events buffered at most between two foreign calls
FLUSH_NS = 1000000  # ... and for at most this long

# probe.h's enum values (fixed forever; traces/schema.sql table kinds).
META, PARAM, LAYOUT = 1, 2, 3
FORWARD_BEGIN, FORWARD_END, BACKWARD_BEGIN, BACKWARD_END = 4, 5, 6, 7
GRAD_READY, MARK_READY, BUCKET_READY = 8, 9, 10
COLL_LAUNCH, COLL_DONE, FINALIZE, OPTIM_STEP = 11, 12, 13, 14
BATCH, ERROR, HEARTBEAT, HANG = 15, 16, 17, 18
OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, OP_BARRIER = 1, 2, 3, 4
PHASE_IDLE, PHASE_STARTUP, PHASE_DATA, PHASE_FORWARD, PHASE_BACKWARD = 0, 1, 2, 3, 4
PHASE_COLLECTIVE, PHASE_OPTIM, PHASE_VALIDATE, PHASE_CHECKPOINT, PHASE_DONE = 5, 6, 7, 8, 9
FLAG_OK, FLAG_MARKED = 1, 2


def say(text):
    """One line on stderr, prefixed; never raises."""
    try:
        sys.stderr.write("ddpdbg: %s\n" % text)
        sys.stderr.flush()
    except Exception:
        pass


def _load(path):
    lib = ctypes.CDLL(path)
    lib.ddpdbg_abi_version.restype = ctypes.c_int
    version = lib.ddpdbg_abi_version()
    if version != ABI_VERSION:
        raise OSError("%s speaks probe ABI %d, this package %d" % (path, version, ABI_VERSION))
    P, I, I64, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_char_p
    sigs = {
        "ddpdbg_open": (P, [S, I, I, I]),
        "ddpdbg_close": (None, [P]),
        "ddpdbg_meta": (None, [P, S, S]),
        "ddpdbg_params": (None, [P, I, I, P, P, P, P]),
        "ddpdbg_layout": (None, [P, I64, I, I, P, P, P]),
        "ddpdbg_emit_many": (None, [P, I, P]),
        "ddpdbg_emit_text": (None, [P, I, I, I64, ctypes.c_int32, ctypes.c_int32, I64, I64, S, I64]),
        "ddpdbg_phase": (None, [P, I, I, I64]),
        "ddpdbg_on": (I, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def _ptr(arr):
    return arr.buffer_info()[0] if len(arr) else None


class Probe:
    """One rank's probe: open() or None. Methods are safe from any thread (one lock)."""

    def __init__(self, lib, handle, rank):
        self.lib, self.handle, self.rank = lib, handle, rank
        self.lock = threading.Lock()
        self.buf = array("q")
        self.first_t = 0  # t_ns of the oldest buffered event
        self.pid = os.getpid()

    @staticmethod
    def open(lib_path, trace_dir, rank):
        try:
            lib = _load(lib_path)
        except OSError as e:
            say("cannot load the probe library %s: %s; this rank is not traced" % (lib_path, e))
            return None
        # The writer commits once a second, with the heartbeat (as trainer/trace.c: commits cost
        # the ranks CPU; the watchdog reads the ring, not the database).
        handle = lib.ddpdbg_open(os.fsencode(trace_dir), rank, 1000, 1000)
        if not handle:
            return None  # probe_open warned once
        return Probe(lib, handle, rank)

    def alive(self):
        return self.handle is not None and os.getpid() == self.pid

    # ---- buffered events -------------------------------------------------------------------
    def event(self, kind, it, a=0, b=0, c=0, d=0, flags=0, t_ns=0):
        """Buffers one event without text; t_ns 0: now."""
        t = t_ns or time.time_ns()
        with self.lock:
            if not self.buf:
                self.first_t = t
            self.buf.extend((t, kind, flags, it, a, b, c, d))
            if len(self.buf) >= FLUSH_EVENTS * EVENT_WORDS or t - self.first_t >= FLUSH_NS:
                self._flush_locked()

    def flush(self):
        with self.lock:
            self._flush_locked()

    def _flush_locked(self):
        buf = self.buf
        if not buf or self.handle is None:
            return
        self.buf = array("q")
        self.lib.ddpdbg_emit_many(self.handle, len(buf) // EVENT_WORDS, _ptr(buf))

    # ---- direct calls (flush first: the ring keeps the order things happened in) -----------
    def text(self, kind, it, text, a=0, b=0, c=0, d=0, flags=0):
        data = text.encode("utf-8", "replace")
        with self.lock:
            self._flush_locked()
            if self.handle is not None:
                self.lib.ddpdbg_emit_text(self.handle, kind, flags, it, a, b, c, d, data, len(data))

    def meta(self, key, value):
        with self.lock:
            self._flush_locked()
            if self.handle is not None:
                self.lib.ddpdbg_meta(self.handle, key.encode(), str(value).encode("utf-8", "replace"))

    def phase(self, phase, it, kind=0):
        with self.lock:
            self._flush_locked()
            if self.handle is not None:
                self.lib.ddpdbg_phase(self.handle, kind, phase, it)

    def params(self, names, shapes):
        """PARAM records for parameters 0..n-1: names[i], shapes[i] (a tuple of ints)."""
        n = len(names)
        enc = [s.encode("utf-8", "replace") for s in names]
        c_names = (ctypes.c_char_p * max(n, 1))(*enc)
        ndims = array("i", [len(s) for s in shapes])
        flat = array("q", [d for s in shapes for d in s])
        numels = array("q")
        for s in shapes:
            k = 1
            for d in s:
                k *= d
            numels.append(k)
        with self.lock:
            self._flush_locked()
            if self.handle is not None and n:
                self.lib.ddpdbg_params(self.handle, 0, n, ctypes.cast(c_names, ctypes.c_void_p),
                                       _ptr(ndims), _ptr(flat), _ptr(numels))

    def layout(self, it, generation, buckets, params, offsets):
        b, p, o = array("i", buckets), array("i", params), array("q", offsets)
        with self.lock:
            self._flush_locked()
            if self.handle is not None and len(b):
                self.lib.ddpdbg_layout(self.handle, it, generation, len(b), _ptr(b), _ptr(p), _ptr(o))

    def close(self):
        with self.lock:
            if self.handle is None:
                return
            if os.getpid() != self.pid:  # a forked child: the parent's probe is not ours
                self.handle = None
                return
            self._flush_locked()
            self.lib.ddpdbg_phase(self.handle, 0, PHASE_DONE, -1)
            self.lib.ddpdbg_close(self.handle)
            self.handle = None

    def forget(self):
        """In a forked child (a DataLoader worker): drop the parent's probe without touching it."""
        self.handle = None
        self.buf = array("q")
