"""nccl_poller.py -- COLL_DONE for NCCL collectives. On NCCL a collective's future completes when
the work is enqueued on its CUDA stream, not when it finished; Work.is_completed() asks the
work's CUDA events without blocking. One daemon thread polls the pending works, oldest first,
every POLL_S, and records each once it completed (flag ok unless Work.exception() or
is_success() says it failed). It never waits on a work and never touches its stream, so the
job's synchronisation is what it was.
"""
import threading
import time

POLL_S = 0.0005


class NcclPoller:
    def __init__(self, S):
        self.S = S
        self.pending = []  # [work, it, seq, op, bucket, numel, what]
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self.run, name="ddpdbg-nccl-poller", daemon=True)
        self.thread.start()

    def add(self, work, it, seq, op, bucket, numel, what):
        with self.lock:
            self.pending.append((work, it, seq, op, bucket, numel, what))
        self.wake.set()

    def stop(self):
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=1.0)

    def run(self):
        while not self.stopping:
            with self.lock:
                pending = list(self.pending)
            if not pending:
                self.wake.wait(0.1)
                self.wake.clear()
                continue
            finished = []
            for entry in pending:
                work = entry[0]
                try:
                    if not work.is_completed():
                        continue
                    exc = failure(work)
                except Exception as e:  # the work itself raised when asked: it failed
                    exc = e
                finished.append(entry)
                try:
                    self.S.done(*entry[1:], exc=exc)
                except Exception as e:
                    self.S.fail("the NCCL poller", e)
            if finished:
                with self.lock:
                    self.pending = [e for e in self.pending if e not in finished]
            time.sleep(POLL_S)


def failure(work):
    """The exception of a completed work that failed, else None (Work.exception: 1.13+;
    is_success: deprecated in 2.x, so only as a fallback)."""
    if hasattr(work, "exception"):
        try:
            return work.exception()
        except Exception as e:
            return e
    if hasattr(work, "is_success") and not work.is_success():
        return RuntimeError("the collective failed")
    return None
