"""Run `cockpit eval run` with no API key: the scripted model behind local model stand-ins.

Starts the Anthropic, OpenAI and Chat Completions stand-ins (real HTTP on 127.0.0.1, answered
by the deterministic `scripted_reviewer`), points the SDKs (and COCKPIT_CHAT_BASE_URL) at
them, and runs the real command in a subprocess with the arguments given (the shipped planted
set when no golden file is given), in the folder it was started from: relative paths
(`--golden`, `--json`, the report) mean what they mean to `cockpit eval run` there. Every
provider's model id is `scripted-reviewer` (its rate is zero: the run costs $0);
`--provider chat` reviews through the chat provider.

The runs are kept in `eval/offline-data` of that folder (COCKPIT_DATA_DIR, when set), apart
from a server's database, so `--resume RUN` through this script finishes or re-scores one,
as the report and the run's first line say.

    python scripts/eval_offline.py [--verify] [--jobs 4] [--json results.json] [...]
    python scripts/eval_offline.py --resume 2
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"  # where the README's set-up installs the project


def _with_the_projects_python() -> None:
    """Started by a Python without the project's packages (`python3 scripts/eval_offline.py`
    outside the venv): run again with the venv's, or say in one line what to run."""
    try:
        import aiohttp  # noqa: F401
        import anthropic  # noqa: F401
        import openai  # noqa: F401
    except ModuleNotFoundError as exc:
        python = VENV / "bin" / "python"
        if python.exists() and Path(sys.prefix).resolve() != VENV.resolve():
            os.execv(python, [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])
        raise SystemExit(
            f"eval_offline.py needs the project's packages ({exc.name} is missing): set up as "
            f"the README says (python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' in "
            f"{ROOT}), then run it again"
        ) from None


if __name__ == "__main__":
    _with_the_projects_python()
sys.path.insert(0, str(ROOT))

from bot.standin.models import AnthropicStandin, ChatStandin, OpenAIStandin  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402

PLANTED = ROOT / "eval" / "golden" / "planted" / "planted.json"
DATA = Path("eval") / "offline-data"  # in the folder it runs in, beside eval/reports


def this_command() -> str:
    """How the user runs this script again from here (the resume hints name it)."""
    script = Path(__file__).resolve()
    shown = script.relative_to(Path.cwd()) if script.is_relative_to(Path.cwd()) else script
    return f"python3 {shlex.quote(str(shown))}"


async def main(argv: list[str]) -> int:
    claude, codex = AnthropicStandin(scripted_reviewer), OpenAIStandin(scripted_reviewer)
    chat = ChatStandin(scripted_reviewer)
    await claude.start()
    await codex.start()
    await chat.start()
    try:
        env = {
            **os.environ,
            "ANTHROPIC_BASE_URL": claude.url,
            "ANTHROPIC_API_KEY": "sk-ant-offline-standin",
            "OPENAI_BASE_URL": f"{codex.url}/v1",
            "OPENAI_API_KEY": "sk-offline-standin",
            "COCKPIT_DATA_DIR": os.environ.get("COCKPIT_DATA_DIR") or str(DATA.resolve()),
            "COCKPIT_CLAUDE_MODEL": MODEL,
            "COCKPIT_CODEX_MODEL": MODEL,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
            "COCKPIT_CHAT_BASE_URL": f"{chat.url}/v1",
            "COCKPIT_CHAT_MODEL": MODEL,
        }
        args = ["--resume-with", this_command(), *argv]
        if "--golden" not in argv and "--resume" not in argv:
            args = ["--golden", str(PLANTED), *args]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "eval", "run", *args, env=env
        )
        return await proc.wait()
    finally:
        await claude.stop()
        await codex.stop()
        await chat.stop()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
