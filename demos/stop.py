"""Stop for the demo's training runs: one object owns which run each session has going, the Stop requests, the
final status of ended runs and the Stop follow-ups waiting for them.

Stop is cooperative: the button flags its session's running generator, which ends at its next chunk with a
"stopped" status. (Cancelling the event instead, Gradio's `cancels=`, marks the run's outputs with an
"Error" badge when it interrupts a stream mid-way.) A chunk is one compiled call and cannot be interrupted,
so Stop first says "stopping", and a follow-up event waits for that run to end (:meth:`StopBoard.wait_final`)
and writes the status it ended with: the last word is always the run's own, whichever of the two messages the
browser receives first. A run still waiting in the queue is not running yet, so Stop does not reach it.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading


class StopBoard:
    """The runs of every session and their Stop requests, behind one lock.

    ``latest_keep``: sessions whose latest run id is remembered (the oldest are dropped past it: a dropped
    session's late Stop follow-up then writes its run's own final status, which is what it would write anyway);
    ``final_keep``: ended runs whose final status is kept for a late follow-up."""

    def __init__(self, latest_keep: int = 4096, final_keep: int = 256):
        self.latest_keep, self.final_keep = latest_keep, final_keep
        self.running: dict[str, int] = {}  # session -> its running run
        self.latest: "collections.OrderedDict[str, int]" = collections.OrderedDict()  # session -> latest run
        self.stop_requests: set[str] = set()
        self.final: "collections.OrderedDict[int, str]" = collections.OrderedDict()  # run -> last status
        self.waiters: dict[int, list] = collections.defaultdict(list)  # run -> [(event loop, future)]
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def begin(self, session: str) -> int:
        """A new run of ``session``: its id (ids grow); an earlier Stop request of the session is forgotten."""
        run_id = next(self._ids)
        with self._lock:
            self.running[session] = self.latest[session] = run_id
            self.latest.move_to_end(session)
            while len(self.latest) > self.latest_keep:
                self.latest.popitem(last=False)
            self.stop_requests.discard(session)
        return run_id

    def request(self, session: str) -> int | None:
        """Flag ``session``'s running run to stop; its id, or None when it has none running."""
        with self._lock:
            if session in self.running:
                self.stop_requests.add(session)
                return self.running[session]
            return None

    def take(self, session: str) -> bool:
        """True (once) if Stop was pressed for ``session``'s running run."""
        with self._lock:
            asked = session in self.stop_requests
            self.stop_requests.discard(session)
            return asked

    def end(self, session: str, run_id: int, final: str) -> None:
        """Run ``run_id`` of ``session`` ended with status ``final``: wake its Stop follow-ups at once (they run
        on the server's event loop)."""
        with self._lock:
            if self.running.get(session) == run_id:
                del self.running[session]
                self.stop_requests.discard(session)
            self.final[run_id] = final
            while len(self.final) > self.final_keep:
                self.final.popitem(last=False)
            waiters = self.waiters.pop(run_id, [])
        for loop, future in waiters:
            loop.call_soon_threadsafe(lambda f=future: f.done() or f.set_result(final))

    async def wait_final(self, run_id: int, timeout: float):
        """The final status of run ``run_id`` once it has ended; None after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            final = self.final.get(run_id)
            if final is None:
                self.waiters[run_id].append((loop, future))
        if final is not None:
            return final
        try:
            return await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            with self._lock:
                if (loop, future) in self.waiters.get(run_id, []):
                    self.waiters[run_id].remove((loop, future))
            return None

    def is_latest(self, session: str, run_id: int) -> bool:
        """Whether ``run_id`` is still ``session``'s latest run (a forgotten session: yes)."""
        with self._lock:
            return self.latest.get(session, run_id) == run_id
