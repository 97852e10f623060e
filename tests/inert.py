"""What GitHub would make of a comment body: rendered with cmark-gfm (GitHub's own markdown
library) with raw HTML passed through, then read like GitHub's post-processing reads it
(mentions and cross-repository references in text nodes, links, images, raw tags)."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser

import cmarkgfm
from cmarkgfm.cmark import Options

EXTENSIONS = ["table", "strikethrough", "autolink", "tagfilter", "tasklist"]
# What cmark-gfm itself writes for markdown; any other tag came from raw HTML.
MARKDOWN_TAGS = {
    "p", "em", "strong", "code", "pre", "ul", "ol", "li", "blockquote", "hr", "br", "del",
    "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "input",
    "a", "img", "sup", "section",
}  # fmt: skip
# GitHub's MentionFilter: `@name` not after an ASCII word character (Ruby's \w), per text node.
MENTION = re.compile(r"(?<![A-Za-z0-9_])@[A-Za-z0-9][A-Za-z0-9-]*")
CROSS_REF = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#\d|[A-Za-z0-9-]+@[0-9a-f]{7,40}\b")


def to_html(markdown: str) -> str:
    return cmarkgfm.markdown_to_html_with_extensions(
        markdown,
        options=Options.CMARK_OPT_UNSAFE
        | Options.CMARK_OPT_FOOTNOTES
        | Options.CMARK_OPT_GITHUB_PRE_LANG,
        extensions=EXTENSIONS,
    )


class Reading(HTMLParser):
    """The active parts of one rendered body."""

    def __init__(self, repo_url: str | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.repo_url = repo_url
        self.active: Counter = Counter()
        self.strong: list[str] = []  # bold text outside code: the template's labels
        self.pre_langs: list[tuple[str, str]] = []  # (lang, code) of each code block
        self._open: list[str] = []
        self._text: list[str] = []
        self._pre: tuple[str, list[str]] | None = None

    def _inside(self, *tags: str) -> bool:
        return any(tag in self._open for tag in tags)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag not in MARKDOWN_TAGS:
            self.active[("raw html", tag)] += 1
        if tag in ("img", "section", "sup"):
            self.active[(tag, values.get("src") or "")] += 1
        if tag == "a" and not same_repository(values.get("href") or "", self.repo_url):
            self.active[("link", values.get("href") or "")] += 1
        if tag == "pre":
            self._pre = (values.get("lang") or "", [])
        if tag == "strong" and not self._inside("code", "pre"):
            self._text = []
        if tag not in ("img", "input", "br", "hr"):
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "strong" and not self._inside("code", "pre"):
            self.strong.append("".join(self._text))
        if tag == "pre" and self._pre is not None:
            self.pre_langs.append((self._pre[0], "".join(self._pre[1])))
            self._pre = None
        if tag in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag)]

    def handle_comment(self, data: str) -> None:
        self.active[("html comment", data)] += 1

    def handle_data(self, data: str) -> None:
        self._text.append(data)
        if self._pre is not None:
            self._pre[1].append(data)
        if self._inside("code", "pre", "a"):
            return
        for found in MENTION.findall(data):
            self.active[("mention", found)] += 1
        for found in CROSS_REF.findall(data):
            self.active[("cross-repository reference", found)] += 1


def same_repository(href: str, repo_url: str | None) -> bool:
    """Written apart from bot.texts on purpose: the oracle must not share the code it checks."""
    if href.startswith("#fn"):
        return False
    if not repo_url:
        return False
    base = repo_url.lower().rstrip("/") + "/"
    lowered = href.lower()
    return lowered.startswith(base) and ".." not in lowered and "%2e" not in lowered


def read(markdown: str, repo_url: str | None = None) -> Reading:
    reading = Reading(repo_url=repo_url)
    reading.feed(to_html(markdown))
    reading.close()
    return reading
