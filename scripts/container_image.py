"""Build PR Cockpit's container image with podman on a machine without a Docker engine or registry.

    python3 scripts/container_image.py

Run as root on Debian (only the standard library is needed, so it can run before the project's
venv exists; `.ci/run` starts it beside the tests). Missing tools (podman, runc, debootstrap)
are installed with apt-get. When the Dockerfile's `FROM` (python:3.11-slim) is not in podman's
store and cannot be pulled, a stand-in is built once from Debian packages (debootstrap minbase
bookworm with python3, pip, the host's apt sources and CA certificates) and imported under that
name; later runs find it in the store. The image is built with
`podman build --isolation chroot --pull=never --network host` and tagged IMAGE.
`scripts/container_check.py` calls the same steps (quick when cached) and then checks the image.
"""

from __future__ import annotations

import asyncio
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "localhost/pr-cockpit:check"
SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
TOOLS = ("podman", "runc", "debootstrap")  # commands, named as their Debian packages


def info(text: str) -> None:
    print(f"info  {text}", flush=True)


@dataclass
class Done:
    code: int
    out: str
    err: str

    def tail(self, lines: int = 25) -> str:
        return "\n".join((self.out + self.err).strip().splitlines()[-lines:])


async def sh(*args: str | Path, timeout: float = 120, env: dict[str, str] | None = None) -> Done:
    """Run a command without blocking the stand-ins on this event loop."""
    proc = await asyncio.create_subprocess_exec(
        *map(str, args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Done(-1, "", f"{args[0]} {args[1]}: timed out after {timeout:g}s")
    return Done(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))


# -- tools and the base image ---------------------------------------------------------------------


def ensure_tools() -> None:
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if not missing:
        return
    info(f"installing with apt-get: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode:
            sys.exit(f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def base_image() -> str:
    """The Dockerfile's FROM, as podman names it in its store."""
    text = (ROOT / "Dockerfile").read_text()
    name = re.search(r"^FROM\s+(\S+)", text, re.M).group(1)  # type: ignore[union-attr]
    first = name.split("/", 1)[0]
    if "/" not in name:
        return f"docker.io/library/{name}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{name}"
    return name


async def ensure_base(name: str) -> None:
    if (await sh("podman", "image", "exists", name)).code == 0:
        info(f"base image {name}: in podman's store (pulled, or built by an earlier run)")
        return
    pulled = await sh("podman", "pull", "-q", name, timeout=180)
    if pulled.code == 0:
        info(f"base image {name}: pulled")
        return
    reason = pulled.tail(1)
    info(f"base image {name} cannot be pulled ({reason})")
    info(
        f"building a stand-in for it from Debian packages: debootstrap --variant=minbase "
        f"{SUITE} with {', '.join(BASE_PACKAGES)}, imported as {name}"
    )
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="cockpit-base-", dir="/var/tmp"))
    try:
        await asyncio.to_thread(build_standin_base, work / "root", name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info(f"stand-in base image built in {time.monotonic() - started:.0f}s")


def build_standin_base(root: Path, name: str) -> None:
    include = ",".join(BASE_PACKAGES)
    debootstrap = ["debootstrap", "--variant=minbase", f"--include={include}", SUITE]
    mirror = host_mirror()
    done = subprocess.run(
        [*debootstrap, str(root), mirror or DEBIAN_MIRROR],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode:
        sys.exit(f"debootstrap failed:\n{(done.stdout + done.stderr)[-3000:]}")
    for marker in glob.glob(str(root / "usr/lib/python3*/EXTERNALLY-MANAGED")):
        os.remove(marker)  # pip installs into the image's Python, as in python:3.11-slim
    if mirror:  # a host on another release keeps debootstrap's own sources.list
        copy_host_apt_config(root)
    added = add_host_certificates(root)
    if added:
        info(f"added {added} CA certificate(s) this host trusts beyond Debian's")
    for junk in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
        for path in glob.glob(str(root / junk)):
            if os.path.isfile(path):
                os.remove(path)
    changes = ["--change", "ENV=LANG=C.UTF-8", "--change", 'CMD=["python3"]']
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(
        ["podman", "import", "-q", *changes, "-", name],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tar.wait()
    if imported.returncode:
        sys.exit(f"podman import failed:\n{imported.stderr[-3000:]}")


def apt_sources() -> list[Path]:
    found = [Path("/etc/apt/sources.list")]
    found += sorted(Path("/etc/apt/sources.list.d").glob("*.list"))
    found += sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    return [p for p in found if p.is_file() and p.stat().st_size]


def host_mirror() -> str | None:
    """The Debian archive this host installs SUITE from (its apt sources), if it does."""
    for path in apt_sources():
        text = path.read_text()
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.+)$", stanza, re.M))
                if (
                    "deb" in fields.get("Types", "").split()
                    and SUITE in fields.get("Suites", "").split()
                ):
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    return None


def copy_host_apt_config(root: Path) -> None:
    """The image's apt uses the host's sources (and proxy settings), like the host does."""
    target = root / "etc/apt"
    (target / "sources.list").unlink(missing_ok=True)
    for path in apt_sources():
        shutil.copy2(path, target / path.relative_to("/etc/apt"))
    for folder in ("keyrings", "trusted.gpg.d"):
        source = Path("/etc/apt") / folder
        if source.is_dir():
            shutil.copytree(source, target / folder, dirs_exist_ok=True)
    for conf in Path("/etc/apt/apt.conf.d").glob("*"):
        if conf.is_file() and "proxy" in conf.read_text(errors="replace").lower():
            shutil.copy2(conf, target / "apt.conf.d" / conf.name)


def add_host_certificates(root: Path) -> int:
    """CA certificates the host trusts that Debian's bundle lacks (a TLS-inspecting proxy's
    root, where there is one), so pip in the build reaches the package index as the host does."""
    pem = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not host_bundle.is_file():
        return 0
    known = set(pem.findall((root / "etc/ssl/certs/ca-certificates.crt").read_text()))
    extra = [c for c in pem.findall(host_bundle.read_text()) if c not in known]
    for n, cert in enumerate(extra):
        (root / f"usr/local/share/ca-certificates/host-{n}.crt").write_text(cert + "\n")
    if extra:
        subprocess.run(["chroot", str(root), "update-ca-certificates"], capture_output=True)
    return len(extra)


# -- the image -------------------------------------------------------------------------------


async def build() -> tuple[Done, float]:
    """`podman build` of the checkout; the previous run's image, now untagged, is pruned."""
    started = time.monotonic()
    done = await sh(
        "podman", "build", "--format", "docker", "--isolation", "chroot", "--pull=never",
        "--network", "host", "-t", IMAGE, ROOT,
        timeout=600,
    )  # fmt: skip
    if done.code == 0:
        await sh("podman", "image", "prune", "-f")
    return done, time.monotonic() - started


async def prepare() -> int:
    ensure_tools()
    await ensure_base(base_image())
    done, seconds = await build()
    if done.code:
        print(done.tail(40))
        info(f"image build failed after {seconds:.0f}s")
        return 1
    info(f"image {IMAGE} built in {seconds:.0f}s")
    return 0


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("container image: run it as root (podman runs rootful; tools come from apt-get)")
    sys.exit(asyncio.run(prepare()))
