"""A search algorithm in a process of its own, beside the experiment's trials.

A search such as Optuna's TPE spends about as much CPU per trial as a trivial trial's whole
run (its record, its files, the runner's bookkeeping). In the driver both share one GIL,
and each waits for the other; in a forked process of its own the search computes the next
config on the other core while the driver runs the trials.

The runner gives the process every call in the order it makes them; the process answers
them in that order, so the search sees exactly the sequence of calls it would see in the
driver. Suggestions and errors come back as events for the runner's loop (it does not wait
for them); the state comes back when the runner saves the experiment, and at the end it
becomes the searcher object's own again (what the user holds after ``fit()`` is the
searched study).

Forked, not spawned: the child starts with the searcher as it is (its study, a
define-by-run function, the user's modules) in about 2 ms, where a fresh interpreter would
take a second to import Optuna. Only a driver with no other thread forks (a lock another
thread holds would stay held in the child); otherwise the searcher stays in the driver.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import signal
import threading
import traceback
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection, Pipe
from typing import Any

from lockstep._core import flags, pickling
from lockstep.tune.search._searcher import Searcher, innermost


def runs_apart(searcher: Searcher) -> bool:
    """Whether ``searcher`` is worth a process of its own (its innermost search says so
    with ``runs_apart = True``), and this driver can fork one safely now."""
    return (
        bool(getattr(innermost(searcher), "runs_apart", False))
        and flags.SEARCH_PROCESS.get()
        and hasattr(os, "fork")
        and threading.active_count() == 1
    )


class SearchProcessError(RuntimeError):
    """The search's process ended without being asked to (killed, out of memory)."""


# What the runner hears, in the runner's loop: ("suggested", key, config) or ("failed",
# key, exception), with the key of the suggestion that failed, or None.
Reply = Callable[[str, Any, Any], None]


class SearchProcess:
    """``searcher`` in a forked child; calls go over a pipe, answers come back in order.

    ``on_reply`` is called from a reader thread with each suggestion, and with the error of
    any call the runner does not wait for.

    Example:
        >>> from lockstep import tune
        >>> from lockstep.tune.search.optuna import OptunaSearch
        >>> search = OptunaSearch(metric="loss", mode="min", seed=0)
        >>> _ = search.set_search_properties(None, None, {"x": tune.uniform(0, 1)})
        >>> replies = queue.SimpleQueue()
        >>> apart = SearchProcess(search, lambda *reply: replies.put(reply))
        >>> apart.suggest("t0")
        >>> kind, key, config = replies.get()
        >>> kind, key, 0 <= config["x"] <= 1
        ('suggested', 't0', True)
        >>> apart.send("on_trial_complete", "t0", {"loss": 0.5})
        >>> apart.close() is search, len(search.study.trials)
        (True, 1)
    """

    def __init__(self, searcher: Searcher, on_reply: Reply) -> None:
        self.searcher = searcher
        self._on_reply = on_reply
        self._finished = searcher.is_finished()
        # (which request it answers, whether it succeeded, the answer or the error)
        self._answers: queue.SimpleQueue[tuple[str | None, bool, Any]] = queue.SimpleQueue()
        ours, theirs = Pipe()
        # Held until the child ignores them (a Ctrl-C right now is the driver's alone)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _DRIVERS_SIGNALS)
        try:
            with warnings.catch_warnings():
                # Python 3.12 warns of any thread, counting native pools (OpenBLAS's),
                # which handle a fork themselves; runs_apart() checks for Python threads.
                warnings.simplefilter("ignore", DeprecationWarning)
                self.pid = os.fork()
            if self.pid == 0:  # the child
                ours.close()
                _serve(searcher, theirs, held)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        theirs.close()
        self._conn = ours
        self._lock = threading.Lock()  # one writer at a time (the runner's thread, close)
        self._closed = False
        self.lost = False  # the child died: the searcher here knows nothing it learned
        self._exit: int | None = None
        self._reaping = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="lockstep-search", daemon=True)
        self._reader.start()

    # -- calls ------------------------------------------------------------------------------

    def suggest(self, key: str) -> None:
        """Ask for a config for ``key``; it comes back through ``on_reply``."""
        self._send(("suggest", (key,)))

    def send(self, method: str, *args: Any) -> None:
        """Call ``searcher.method(*args)`` in the child without waiting."""
        self._send(("call", (method, *args)))

    def is_finished(self) -> bool:
        """What ``is_finished()`` answered after the last call the child has answered."""
        return self._finished

    def state(self) -> bytes:
        """The searcher pickled, once the child has made every call sent before."""
        self._send(("state", ()))
        return self._answer("state")  # type: ignore[no-any-return]

    def close(self, *, wait: bool = True) -> Searcher:
        """End the child; the searcher object given becomes the child's (its final state)
        and is returned. A child that died leaves the searcher as it was in the driver.
        Without ``wait``, :meth:`wait` is left to call: the child takes a few milliseconds
        to exit, which the caller can spend on other work."""
        if self._closed:
            return self.searcher
        try:
            self._send(("close", ()))
            final = pickle.loads(self._answer("close"))
        except SearchProcessError:
            final = None
            self.lost = True
        finally:
            self._closed = True
            self._reader.join()
            self._conn.close()
            if wait:
                self.wait()
        if final is not None:
            _adopt(self.searcher, final)
        return self.searcher

    def wait(self) -> None:
        """Wait for the closed child to exit."""
        self._reap()

    # -- the driver's side ------------------------------------------------------------------

    def _send(self, request: tuple[str, tuple[Any, ...]]) -> None:
        try:
            data = pickling.dumps_plain(request, "a call to the search algorithm")
        except Exception:
            # A result may hold what does not pickle (a file, a generator): the search
            # gets its text, as result.json does, where it would have got the object.
            kind, args = request
            data = pickling.dumps_plain((kind, tuple(_portable_arg(a) for a in args)), "a call")
        with self._lock:
            try:
                self._conn.send_bytes(data)
            except OSError as exc:
                raise self._died() from exc

    def _answer(self, request: str) -> Any:
        """The answer to the last ``request`` (an earlier one, left by a Ctrl-C while it
        was awaited, is passed over)."""
        while True:
            key, ok, value = self._answers.get()
            if key is None or key == request:
                break
        if not ok:
            raise value
        return value

    def _read(self) -> None:
        """The reader thread: each answer, in order, to whoever waits for it."""
        while True:
            try:
                kind, key, value, finished = pickle.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                if not self._closed:
                    error = self._died()
                    self._answers.put((None, False, error))
                    self._on_reply("failed", None, error)
                return
            self._finished = finished
            if kind == "done":
                continue
            if kind == "suggested":
                self._on_reply("suggested", key, value)
            elif kind == "answer":
                self._answers.put((key, True, value))
                if key == "close":
                    return
            elif key in ("state", "close"):  # an error the caller waits for
                self._answers.put((key, False, value))
            else:  # the error of a suggestion (its key) or of a call (None)
                self._on_reply("failed", key, value)

    def _died(self) -> SearchProcessError:
        self._reap()
        how = (
            f"was killed by signal {-self._exit}"
            if self._exit is not None and self._exit < 0
            else f"exited with code {self._exit}"
        )
        return SearchProcessError(
            f"the search algorithm's process (pid {self.pid}) {how} during the experiment. "
            f"HINT: the experiment is restorable (Tuner.restore); set "
            f"{flags.SEARCH_PROCESS.name}=0 to keep the search in the driver"
        )

    def _reap(self) -> None:
        with self._reaping:  # the reader and the runner's thread may both find it dead
            if self._exit is None:
                with contextlib.suppress(ChildProcessError):
                    _, status = os.waitpid(self.pid, 0)
                    self._exit = os.waitstatus_to_exitcode(status)


# -- the child -------------------------------------------------------------------------------

_MAX_FD = 1 << 20
_DRIVERS_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _serve(searcher: Searcher, conn: Connection, held: set[int | signal.Signals]) -> None:
    """The child: make each call in order, answer it, until told to close or the driver's
    end of the pipe closes (the driver died); never return into the driver's code."""
    try:
        # Ctrl-C and a scheduler's SIGTERM are the driver's to handle: the process ends
        # when the driver's end of the pipe closes, after the state the driver asks for.
        for signum in _DRIVERS_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        # Only the pipe and the standard streams: a copy of the driver's other files
        # (a worker's pipe, a socket) would keep them open after the driver closed them.
        os.closerange(3, conn.fileno())
        os.closerange(conn.fileno() + 1, _MAX_FD)
        gc.freeze()  # the driver's objects stay shared pages: the collector never walks them
        finished = _safe_finished(searcher)
        while True:
            try:
                kind, args = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                break
            finished, done = _answer(searcher, conn, kind, args, finished)
            if done:
                break
    finally:
        os._exit(0)


def _answer(
    searcher: Searcher, conn: Connection, kind: str, args: tuple[Any, ...], finished: bool
) -> tuple[bool, bool]:
    """Make one call and answer it; a call nobody waits for is answered only by an error
    or a change of ``is_finished()``. Returns that and whether to end."""
    # what the answer is for: the trial's key, the request waited for, or nobody's
    key: Any = args[0] if kind == "suggest" else None if kind == "call" else kind
    try:
        if kind == "suggest":
            # As the runner would check before asking: a search finished by the calls
            # queued ahead of this one suggests nothing more.
            reply: Any = Searcher.FINISHED if searcher.is_finished() else searcher.suggest(key)
            out = ("suggested", key, reply)
        elif kind == "call":
            getattr(searcher, args[0])(*args[1:])
            out = ("done", key, None)
        else:  # state, close
            out = ("answer", kind, pickling.dumps_plain(searcher, "the search algorithm"))
    except BaseException as exc:  # every error goes back to the driver
        out = ("error", key, _portable(exc))
    was, finished = finished, _safe_finished(searcher)
    if out[0] != "done" or finished != was:
        conn.send_bytes(pickling.dumps_plain((*out, finished), "the search's answer"))
    return finished, kind == "close"


def _safe_finished(searcher: Searcher) -> bool:
    try:
        return bool(searcher.is_finished())
    except Exception:  # the next call reports the error
        return False


def _portable(exc: BaseException) -> BaseException:
    """``exc`` with the child's traceback as a note, as something that pickles."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickling.dumps_plain(exc, "an error"))
    except Exception:  # an exception that does not pickle goes as text
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.add_note(f"raised in the search algorithm's process:\n{text}")
    return exc


def _portable_arg(value: Any) -> Any:
    """``value`` with what does not pickle in it (a dict's values) as its text."""
    if isinstance(value, dict):
        return {k: _portable_arg(v) for k, v in value.items()}
    try:
        pickle.dumps(value)
    except Exception:  # what fails to pickle is replaced, not its reason
        return repr(value)
    return value


def _adopt(searcher: Any, final: Any) -> None:
    """Give ``searcher`` the state of ``final`` (the same searcher after the experiment),
    wrapped searchers too, so that objects the user holds see the search's results."""
    inner = getattr(searcher, "searcher", None)
    final_inner = getattr(final, "searcher", None)
    state = dict(final.__dict__)
    if inner is not None and final_inner is not None and type(inner) is type(final_inner):
        _adopt(inner, final_inner)
        state["searcher"] = inner
    searcher.__dict__.update(state)
