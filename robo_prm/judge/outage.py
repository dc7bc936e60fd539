"""One warning per outage of a judge backend.

An outage starts at the first failed backend call after a good one (or at the start) and ends
at the next good call. Its first failure logs one WARNING naming the backend, where it is (URL
or model file) and the reason; later failures of the same outage are counted silently (DEBUG);
the recovery logs one INFO with the count. `ConfidentJudge.stats()` reports the totals, and
`close()` logs an outage still open at the end.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class OutageLog:
    def __init__(self, name: str, where: str | None = None):
        self.label = f"{name} ({where})" if where else name
        self.outages = 0  # outages begun
        self.failures = 0  # failed backend calls, all outages
        self.current = 0  # failed calls of the outage in progress (0: healthy)
        self._since = 0.0

    def failed(self, exc: BaseException, scenes: int) -> None:
        self.failures += 1
        self.current += 1
        reason = f"{type(exc).__name__}: {exc}"
        if self.current == 1:
            self.outages += 1
            self._since = time.monotonic()
            log.warning("judge backend %s failed (%s); the rules judge answers until it recovers "
                        "(%d scene(s) now; further failures of this outage are only counted)", self.label, reason, scenes)
        else:
            log.debug("judge backend %s still failing (%d failed calls): %s", self.label, self.current, reason)

    def ok(self) -> None:
        if self.current:
            log.info("judge backend %s recovered after %d failed call(s) in %.1f s",
                     self.label, self.current, time.monotonic() - self._since)
            self.current = 0

    def close(self) -> None:
        if self.current:
            log.info("judge backend %s was still failing at close: %d failed call(s) in %.1f s "
                     "(%d outage(s), %d failed calls in all)", self.label, self.current,
                     time.monotonic() - self._since, self.outages, self.failures)
