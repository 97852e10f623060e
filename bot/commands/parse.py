"""Pure parsing of `/cockpit …` commands in a comment body (no I/O; table-tested)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Hidden from readers: HTML comments, and raw blocks shown as-is (`<pre>`, `<textarea>` …).
_HIDDEN = re.compile(r"<!--|<(pre|textarea|script|style|xmp)(?=[\s>/])", re.I)
_FINDING = re.compile(r"^[Ff](\d{1,4})$")
# Flags that take a value (`--provider codex` or `--provider=codex`); the rest are switches.
VALUE_FLAGS = frozenset({"provider", "with"})


@dataclass(frozen=True)
class Command:
    name: str
    text: str = ""  # everything after the command name, as typed (for ask / send-back notes)
    findings: tuple[int, ...] = ()
    flags: dict[str, str | bool] = field(default_factory=dict)
    words: tuple[str, ...] = ()  # arguments that are neither findings nor flags
    line: int = 0
    prose: str = ""  # the text without its flags (instructions, notes)

    def flag(self, name: str) -> str | bool | None:
        return self.flags.get(name)


def parse_commands(body: str | None, prefix: str = "/cockpit") -> list[Command]:
    """Commands are lines that start with the prefix, outside code fences, indented code,
    `>` quotes, HTML comments and `<pre>`-like blocks (what a reader cannot see as a command
    never runs); several may appear in one comment and run in order."""
    if not body:
        return []
    commands = []
    fence: str | None = None
    hidden: str | None = None  # what ends the hidden part we are in (`-->`, `</pre>` …)
    wanted = prefix.casefold()
    for number, raw in enumerate(body.replace("\r\n", "\n").replace("\r", "\n").split("\n")):
        if hidden is not None or fence is None:
            hidden, visible = _hidden_after(raw, hidden)
            if not visible:
                continue
        match = _FENCE.match(raw)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
            elif (
                marker[0] == fence[0]
                and len(marker) >= len(fence)
                and not raw.strip()[len(marker) :].strip()
            ):
                fence = None
            continue
        if fence is not None:
            continue
        if raw.startswith(("    ", "\t")):  # indented code block
            continue
        line = raw.strip()
        if line.startswith(">"):
            continue
        head, _, rest = line.partition(" ")
        if head.casefold() != wanted:
            continue
        commands.append(_command(rest.strip(), number))
    return commands


def _hidden_after(line: str, hidden: str | None) -> tuple[str | None, bool]:
    """(what still hides the next lines, whether this line starts visible: a command is
    only ever at the start of a line)."""
    visible = hidden is None
    position = 0
    while True:
        if hidden is not None:
            end = line.lower().find(hidden, position)
            if end < 0:
                return hidden, visible
            position, hidden = end + len(hidden), None
            continue
        opened = _HIDDEN.search(line, position)
        if opened is None:
            return None, visible
        hidden = "-->" if opened.group(0) == "<!--" else f"</{opened.group(1).lower()}>"
        position = opened.end()


def _command(rest: str, line: int) -> Command:
    name, _, text = rest.partition(" ")
    tokens = text.split()
    findings: list[int] = []
    flags: dict[str, str | bool] = {}
    words: list[str] = []
    prose: list[str] = []
    n = 0
    while n < len(tokens):
        token = tokens[n]
        n += 1
        if token.startswith("--") and len(token) > 2:
            key, has_value, value = token[2:].partition("=")
            key = key.casefold()
            if key in VALUE_FLAGS and not has_value and n < len(tokens):
                value, has_value = tokens[n], "="
                n += 1
            flags[key] = value.casefold() if has_value else True
            continue
        prose.append(token)
        refs = [_FINDING.match(part) for part in token.strip(",.;:?!()").split(",") if part]
        if refs and all(refs):
            findings.extend(int(m.group(1)) for m in refs if m)
            continue
        words.append(token)
    return Command(
        name=name.casefold() or "help",
        text=text.strip(),
        findings=tuple(dict.fromkeys(findings)),
        flags=flags,
        words=tuple(words),
        line=line,
        prose=" ".join(prose),
    )
