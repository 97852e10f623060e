"""A webhook delivery as read at the ack: its body checked and its envelope decoded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from bot.texts import PEOPLE, say

MAX_ID = 2**63 - 1


class MalformedBody(ValueError):
    """The body is not a UTF-8 JSON object of GitHub's shape."""


# GitHub's ids and numbers are positive 64-bit integers (SQLite's INTEGER).
Id = Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)]


class _Id(msgspec.Struct):
    id: Id | None = None


class _Repository(msgspec.Struct):
    full_name: str | None = None


class _Numbered(msgspec.Struct):
    number: Id | None = None


class _Envelope(msgspec.Struct):
    """The fields the inbox needs: decoding validates the whole document but builds only these."""

    action: str | None = None
    installation: _Id | None = None
    repository: _Repository | None = None
    pull_request: _Numbered | None = None
    issue: _Numbered | None = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)


@dataclass(frozen=True)
class Delivery:
    id: str
    event: str
    body: bytes
    action: str | None = None
    installation_id: int | None = None
    repo: str | None = None
    pr_number: int | None = None

    @classmethod
    def from_body(cls, delivery_id: str, event: str, body: bytes) -> Delivery:
        try:
            body.decode("utf-8")  # JSON is UTF-8 (RFC 8259), also in strings nobody reads
            envelope = _ENVELOPE.decode(body)
        except UnicodeDecodeError:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="utf8")) from None
        except RecursionError:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="deep")) from None
        except msgspec.ValidationError as exc:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="shape", error=exc)) from None
        except msgspec.DecodeError:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="json")) from None
        holders = (envelope.pull_request, envelope.issue)
        number = next((h.number for h in holders if h and h.number is not None), None)
        return cls(
            delivery_id,
            event,
            body,
            envelope.action,
            envelope.installation.id if envelope.installation else None,
            envelope.repository.full_name if envelope.repository else None,
            number,
        )

    @property
    def key(self) -> str:
        """Deliveries about one PR are processed one at a time, in arrival order."""
        if self.repo and self.pr_number is not None:
            return f"events:{self.repo}#{self.pr_number}"
        return f"delivery:{self.id}"
