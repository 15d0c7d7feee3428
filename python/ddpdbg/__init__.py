"""ddpdbg's attach to PyTorch: traces every DistributedDataParallel of a process into the
rank's ddpdbg trace (traces/schema.sql), through libddpdbg_probe.so, the probe the C trainer uses.

Loaded by python/sitecustomize.py once torch is imported, when DDPDBG_TRACE_DIR is set (`ddpdbg
run` sets it, `ddpdbg env --trace DIR` prints it for other launchers). Only observes: the job
computes the same, raises the same errors, hangs the same way; a failing attach says so in one
line and stays out of the way. Stdlib, ctypes and torch only.
"""
__all__ = ["install"]


def install():
    """Patches torch (once) so that the process is traced; a no-op without DDPDBG_TRACE_DIR."""
    from ddpdbg import attach
    attach.install()
