"""The operator's side of the ledger (``kuzk.contract.ledger``): folding deleted objects into its
ConfigMap, and the queue that does it off the event loop.

A fold is a read-modify-write of one ConfigMap with its resourceVersion as precondition, so
two operator replicas (or two folds) never lose each other's counts; a fold of a UID the
ledger already holds changes nothing, so repeating one after a crash or a 409 is safe. The
ConfigMap is created on the first fold.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract import api, ledger
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.ledger import Ledger, Tally
from kuzk.contract.retry import Backoff

log = logging.getLogger("kuzk.contract.ledger")
# A fold reads the ledger again and folds again at once on a 409 (or a 404), up to 5 times.
FOLD_CONFLICT_TRIES = 5
# A batch of folds that failed is tried again after 1 s, doubling to 30 s, until it lands.
FOLD_BACKOFF = Backoff(base=1.0, cap=30.0)


class LedgerConflict(Exception):
    """The ledger kept changing under the fold; fold again."""


class LedgerStore:
    """Folds into the ConfigMap ``namespace/name``. ``live()`` gives the UIDs of the objects
    that still exist (a folded one's UID is kept in the ledger while it does)."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str,
                 live: Callable[[], Collection[str]], clock: Clock = SYSTEM) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.name = namespace, name
        self.live = live
        self.clock = clock
        # The ledger as last read or written, with its resourceVersion: a fold starts from it
        # and reads again only when a 409 says it is stale.
        self._known: tuple[Ledger, str | None] | None = None

    def folded(self, uid: str) -> bool:
        """Whether this store has seen ``uid`` folded (False when it does not know)."""
        return self._known is not None and uid in self._known[0].folded

    def fold(self, entries: Sequence[tuple[str, Tally]], now: datetime | None = None) -> int:
        """Fold each (UID, tally) once; returns how many were new. Blocking; raises the API
        error (or ``ValueError`` for a ConfigMap that holds no ledger) for the caller to
        retry."""
        moment = now or self.clock.now()
        for _ in range(FOLD_CONFLICT_TRIES):
            current, version = self._known or self._read()
            current = copy.deepcopy(current)  # _known stays as read until written
            added = sum(current.fold(uid, tally, moment) for uid, tally in entries)
            if not added:
                self._known = (current, version)
                return 0
            current.prune(moment, self.live)
            try:
                self._known = (current, self._write(current, version))
            except ApiException as e:
                if e.status not in (404, 409):
                    raise
                self._known = None  # stale (409), or deleted since it was read (404)
                continue
            return added
        msg = f"the ledger {self.namespace}/{self.name} kept changing"
        raise LedgerConflict(msg)

    def _read(self) -> tuple[Ledger, str | None]:
        try:
            cm = self.core.read_namespaced_config_map(self.name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return Ledger(), None
            raise
        try:
            return ledger.parse({"data": cm.data}), _version(cm)
        except ValueError as e:
            msg = f"ConfigMap {self.namespace}/{self.name}: {e}"
            raise ValueError(msg) from None

    def _write(self, current: Ledger, version: str | None) -> str | None:
        body = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace,
                                         labels={api.LABEL_MANAGED_BY: api.MANAGER},
                                         resource_version=version),
            data=current.data())
        if version is None:
            return _version(self.core.create_namespaced_config_map(self.namespace, body))
        return _version(self.core.replace_namespaced_config_map(self.name, self.namespace, body))


def _version(configmap: client.V1ConfigMap) -> str | None:
    return configmap.metadata.resource_version if configmap.metadata else None


@dataclass
class FoldQueue:
    """Folds waiting to be written, written in batches by one task on the event loop, each
    retried with backoff until it lands: a deleted object's counts are kept while the
    operator runs, through API outages."""

    store: LedgerStore
    pending: dict[str, Tally] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def add(self, uid: str, tally: Tally) -> None:
        if tally.empty or self.store.folded(uid):
            return
        self.pending[uid] = tally
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="ledger")

    async def _drain(self) -> None:
        failures = 0
        while self.pending:
            batch = list(self.pending.items())
            try:
                await asyncio.to_thread(self.store.fold, batch)
            except (ApiException, HTTPError, OSError, ValueError, LedgerConflict) as e:
                failures += 1
                delay = FOLD_BACKOFF.delay(failures)
                log.warning("could not write the ledger %s/%s (%s); %d fold(s) wait, next try"
                            " in %.0f s", self.store.namespace, self.store.name, e,
                            len(batch), delay)
                await self.store.clock.wait(delay)
                continue
            for uid, _ in batch:
                self.pending.pop(uid, None)
            failures = 0

    async def close(self) -> None:
        """Write what waits, once, then stop."""
        if self._task is None or self._task.done():
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self.pending:
            try:
                await asyncio.to_thread(self.store.fold, list(self.pending.items()))
            except (ApiException, HTTPError, OSError, ValueError, LedgerConflict) as e:
                log.error("%d fold(s) lost at shutdown: the ledger %s/%s could not be written"
                          " (%s)", len(self.pending), self.store.namespace, self.store.name, e)
