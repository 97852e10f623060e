"""The finding ledger: a PR's findings, by fingerprint and `F` number, for the PR's life."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from types import EllipsisType
from typing import TYPE_CHECKING, Any

from bot.records import ledger as sql
from bot.records.ledger import LedgerWrites, NewEntry
from bot.records.types import DraftFinding, Finding, LedgerEntry, LedgerNote, Review
from bot.records.vocab import FindingState, LedgerStatus, ReviewState
from bot.review.identity import pair, same, words
from bot.review.pipeline import changes_since
from bot.review.plan import placed

if TYPE_CHECKING:
    from bot.records.database import Database
    from bot.review.pipeline import Draft
    from bot.worktrees import Worktree

log = logging.getLogger(__name__)

CODE_LINES = 20  # at most this many lines of code identify a finding
_WORD = re.compile(r"[a-z0-9_]+")
_SHA = re.compile(r"[0-9a-f]{40}")
# Left out of a stored title key. Never change it: fingerprints in the ledger are made of it.
_FILLER = """a an the is are was be been of in on at to for with and or not no this that it its by
as from"""
_STOP = frozenset(_FILLER.split())


@dataclass(frozen=True)
class Key:
    path: str
    code: str  # hash of the code it points at, whitespace collapsed ('' when unknown)
    title: str  # its title's words, lower case, without filler words

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.path}\0{self.code}\0{self.title}".encode()).hexdigest()[:24]

    def near(self, other: Key, *, moved: bool) -> float | None:
        """`other` is this finding said again (`identity.same`): at the same code, or, when this
        finding's code moved on (edited or gone at the new head), anywhere on its file."""
        if self.path != other.path:
            return None
        placed = bool(self.code) and self.code == other.code
        return same(words(self.title), words(other.title), placed=placed, moved=moved)

    def entry(self, ordinal: int) -> NewEntry:
        return NewEntry(ordinal, self.fingerprint, self.path, self.code, self.title)


def title_key(title: str) -> str:
    return " ".join(w for w in _WORD.findall(title.casefold()) if w not in _STOP)


def code_key(lines: Iterable[str]) -> str:
    """The code a finding points at, whitespace collapsed and blank lines left out, hashed."""
    kept = [" ".join(line.split()) for line in lines]
    kept = [line for line in kept if line]
    if not kept:
        return ""
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


def key_of(finding: DraftFinding | Finding, index: CodeIndex | None) -> Key:
    """`index`: the finding's file on its side (None: unknown)."""
    code = index.key(finding.line, finding.end_line) if index else ""
    return Key(finding.path, code, title_key(finding.title))


def _span(finding: Finding, length: int | None = None) -> int:
    """How many lines the finding's code runs past its first (at most CODE_LINES - 1): to
    the file's end (`length` lines) at most, as its key was made (`CodeIndex.key`)."""
    end = finding.end_line or finding.line or 0
    if length is not None:
        end = min(end, length)
    return max(0, min(end - (finding.line or 0), CODE_LINES - 1))


ANCHORS = 64  # past this many places of a code's rarest line, its size's windows are hashed
ARRIVALS = 100  # files a push added, read for the code of a finding whose file it removed


class CodeIndex:
    """A file's text, indexed once for finding code in it. Code whose lines are known (read
    at the head a finding was drafted at) is looked for where its rarest line is (`find_lines`,
    from one map of the file's lines); code known only by its key is looked for among the
    windows of its size, each hashed once for all findings of that size (`find`). Either way
    finding n findings in a file of N lines is linear in N, not n passes over the file."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self._collapsed: list[str] | None = None
        self._places: dict[str, list[int]] | None = None  # a collapsed line → its indexes
        self._starts: dict[int, dict[str, int]] = {}  # span → code key → first line (1-based)

    @property
    def collapsed(self) -> list[str]:
        if self._collapsed is None:
            self._collapsed = [" ".join(line.split()) for line in self.lines]
        return self._collapsed

    def key(self, line: int | None, end_line: int | None) -> str:
        if not line:
            return ""
        return code_key(self.lines[line - 1 : min(end_line or line, line + CODE_LINES - 1)])

    def window(self, start: int, span: int) -> list[str] | None:
        """The code of the window of span + 1 lines from line `start` (1-based) as `code_key`
        hashes it (blank lines left out); None when the window is not wholly in the file."""
        if start < 1 or start + span > len(self.lines):
            return None
        if self._collapsed is None:  # an earlier head's file: only these lines are wanted
            lines = [" ".join(line.split()) for line in self.lines[start - 1 : start + span]]
        else:
            lines = self._collapsed[start - 1 : start + span]
        return [line for line in lines if line]

    def find(self, finding: Finding, code: str, length: int | None = None) -> int | None:
        """The first line of a window of the finding's size whose code key is `code` (its
        lines up to the end of the file it was keyed in, `length` lines; unknown: this one)."""
        if not (code and finding.line):
            return None
        span = _span(finding, len(self.lines) if length is None else length)
        return self._windows(span).get(code)

    def find_lines(self, code: list[str], span: int) -> int | EllipsisType | None:
        """The first line of a window of span + 1 lines whose code (`window`) is `code`;
        None when there is none, Ellipsis when its rarest line is in too many places to
        look at each (then `find` by key)."""
        places = self._line_places()
        anchor = min(range(len(code)), key=lambda k: len(places.get(code[k], ())))
        found = places.get(code[anchor], [])
        if len(found) > ANCHORS:
            return ...
        collapsed = self.collapsed
        for at in found:  # in file order, so the first window found is the first there is
            first, before = at, anchor  # back to where the code's first line would be
            while before and first > 0 and at - first <= span:
                first -= 1
                before -= 1 if collapsed[first] else 0
            if before or at - first > span:
                continue
            start = first
            while start > 0 and first - start < span and not collapsed[start - 1]:
                start -= 1  # a window may begin with blank lines
            for begin in range(start, first + 1):
                if self.window(begin + 1, span) == code:
                    return begin + 1
        return None

    def _line_places(self) -> dict[str, list[int]]:
        if self._places is None:
            places: dict[str, list[int]] = {}
            for n, line in enumerate(self.collapsed):
                found = places.get(line)
                if found is None:
                    places[line] = [n]
                else:
                    found.append(n)
            places.pop("", None)
            self._places = places
        return self._places

    def _windows(self, span: int) -> dict[str, int]:
        starts = self._starts.get(span)
        if starts is None:
            starts = self._starts[span] = {}
            collapsed, sha256 = self.collapsed, hashlib.sha256
            for start in range(len(collapsed) - span):  # windows wholly in the file
                kept = [line for line in collapsed[start : start + span + 1] if line]
                if kept:  # as code_key, without walking the lines again
                    code = sha256("\n".join(kept).encode()).hexdigest()[:16]
                    starts.setdefault(code, start + 1)
        return starts


@dataclass(frozen=True)
class Item:
    ordinal: int
    key: Key
    status: LedgerStatus
    last: Finding
    why: str | None = None  # a person's reason for the drop
    fixed_in: str | None = None
    published: bool = False  # went out on GitHub (it may have been fixed since)
    head: str | None = None  # the head sha `last` was drafted at


def view(entries: list[LedgerEntry], history: list[tuple[str, str, Finding]]) -> list[Item]:
    by_number: dict[int, list[tuple[str, Finding]]] = {}
    heads: dict[int, str] = {}  # each number's newest finding's head
    for review_state, head, finding in history:
        by_number.setdefault(finding.ordinal, []).append((review_state, finding))
        heads[finding.ordinal] = head
    items = []
    for entry in entries:
        seen = by_number.get(entry.ordinal)
        if not seen:
            continue
        key = Key(entry.path, entry.code_key, entry.title_key)
        # Only a person's `drop` is a verdict: a finding an approve left out (the verify
        # pass refuted it, or it was not listed) stays open.
        dropped = [f for _s, f in seen if f.dropped_by_person]
        published = any(s == ReviewState.POSTED and f.state == FindingState.KEPT for s, f in seen)
        last = seen[-1][1]
        if entry.fixed_in:
            status = LedgerStatus.FIXED
        elif dropped:
            status = LedgerStatus.DROPPED
        elif published:
            status = LedgerStatus.PUBLISHED
        elif last.state == FindingState.WITHDRAWN:
            status = LedgerStatus.WITHDRAWN
        else:
            status = LedgerStatus.OPEN
        why = dropped[-1].why if dropped else None
        head = heads.get(entry.ordinal)
        items.append(Item(entry.ordinal, key, status, last, why, entry.fixed_in, published, head))
    return items


async def load(db: Database, pull_id: int) -> list[Item]:
    return view(await sql.entries(db, pull_id), await sql.history(db, pull_id))


REPLY_CHARS = 600  # of each reply in a finding's thread, for the reviewer
REPLIES = 5  # the last ones of each thread


def brief(items: list[Item], replies: dict[int, list[str]]) -> list[dict[str, Any]]:
    """What the reviewer is told of the ledger, with the last replies in each published
    finding's thread."""
    return [
        {
            "replies": [_line(r)[:REPLY_CHARS] for r in replies.get(i.ordinal, [])[-REPLIES:]],
            "ordinal": i.ordinal,
            "status": i.status,
            "severity": i.last.severity,
            "where": _line(i.last.path) + (f":{i.last.line}" if i.last.line else ""),
            "title": _line(i.last.title),
            "why": _line(i.why)[:REPLY_CHARS] if i.why else None,
            "fixed_in": (i.fixed_in or "")[:7],
        }
        for i in items
        if i.status != LedgerStatus.FIXED
    ]


def _line(text: str) -> str:
    """One line: text people or a model wrote cannot pose as another ledger row."""
    return " ".join(text.split())


@dataclass
class Reconciled:
    numbered: list[tuple[int, DraftFinding]] = field(default_factory=list)
    carried: list[Item] = field(default_factory=list)  # open, not touched: still in the draft
    new: list[NewEntry] = field(default_factory=list)
    rekeyed: list[NewEntry] = field(default_factory=list)
    still_published: list[int] = field(default_factory=list)  # on GitHub already, still open
    fixed: list[Item] = field(default_factory=list)
    suppressed: Counter[int] = field(default_factory=Counter)  # dropped number → repeats
    # Fixes the reviewer claimed and the head does not show (its code is as it was), and
    # claimed numbers that name no open or published finding: both ignored, and said.
    unconfirmed: list[int] = field(default_factory=list)
    not_open: list[int] = field(default_factory=list)

    def writes(self, pull_id: int, review_id: int, head_sha: str) -> LedgerWrites:
        return LedgerWrites(
            pull_id,
            review_id,
            head_sha,
            new=tuple(self.new),
            rekeyed=tuple(self.rekeyed),
            fixed=tuple(i.ordinal for i in self.fixed),
            suppressed=tuple(sorted(self.suppressed.items())),
        )

    def note(self, items: list[Item], *, since: str | None, head_sha: str) -> LedgerNote:
        fresh = {e.ordinal for e in self.new}
        drafted = [n for n, _ in self.numbered]
        return LedgerNote(
            since=since,
            head=head_sha,
            earlier=len(items),
            new=tuple(n for n in drafted if n in fresh),
            open=tuple(n for n in drafted if n not in fresh),
            published=tuple(sorted(self.still_published)),
            fixed=tuple(i.ordinal for i in self.fixed),
            fixed_published=tuple(i.ordinal for i in self.fixed if i.published),
            dropped=tuple(i.ordinal for i in items if i.status == LedgerStatus.DROPPED),
            suppressed=sum(self.suppressed.values()),
            unconfirmed=tuple(sorted(self.unconfirmed)),
            not_open=tuple(self.not_open),
        )


def reconcile(
    items: list[Item],
    found: list[tuple[DraftFinding, Key]],
    *,
    resolved: Iterable[int],
    changed: set[str] | None,
    next_ordinal: int,
    moved: Collection[int] = (),
) -> Reconciled:
    """A new head's findings (each with its key) against the ledger. A claimed fix counts only
    when the head shows it (`_changed`): the reviewer's word alone, which a prompt injection
    in the PR can steer, fixes nothing."""
    out = Reconciled()
    dropped = [i for i in items if i.status == LedgerStatus.DROPPED]
    active = [i for i in items if i.status not in (LedgerStatus.DROPPED, LedgerStatus.FIXED)]
    candidates = dropped + active
    paired = _pairs([key for _f, key in found], candidates, moved, shared=range(len(dropped)))
    taken: set[int] = set()
    for n, (finding, key) in enumerate(found):
        at = paired.get(n)
        if at is not None and at < len(dropped):
            out.suppressed[dropped[at].ordinal] += 1
            continue
        if at is None:
            out.new.append(key.entry(next_ordinal))
            out.numbered.append((next_ordinal, finding))
            next_ordinal += 1
            continue
        item = candidates[at]
        taken.add(item.ordinal)
        if key != item.key:
            out.rekeyed.append(key.entry(item.ordinal))
        if item.status == LedgerStatus.PUBLISHED:
            out.still_published.append(item.ordinal)
        else:
            out.numbered.append((item.ordinal, finding))
    wanted = set(resolved)
    for item in active:
        if item.ordinal in taken or item.status == LedgerStatus.WITHDRAWN:
            continue
        claimed = item.ordinal in wanted
        if claimed and _changed(item, moved, changed):
            out.fixed.append(item)
            continue
        if claimed:
            out.unconfirmed.append(item.ordinal)
        if item.status == LedgerStatus.PUBLISHED:
            out.still_published.append(item.ordinal)
        else:
            out.carried.append(item)
    open_now = {i.ordinal for i in active if i.status != LedgerStatus.WITHDRAWN}
    out.not_open = sorted(wanted - open_now)
    out.still_published.sort()
    return out


def _changed(item: Item, moved: Collection[int], changed: set[str] | None) -> bool:
    """Whether the head shows the fix a reviewer claimed: the code the finding points at is
    not there as it was (edited or gone). A finding with no code of the head to compare (no
    line, or on removed code, side LEFT, read at the merge base) counts as changed only when
    this push changed its file (`changed`: a delta review's paths; None, a whole review of
    the same head or a force-push, shows no change)."""
    if item.key.code and item.last.side != "LEFT":
        return item.ordinal in moved
    return changed is not None and item.key.path in changed


def _pairs(
    keys: list[Key], items: list[Item], moved: Collection[int], *, shared: Collection[int]
) -> dict[int, int]:

    def exact(o: int, n: int) -> float | None:
        return 0.0 if items[o].key == keys[n] else None

    def near(o: int, n: int) -> float | None:
        alike = items[o].key.near(keys[n], moved=items[o].ordinal in moved)
        return None if alike is None else -alike

    return pair(len(items), len(keys), (exact, near), shared=shared)


def carry(item: Item, start: int | None) -> DraftFinding:
    """An open finding the push did not touch, moved to `start` (None: its code changed, and
    its verdict no longer holds)."""
    f = item.last
    same = start is not None  # its code is as it was: the verify pass's verdict still holds
    line, end_line = f.line, f.end_line
    if start is not None:
        line, end_line = start, (start + _span(f)) if f.end_line else None
    return DraftFinding(
        path=f.path,
        severity=f.severity,
        title=f.title,
        body=f.body,
        line=line,
        end_line=end_line,
        side=f.side,
        suggestion=f.suggestion,
        verify_status=f.verify_status if same else None,
        verify_note=f.verify_note if same else None,
        evidence=f.evidence,
        confidence=f.confidence,
    )


@dataclass
class Texts:
    """Files' texts read once from git's objects (never the file system: a symlink in a PR
    reads nothing outside): on a side of the PR (head for RIGHT, merge base for LEFT), and at
    the earlier heads the ledger's findings were drafted at, where their code is read as it
    was. Reading is async (git); keys and matching (`key`, `start`, `moved`) are pure work on
    what was read, done in a worker thread."""

    tree: Worktree
    # (path, side or commit sha) → the text, None when there is none
    read: dict[tuple[str, str], str | None] = field(default_factory=dict)
    indexes: dict[tuple[str, str], CodeIndex | None] = field(default_factory=dict, repr=False)
    starts: dict[int, int | None] = field(default_factory=dict, repr=False)  # by F number
    # (path, earlier head) → the files at the head its code may have gone to: the path is
    # gone at the head, and since that earlier head it was renamed to these, or they were added
    arrivals: dict[tuple[str, str], list[str]] = field(default_factory=dict, repr=False)

    async def of(self, path: str, side: str | None) -> str | None:
        where = (path, side or "RIGHT")
        if where not in self.read:
            commit = self.tree.merge_base if where[1] == "LEFT" else self.tree.head_sha
            self.read[where] = await self._show(commit, path)
        return self.read[where]

    async def _show(self, commit: str, path: str) -> str | None:
        out = await self.tree.git("show", f"{commit}:{path}", check=False, limit=2 * 1024 * 1024)
        return out.decode("utf-8", errors="replace") if out else None

    async def load(self, findings: Iterable[DraftFinding], items: Iterable[Item] = ()) -> None:
        """Read the files these findings and ledger items are on, and each item's file at
        the head it was drafted at (each once)."""
        for finding in findings:
            await self.of(finding.path, finding.side)
        for item in items:
            f = item.last
            if item.status == LedgerStatus.FIXED:
                continue
            text = await self.of(f.path, f.side)
            if f.side == "LEFT" or not (item.head and _SHA.fullmatch(item.head)):
                continue
            if (f.path, item.head) not in self.read:
                same = item.head == self.tree.head_sha
                self.read[f.path, item.head] = text if same else await self._show(item.head, f.path)
            if text is None and item.key.code and (f.path, item.head) not in self.arrivals:
                self.arrivals[f.path, item.head] = await self._arrived(f.path, item.head)

    async def _arrived(self, path: str, since: str) -> list[str]:
        """The files at the head that `path` (gone there) was renamed to since `since`, and
        those added since (a rename with other edits shows as one), read: its code may be
        there as it was. Added files are read ARRIVALS at most."""
        renamed, added = [], []
        for status, names in await changes_since(self.tree, since):
            if len(names) == 2 and names[0] == path:
                renamed.append(names[-1])
            elif status == "A":
                added.append(names[0])
        found = [*renamed, *added[:ARRIVALS]]
        for arrived in found:
            await self.of(arrived, "RIGHT")
        return found

    def index(self, path: str, where: str | None) -> CodeIndex | None:
        at = (path, where or "RIGHT")
        if at not in self.indexes:
            text = self.read.get(at)
            self.indexes[at] = CodeIndex(text) if text else None
        return self.indexes[at]

    def key(self, finding: DraftFinding | Finding) -> Key:
        return key_of(finding, self.index(finding.path, finding.side))

    def start(self, item: Item) -> int | None:
        """The line where the item's code starts at the head; None when its code is not there
        as it was (edited, or gone)."""
        if item.ordinal not in self.starts:
            f = item.last
            index = self.index(f.path, f.side)
            known = index is not None and item.key.code and f.line
            self.starts[item.ordinal] = self._find(index, item) if known else None
        return self.starts[item.ordinal]

    def _find(self, index: CodeIndex, item: Item) -> int | None:
        f = item.last
        earlier = self.index(f.path, item.head) if item.head and f.side != "LEFT" else None
        # Its key was made of its lines up to the end of the file it was drafted on.
        length = len(earlier.lines) if earlier else None
        code = self._code(item, earlier)
        if code is not None:
            found = index.find_lines(code, _span(f, length))
            if found is not ...:
                return found
        return index.find(f, item.key.code, length)

    def _code(self, item: Item, earlier: CodeIndex | None) -> list[str] | None:
        """The item's code as the head it was drafted at (`earlier`) shows it at its lines,
        when that is the code its key names (else the key alone tells it)."""
        f = item.last
        code = earlier.window(f.line or 0, _span(f, len(earlier.lines))) if earlier else None
        return code if code and code_key(code) == item.key.code else None

    def moved(self, items: list[Item]) -> set[int]:
        """The numbers whose code is not at the head as it was (edited, or gone): not where
        it was, nor in a file its own was renamed to or one added since (`arrivals`)."""
        return {
            item.ordinal
            for item in items
            if item.key.code
            and item.status != LedgerStatus.FIXED
            and self.start(item) is None
            and not self._arrived_as_it_was(item)
        }

    def _arrived_as_it_was(self, item: Item) -> bool:
        if not item.last.line:
            return False
        for path in self.arrivals.get((item.last.path, item.head or ""), ()):
            index = self.index(path, "RIGHT")
            if index is not None and self._find(index, item) is not None:
                return True
        return False


async def delta_base(db: Database, tree: Worktree, pull_id: int, review_id: int) -> str | None:
    """Where a re-review starts: the PR's last reviewed head when this head descends from it
    (a push on top), else None (the first review, the same head again, or a force-push: the
    whole PR is reviewed)."""
    last = await sql.last_reviewed(db, pull_id, review_id)
    if last is None or last.head_sha == tree.head_sha or not _SHA.fullmatch(last.head_sha):
        return None
    base = await tree.git("merge-base", last.head_sha, tree.head_sha, check=False)
    return last.head_sha if base.decode().strip() == last.head_sha else None


async def numbered(
    db: Database,
    tree: Worktree,
    pull_id: int,
    review_id: int,
    items: list[Item],
    draft: Draft,
    since: str | None,
) -> tuple[list[tuple[int, DraftFinding]], LedgerWrites, LedgerNote]:
    """A new head's draft against the ledger: numbered findings (untouched open ones carried to
    where their code is now), the ledger writes and the status note. The bookkeeping runs in a
    worker thread: a large file must not hold the event loop that acknowledges webhooks."""
    texts = Texts(tree)
    await texts.load(draft.findings, items)
    next_ordinal = await sql.next_ordinal(db, pull_id)
    outcome = await asyncio.to_thread(_reconciled, texts, items, draft, since, next_ordinal)
    if outcome.unconfirmed or outcome.not_open:
        log.warning(
            "fixes the reviewer claimed were not taken",
            extra={"fields": {"unchanged": outcome.unconfirmed, "not_open": outcome.not_open}},
        )
    note = outcome.note(items, since=since, head_sha=tree.head_sha)
    return outcome.numbered, outcome.writes(pull_id, review_id, tree.head_sha), note


def _reconciled(
    texts: Texts, items: list[Item], draft: Draft, since: str | None, next_ordinal: int
) -> Reconciled:
    keys = [texts.key(f) for f in draft.findings]
    outcome = reconcile(
        items,
        list(zip(draft.findings, keys, strict=True)),
        resolved=draft.resolved,
        changed=set(draft.changed) if since else None,
        next_ordinal=next_ordinal,
        moved=texts.moved(items),
    )
    for item in outcome.carried:
        found = carry(item, texts.start(item))
        outcome.numbered.append((item.ordinal, placed(found, draft.diff) if draft.diff else found))
    outcome.numbered.sort(key=lambda pair: pair[0])
    return outcome


async def without_repeats(
    db: Database, tree: Worktree, review: Review, findings: list[DraftFinding]
) -> tuple[list[DraftFinding], Counter[int], Texts]:
    """A revision's findings without repeats of ones people dropped from earlier drafts, the
    repeats by dropped number, and the texts read (`Texts.key` of a kept one)."""
    dropped = [
        i
        for i in await load(db, review.pull_id)
        if i.status == LedgerStatus.DROPPED and i.last.review_id != review.id
    ]
    texts = Texts(tree)
    await texts.load(findings, dropped)
    kept, repeats = await asyncio.to_thread(_repeats_left_out, texts, dropped, findings)
    return kept, repeats, texts


def _repeats_left_out(
    texts: Texts, dropped: list[Item], findings: list[DraftFinding]
) -> tuple[list[DraftFinding], Counter[int]]:
    found = [texts.key(finding) for finding in findings]
    paired = _pairs(found, dropped, texts.moved(dropped), shared=range(len(dropped)))
    kept, repeats = [], Counter[int]()
    for n, finding in enumerate(findings):
        if n in paired:
            repeats[dropped[paired[n]].ordinal] += 1
        else:
            kept.append(finding)
    return kept, repeats
