"""Status codes and the errors calls raise."""

from __future__ import annotations

from typing import Any

CODE_NAMES = (
    "ok",
    "canceled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
)

CODES = {name: i for i, name in enumerate(CODE_NAMES)}


def code_name(code: int) -> str:
    """The snake_case name of a status code; unknown codes are "unknown"."""
    return CODE_NAMES[code] if 0 <= code < len(CODE_NAMES) else "unknown"


class StatusError(Exception):
    """A call that ended with a status other than OK.

    ``code`` is the status's snake_case name (``"not_found"``), ``code_num``
    its number, ``message`` the text for people, ``details`` the error
    details decoded with the call's codec (JSON values for JSON calls, bytes
    otherwise or when a detail is not JSON), ``raw_details`` the same as sent,
    and ``trailer`` the trailing metadata, if any. ``not_processed`` is
    True when the call provably never ran (PROTOCOL.md, "Retry rule"):
    refused above a GOAWAY's last stream id, or never sent because no
    connection could be made; it may be sent again, whatever it does.
    """

    def __init__(
        self,
        code: str | int,
        message: str = "",
        details: list[Any] | None = None,
        *,
        raw_details: list[bytes] | None = None,
        trailer: dict[str, list[str]] | None = None,
        not_processed: bool = False,
    ) -> None:
        if isinstance(code, int):
            self.code_num = code if 0 <= code < len(CODE_NAMES) else CODES["unknown"]
            self.code = code_name(code)
        else:
            if code not in CODES:
                raise ValueError(f"unknown status code name {code!r}")
            self.code = code
            self.code_num = CODES[code]
        self.message = message
        self.details: list[Any] = list(details or [])
        self.raw_details: list[bytes] = list(raw_details or [])
        self.trailer: dict[str, list[str]] = trailer or {}
        self.not_processed = not_processed
        super().__init__(f"{self.code}: {message}" if message else self.code)

    def __repr__(self) -> str:
        return f"StatusError({self.code!r}, {self.message!r})"


class ProtocolError(StatusError):
    """The peer broke the protocol (a malformed preface or frame, a forged
    length, a flow-control violation...) or is not a warren server. The
    connection is closed; its calls fail with this error (code
    ``internal``, or ``unavailable`` when the peer is not warren at all)."""

    def __init__(self, message: str, code: str = "internal", kind: str = "") -> None:
        super().__init__(code, message)
        self.kind = kind
