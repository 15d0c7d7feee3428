"""sitecustomize.py -- what `ddpdbg run` puts first on PYTHONPATH for the ranks of a Python job.

It imports nothing heavy: it waits for torch. A meta-path finder notices the import of the
top-level `torch` package and, once torch's own module has run, installs ddpdbg's attach
(python/ddpdbg/attach.py). Only one sitecustomize module is imported per interpreter, so the one
this file shadows (Debian ships /usr/lib/python3.X/sitecustomize.py) is found further along
sys.path and run too. Without DDPDBG_TRACE_DIR this does nothing but chain.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_shadowed():
    """Runs the next sitecustomize on sys.path after this file's folder, if there is one."""
    for entry in sys.path:
        try:
            if os.path.abspath(entry or ".") == _HERE:
                continue
        except Exception:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.origin is None or not os.path.isfile(spec.origin):
            continue
        if os.path.abspath(spec.origin) == os.path.abspath(__file__):
            continue
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception as e:  # the shadowed file's own failure: Python would print it too
            sys.stderr.write("ddpdbg: the shadowed sitecustomize %s failed: %r\n" % (spec.origin, e))
        return


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of `torch` so that ddpdbg attaches right after
    torch's module has executed (torch.nn and torch.distributed are imported by then)."""

    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once, and the real finders answer for torch
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_attach(module):
            exec_module(module)
            try:
                sys.path.insert(0, _HERE) if _HERE not in sys.path else None
                import ddpdbg
                ddpdbg.install()
            except Exception as e:
                sys.stderr.write("ddpdbg: the attach failed to install (%r); this rank is not "
                                 "traced, training continues\n" % (e,))

        spec.loader.exec_module = exec_then_attach
        return spec


if os.environ.get("DDPDBG_TRACE_DIR"):
    if "torch" in sys.modules:  # imported before us (unusual): attach now
        import ddpdbg
        ddpdbg.install()
    else:
        sys.meta_path.insert(0, _TorchWatcher())
_chain_shadowed()
