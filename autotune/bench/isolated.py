"""A peer in a process of its own: built, checked and timed there, driven round by round from
the bench, so that one framework's runtime (its thread pools, allocator, JIT caches) shares no
process with another's or with our plans.

Why it is offered: in one process the bench holds our OpenMP pool, OpenBLAS's, XLA's Eigen
pool, torch's OpenMP and IREE's task system on the same cores.  On a 2-core AVX2 host, trimul
(N=702) benched with its peers in the same process gave the cached best plan bimodal rounds
(1.58-1.79 s and 2.16-2.46 s) and medians 0.82-1.16x the heuristic plan over three runs, where
the same two plans timed in a process that held no peer ran 0.81x and 0.84x.  Why it is not the
default: on a 2-core AVX-512 host, two benches each way, alternated (jax, inductor, iree):
best / heuristic 0.66x and 0.56x with the peers in processes of their own, 0.53x and 0.55x in
one process; XLA's medians 3.9 and 4.7 s against 4.3 and 3.3 s: no difference beyond the
run-to-run spread.  ``autotune bench --isolate-peers`` runs it this way.

The rounds stay interleaved and paced by the bench (:func:`autotune.bench.timing.time_rounds`):
each turn asks the peer's process for ``n`` calls after its warm-up and gets back the mean
seconds it timed there, so the pipe's round trip is outside the figure.  The peer's process
makes its own inputs from the workload and the bench's seed (the same arrays:
:meth:`Workload.random_inputs` is deterministic), and its outputs for the check come back
through a ``.npz`` file in a temporary folder.
"""
from __future__ import annotations

import multiprocessing as mp
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from search_spaces.workload import Workload

from autotune.bench.peers import PeerUnavailable
from autotune.bench.runners import PEER_BUILDERS, Context, Runner, first_line, seconds_per_call

BUILD_TIMEOUT_S = 900.0    # a peer's import and compile (torch.compile of a big block: minutes)


class PeerProcessError(RuntimeError):
    """A peer's process reported an error, or died, or did not answer in time."""


def _serve(name: str, w: Workload, seed: int, kind: str, cache_root: str, cc: str,
           conn) -> None:
    """The peer's process: build ``name`` on the workload's inputs for ``seed``, then answer
    ``("check", path)`` (one call, outputs saved to ``path``), ``("time", n, warm_s)`` (mean
    seconds of ``n`` calls after the warm-up) and ``("close",)``.  Every reply is ``("ok",
    value)`` or ``("error", one line)``; the first is ``("built", seconds, detail)``."""
    try:
        inputs = w.random_inputs(seed=seed)
        t0 = time.perf_counter()
        runner = PEER_BUILDERS[name](Context(w, inputs, kind, Path(cache_root), cc))
        conn.send(("built", time.perf_counter() - t0, dict(runner.detail)))
    except PeerUnavailable as e:
        conn.send(("unavailable", str(e)))
        return
    except BaseException as e:  # reported to the bench
        conn.send(("error", first_line(e)))
        return
    while True:
        try:
            msg = conn.recv()
        except EOFError:            # the bench is gone
            return
        if msg[0] == "close":
            return
        try:
            if msg[0] == "check":
                outs = runner.to_host(runner.call())
                np.savez(msg[1], **outs)
                conn.send(("ok", None))
            else:
                conn.send(("ok", seconds_per_call(runner.call, msg[1], msg[2])))
        except BaseException as e:
            conn.send(("error", first_line(e)))


class _Peer:
    """The bench's end of one peer's process."""

    def __init__(self, name: str, proc, conn, folder: str):
        self.name, self.proc, self.conn, self.folder = name, proc, conn, folder

    def reply(self, timeout_s: float | None = None):
        """The process's next message; a PeerProcessError where it died or did not answer."""
        try:
            if timeout_s is not None and not self.conn.poll(timeout_s):
                raise PeerProcessError(f"{self.name}: no answer from its process after "
                                       f"{timeout_s:g} s")
            msg = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            raise PeerProcessError(f"{self.name}: its process died (exit code "
                                   f"{self.proc.exitcode})") from None
        if msg[0] == "error":
            raise PeerProcessError(msg[1])
        return msg

    def ask(self, *msg):
        self.conn.send(msg)
        return self.reply()[1]

    def call(self) -> dict:
        path = str(Path(self.folder) / "outputs.npz")
        self.ask("check", path)
        with np.load(path) as z:
            return {k: z[k] for k in z.files}

    def timed(self, n: int, warm_s: float | None) -> float:
        return self.ask("time", n, warm_s)

    def close(self, wait_s: float = 10.0) -> None:
        """Ask the process to end, kill it after ``wait_s``, remove the folder."""
        try:
            if self.proc.is_alive():
                self.conn.send(("close",))
                self.proc.join(wait_s)
        except (OSError, BrokenPipeError):
            pass
        finally:
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(10)
            self.conn.close()
            shutil.rmtree(self.folder, ignore_errors=True)


def isolated_runner(name: str, ctx: Context, seed: int,
                    build_timeout_s: float = BUILD_TIMEOUT_S) -> Runner:
    """Peer ``name`` built in a spawned process of its own on ``ctx.w.random_inputs(seed)``;
    raises :class:`PeerUnavailable` where its framework is missing (as the in-process builders
    do) and :class:`PeerProcessError` where it fails to build."""
    if name not in PEER_BUILDERS:
        raise ValueError(f"unknown peer {name!r}")
    spawn = mp.get_context("spawn")
    parent, child = spawn.Pipe()
    proc = spawn.Process(target=_serve, name=f"autotune-peer-{name}", daemon=True,
                         args=(name, ctx.w, seed, ctx.kind, str(ctx.cache_root),
                               ctx.compute_capability, child))
    proc.start()
    child.close()
    peer = _Peer(name, proc, parent, tempfile.mkdtemp(prefix=f"autotune-peer-{name}-"))
    try:
        msg = peer.conn.poll(build_timeout_s) and peer.conn.recv()
        if not msg:
            raise PeerProcessError(f"{name}: not built after {build_timeout_s:g} s")
        if msg[0] == "unavailable":
            raise PeerUnavailable(msg[1])
        if msg[0] == "error":
            raise PeerProcessError(msg[1])
    except EOFError:
        peer.close(wait_s=0)
        proc.join(5)
        raise PeerProcessError(f"{name}: its process died while building (exit code "
                               f"{proc.exitcode})") from None
    except BaseException:
        peer.close(wait_s=0)        # it is not listening (hung, or it sent its last word)
        raise
    detail = {**msg[2], "process": "own", "build_in_process_s": msg[1]}
    return Runner(peer.call, lambda outs: outs, detail, timed=peer.timed, close=peer.close)
