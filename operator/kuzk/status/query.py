"""What a ``/status`` request asks for: its parameters, checked, and the ``continue`` token.

Kubernetes' list conventions: ``?limit=`` pages ``pipelines`` and each page's
``metadata.continue`` is an opaque token for the next one. The token names the last job it
returned (by the document's order: creation time, namespace, name), the filters it was issued
for and a digest of the listing it paged (the jobs the filters admit, in order). The listing
is the same on every replica that sees the same jobs, so a token works on any of them; once a
job joins or leaves the listing the pages would no longer add up, and the token is refused with
410 as the API server refuses an expired one, with a token that goes on from the same job in
the new listing.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import get_type_hints

from kuzk.contract import api
from kuzk.status.aggregate import Filters
from kuzk.status.document import StatusDocument

PARAMETERS = ("namespace", "kind", "fields", "limit", "continue")
# The document's fields a request may choose (``metadata`` comes with every answer).
FIELDS = tuple(name for name in get_type_hints(StatusDocument) if name != "metadata")
TOKEN_VERSION = 1
OrderKey = tuple[str, str, str]  # a job's place in the document: created, namespace, name


class BadParameter(ValueError):
    """A query the server refuses with 400, naming the parameter."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class Query:
    """One request's question: which jobs (``filters``), which fields (all by default, in the
    document's order), and which page of ``pipelines``: at most ``limit`` jobs after the job
    ``after`` of the listing whose digest is ``listing``."""

    filters: Filters = field(default_factory=Filters)
    fields: tuple[str, ...] = FIELDS
    limit: int | None = None
    after: OrderKey | None = None
    listing: str | None = None


class Expired(Exception):
    """A ``continue`` token whose listing changed; ``token`` goes on from the same job in the
    listing as it is now."""

    def __init__(self, token: str) -> None:
        super().__init__("the listing changed since the continue token was issued")
        self.token = token


def parse(params: Mapping[str, str] | list[tuple[str, str]]) -> Query:
    """The query of a request's parameters (``request.query.items()``), or BadParameter."""
    values: dict[str, str] = {}
    for name, value in (params.items() if isinstance(params, Mapping) else params):
        if name not in PARAMETERS:
            raise BadParameter(name, f"unknown parameter {name!r}; use {', '.join(PARAMETERS)}")
        if name in values:
            raise BadParameter(name, f"parameter {name!r} given more than once")
        values[name] = value
    namespace, kind = values.get("namespace"), values.get("kind")
    if namespace is not None and not api.is_dns_label(namespace):
        raise BadParameter("namespace", f"namespace must be a DNS label, got {namespace!r}")
    if kind is not None and kind not in api.PROOF_KINDS:
        raise BadParameter("kind", f"kind must be one of {sorted(api.PROOF_KINDS)}, got {kind!r}")
    filters = Filters(namespace=namespace, kind=kind)
    after, listing = (None, None) if "continue" not in values else _read(values["continue"],
                                                                         filters)
    return Query(filters=filters, fields=_fields(values.get("fields")),
                 limit=_limit(values.get("limit")), after=after, listing=listing)


def _fields(value: str | None) -> tuple[str, ...]:
    if value is None:
        return FIELDS
    chosen = {name.strip() for name in value.split(",")}
    unknown = sorted(chosen - set(FIELDS))
    if unknown:
        raise BadParameter("fields", f"unknown field {unknown[0]!r} in fields; choose among "
                                     f"{', '.join(FIELDS)}")
    return tuple(name for name in FIELDS if name in chosen)


def _limit(value: str | None) -> int | None:
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 9 and int(value) > 0):
        raise BadParameter("limit", f"limit must be a positive integer, got {value[:40]!r}")
    return int(value)


def token(filters: Filters, after: OrderKey, listing: str) -> str:
    """The ``continue`` token for the page after job ``after`` of ``listing``."""
    payload = [TOKEN_VERSION, filters.namespace, filters.kind, *after, listing]
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read(text: str, filters: Filters) -> tuple[OrderKey, str]:
    forged = BadParameter("continue", "the continue token is not one this server issued; "
                                      "start again without continue")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError) as error:
        raise forged from error
    if (not isinstance(payload, list) or len(payload) != 7 or payload[0] != TOKEN_VERSION
            or not all(isinstance(v, str) for v in payload[3:])
            or not all(v is None or isinstance(v, str) for v in payload[1:3])):
        raise forged
    _, namespace, kind, created, job_namespace, name, listing = payload
    if Filters(namespace=namespace, kind=kind) != filters:
        raise BadParameter("continue", f"the continue token was issued for namespace="
                                       f"{namespace or ''} and kind={kind or ''}; ask with "
                                       f"those, or start again without continue")
    return (created, job_namespace, name), listing
