"""Per-repository rules from `.github/cockpit.toml` on the default branch (never the PR's)."""

from __future__ import annotations

import base64
import binascii
import tomllib
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import gidgethub

from bot.config import PROVIDERS
from bot.github import PERMISSIONS

CONFIG_PATH = ".github/cockpit.toml"
COMMAND_LEVELS = PERMISSIONS[PERMISSIONS.index("write") :]  # who may run commands or approve


@dataclass(frozen=True)
class RepoConfig:
    auto_review: bool = True
    review_drafts: bool = False
    provider: str | None = None
    verify: bool = False
    verify_provider: str | None = None  # None: the other provider when it is configured
    ignore: tuple[str, ...] = ()
    max_files: int = 60
    max_diff_bytes: int = 400_000
    approve_permission: str = "write"
    error: str | None = field(default=None, compare=False)

    def to_payload(self) -> dict[str, Any]:
        """As plain JSON, so a job can carry the config its handler already read."""
        return {**asdict(self), "ignore": list(self.ignore)}

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> RepoConfig:
        return cls(**{**data, "ignore": tuple(data.get("ignore", ()))})


_TYPES: dict[str, tuple[type, ...]] = {
    "auto_review": (bool,),
    "review_drafts": (bool,),
    "provider": (str,),
    "verify": (bool,),
    "verify_provider": (str,),
    "ignore": (list,),
    "max_files": (int,),
    "max_diff_bytes": (int,),
    "approve_permission": (str,),
}


def parse_repo_config(text: str) -> RepoConfig:
    """Parse the file; any problem gives the defaults plus an `error` to show on the PR."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return RepoConfig(error=f"{CONFIG_PATH} is not valid TOML: {exc}")
    if isinstance(data.get("review"), dict):
        data = {**data, **data.pop("review")}
    problems = []
    values: dict[str, Any] = {}
    known = {f.name for f in fields(RepoConfig)} - {"error"}
    for key, value in data.items():
        if key not in known:
            problems.append(f"unknown key `{key}`")
            continue
        if not isinstance(value, _TYPES[key]) or (
            isinstance(value, bool) and bool not in _TYPES[key]
        ):
            problems.append(f"`{key}` has the wrong type")
            continue
        values[key] = value
    for key in ("provider", "verify_provider"):
        if key in values and values[key] not in PROVIDERS:
            problems.append(f"`{key}` must be one of {', '.join(PROVIDERS)}")
            values.pop(key)
    if "approve_permission" in values and values["approve_permission"] not in COMMAND_LEVELS:
        problems.append(f"`approve_permission` must be one of {', '.join(COMMAND_LEVELS)}")
        values.pop("approve_permission")
    if "ignore" in values:
        if all(isinstance(g, str) for g in values["ignore"]):
            values["ignore"] = tuple(values["ignore"])
        else:
            problems.append("`ignore` must be a list of glob strings")
            values.pop("ignore")
    for key in ("max_files", "max_diff_bytes"):
        if key in values and values[key] <= 0:
            problems.append(f"`{key}` must be positive")
            values.pop(key)
    if problems:
        return RepoConfig(error=f"{CONFIG_PATH}: " + "; ".join(problems))
    return RepoConfig(**values)


async def fetch_repo_config(gh: Any, owner: str, repo: str) -> RepoConfig:
    """Read the config from the default branch (no `ref`), with the client's ETag cache."""
    try:
        item = await gh.getitem(
            "/repos/{owner}/{repo}/contents/{+path}",
            {"owner": owner, "repo": repo, "path": CONFIG_PATH},
        )
    except gidgethub.HTTPException as exc:
        if int(exc.status_code) == 404:
            return RepoConfig()
        raise
    if not isinstance(item, dict) or item.get("type") != "file":
        return RepoConfig(error=f"{CONFIG_PATH} is not a file")
    try:
        text = base64.b64decode(item.get("content", "")).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return RepoConfig(error=f"{CONFIG_PATH} is not UTF-8 text")
    return parse_repo_config(text)
