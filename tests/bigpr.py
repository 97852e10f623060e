"""Pull requests of thousands of files, for the end-to-end tests of large PRs and for
`scripts/bench_big_pr.py`: the repository is written by one `git fast-import` (seconds for
30,000 files, where `make_pr`'s `git add` and checkouts take minutes), and the GitHub
stand-in serves it as it serves `make_pr`'s."""

from __future__ import annotations

from pathlib import Path

from bot.standin.repo import GeneratedPR, git

COMMITTER = "Dev <dev@example.test> 1767225600 +0000"  # make_pr's fixed author and date


def _commit(ref: str, mark: int, subject: str, files: dict[str, str | None]) -> bytes:
    """One fast-import commit, `:mark`, on top of `:mark - 1` (if any): `files` written
    inline (None deletes a path)."""
    message = subject.encode() + b"\n"
    parts = [f"commit {ref}\nmark :{mark}\ncommitter {COMMITTER}\n".encode()]
    parts.append(b"data %d\n%s" % (len(message), message))
    if mark > 1:
        parts.append(f"from :{mark - 1}\n".encode())
    for path, content in sorted(files.items()):
        if content is None:
            parts.append(f"D {path}\n".encode())
        else:
            data = content.encode()
            parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(data), data))
    parts.append(b"\n")
    return b"".join(parts)


def import_pr(
    path: Path,
    *,
    base: dict[str, str | None],
    head: dict[str, str | None],
    number: int = 1,
    base_ref: str = "main",
) -> GeneratedPR:
    """`make_pr`'s repository (the base on `base_ref`, the PR's head only under
    `refs/pull/N/head`), written by `git fast-import`. Nothing is checked out."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", base_ref)
    stream = _commit(f"refs/heads/{base_ref}", 1, "base", base)
    stream += _commit(f"refs/pull/{number}/head", 2, "change under review", head)
    git(path, "fast-import", "--quiet", "--done", data=stream + b"done\n")
    base_sha = git(path, "rev-parse", base_ref).strip()
    head_sha = git(path, "rev-parse", f"refs/pull/{number}/head").strip()
    diff = git(path, "diff", "--no-color", "-M", base_sha, head_sha)
    return GeneratedPR(path, path.resolve().as_uri(), number, base_ref, base_sha, head_sha, diff)


def service_files(count: int) -> dict[str, str]:
    """`count` new modules, each in a folder of its own (as a monorepo's generated
    services): long paths, and a folder a REVIEW.md could sit in for every one."""
    return {
        f"services/payments-team-{n // 100:03d}/checkout-component-{n:05d}/"
        f"request_handler_for_component_{n:05d}.py": (
            f'"""Handler {n}."""\n\n\ndef handle_{n}(request):\n    return request.body\n'
        )
        for n in range(count)
    }


def vendored_files(count: int) -> dict[str, str]:
    """`count` files of a vendored tree (left out of a review as noise), each in folders
    of its own, as `go mod vendor` writes them."""
    return {
        f"vendor/github.com/example-org-{n:05d}/library-{n:05d}/internal/codec/codec_{n:05d}.go": (
            f"package codec\n\nconst Version{n} = {n}\n"
        )
        for n in range(count)
    }
