"""The team's review instructions (REVIEW.md, AGENTS.md, cockpit.toml), capped in size."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt

from bot.repo_config import CONFIG_PATH, RepoConfig
from bot.texts import PEOPLE, say

REVIEW_FILE, AGENTS_FILE, ATTRIBUTES_FILE = "REVIEW.md", "AGENTS.md", ".gitattributes"
# Files whose default-branch version steers a review: a PR that edits one is reviewed under
# the old version, and is told its changes apply after merge.
STEERING = (REVIEW_FILE, AGENTS_FILE, ATTRIBUTES_FILE)
FILE_CHARS = 8_000  # of one file's instructions (a REVIEW.md, an AGENTS.md review section)
TOTAL_CHARS = 24_000  # of all instructions together (about 6,000 tokens)
MIN_PART = 200  # a source the budget leaves less room for is left out whole, not cut to a stub
_REVIEW_WORD = re.compile(r"(?<![A-Za-z])review", re.I)
_MARKDOWN = MarkdownIt("commonmark")


@dataclass(frozen=True)
class Instruction:
    source: str  # what it is called (markdown): "`REVIEW.md`", "`AGENTS.md` § Review", …
    text: str
    files: tuple[str, ...] = ()  # the reviewed files it is for; () for every file
    cut: bool = False  # its end was cut to fit the limits


@dataclass(frozen=True)
class Instructions:
    used: tuple[Instruction, ...] = ()
    left_out: tuple[str, ...] = ()  # sources left out whole: the size budget was spent
    edited: tuple[str, ...] = ()  # steering files the PR changes: they apply after merge

    @property
    def cut(self) -> tuple[str, ...]:
        return tuple(i.source for i in self.used if i.cut)


def folders(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:n]) for n in range(len(parts) + 1)]


def joined(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def candidates(paths: Iterable[str], names: Iterable[str] = STEERING) -> set[str]:
    names = tuple(names)
    return {joined(folder, name) for path in paths for folder in folders(path) for name in names}


def nearest(
    paths: Iterable[str], present: Collection[str], name: str
) -> dict[str, tuple[str, ...]]:
    """Below the root: for each path, the `name` file nearest above it among `present` (the
    root's applies to every file, so it is not listed); that file → the paths it is for."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for folder in reversed(folders(path)[1:]):
            place = joined(folder, name)
            if place in present:
                found.setdefault(place, []).append(path)
                break
    return {place: tuple(sorted(served)) for place, served in sorted(found.items())}


def review_section(markdown: str) -> tuple[str, str] | None:
    tokens = _MARKDOWN.parse(markdown)
    lines = markdown.splitlines()
    headings = [
        (int(token.tag[1]), token.map, tokens[n + 1].content.strip())
        for n, token in enumerate(tokens)
        if token.type == "heading_open" and token.map is not None
    ]
    for index, (level, where, title) in enumerate(headings):
        if not _REVIEW_WORD.search(title):
            continue
        end = next((w[0] for lv, w, _ in headings[index + 1 :] if lv <= level), len(lines))
        return title, "\n".join(lines[where[1] : end]).strip()
    return None


def edited(changed: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(p for p in changed if p == CONFIG_PATH or p.rsplit("/", 1)[-1] in STEERING))


def _clip(text: str, limit: int) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    kept = text[:limit]
    if "\n" in kept[limit // 2 :]:
        kept = kept[: kept.rindex("\n")]
    return kept.rstrip(), True


def sources(
    config: RepoConfig, texts: Mapping[str, str], reviewed: Sequence[str]
) -> list[tuple[Instruction, bool]]:
    """Every source that applies to the reviewed files, and whether it is a file (whose size
    only the limits here bound; the config's texts are bounded where they are read), in the
    order the budget serves them: what applies to every file first (the config's
    `instructions`, `REVIEW.md`, `AGENTS.md`), then the path-scoped ones (`[[review.paths]]`
    in file order, then nested `REVIEW.md` and `AGENTS.md` files by path)."""
    everywhere: list[tuple[Instruction, bool]] = []
    scoped: list[tuple[Instruction, bool]] = []

    def add(source: str, text: str, files: tuple[str, ...] = (), *, is_file: bool) -> None:
        text = text.replace("\r\n", "\n").strip()
        if text:
            (scoped if files else everywhere).append((Instruction(source, text, files), is_file))

    add(_source(CONFIG_PATH), config.instructions, is_file=False)
    if REVIEW_FILE in texts:
        add(_source(REVIEW_FILE), texts[REVIEW_FILE], is_file=True)
    section = review_section(texts[AGENTS_FILE]) if AGENTS_FILE in texts else None
    if section is not None:
        add(_source(AGENTS_FILE, section=section[0]), section[1], is_file=True)
    for rule in config.paths:
        matched = tuple(p for p in reviewed if rule.matches(p))
        if matched:
            add(_source(CONFIG_PATH, glob=rule.glob), rule.instructions, matched, is_file=False)
    for place, files in nearest(reviewed, texts, REVIEW_FILE).items():
        add(_source(place), texts[place], files, is_file=True)
    for place, files in nearest(reviewed, texts, AGENTS_FILE).items():
        section = review_section(texts[place])
        if section is not None:
            add(_source(place, section=section[0]), section[1], files, is_file=True)
    return everywhere + scoped


def _source(place: str, *, section: str | None = None, glob: str | None = None) -> str:
    """How an instruction's source is named: a file (`REVIEW.md`) or its section, or the
    config's `instructions` (with `glob`: one `[[review.paths]]` table's)."""
    config = place == CONFIG_PATH  # the config's own key, not a file of instructions
    return say(PEOPLE, "instruction_source", place=place, section=section, glob=glob, config=config)


def assemble(
    config: RepoConfig,
    texts: Mapping[str, str],
    reviewed: Sequence[str],
    changed: Iterable[str] = (),
    *,
    file_chars: int = FILE_CHARS,
    total_chars: int = TOTAL_CHARS,
) -> Instructions:
    """The instructions for a review of `reviewed`: each file cut to `file_chars`, all to
    `total_chars` in `sources` order (a source is cut to the room left, or left out under
    MIN_PART)."""
    used: list[Instruction] = []
    left_out: list[str] = []
    room = total_chars
    for found, is_file in sources(config, texts, reviewed):
        text, cut = _clip(found.text, file_chars) if is_file else (found.text, False)
        if len(text) > room:
            if room < MIN_PART:
                left_out.append(found.source)
                continue
            text, cut = _clip(text, room)[0], True
        room -= len(text)
        used.append(Instruction(found.source, text, found.files, cut))
    return Instructions(tuple(used), tuple(left_out), edited(changed))
