"""Builds holdfast and the bench tools in release mode and copies the binaries for this run.

holdfast is built in the root workspace, the tools in their own (bench/Cargo.toml); each
binary is taken from its workspace's target directory (the same one unless a cargo config
says otherwise: bench/.cargo/config.toml points the bench workspace at the root's).

The copies live in the session directory, so a rebuild of the work tree during a long run
does not change the binary halfway through.
"""

import json
import shutil
import subprocess
from pathlib import Path

# The workspace (a folder of the repository) each binary is built in, and how.
BINARIES = {"holdfast": ".", "bench-origin": "bench", "bench-load": "bench",
            "h2-floor": "bench", "h2-engine-floor": "bench", "floor": "bench"}
BUILDS = {".": ["cargo", "build", "--release", "-p", "holdfast"],
          "bench": ["cargo", "build", "--release", "-p", "holdfast-bench-tools"]}


def _how(workspace):
    cmd = " ".join(BUILDS[workspace])
    return cmd if workspace == "." else f"(cd {workspace} && {cmd})"


class BuildError(RuntimeError):
    """cargo failed or a binary is missing."""


def target_dir(repo):
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=repo, capture_output=True, text=True, timeout=300, check=False,
    )
    if out.returncode != 0:
        raise BuildError(f"cargo metadata failed: {out.stderr.strip()[-1000:]}")
    return Path(json.loads(out.stdout)["target_directory"])


def build(repo, dest, *, compile=True, log=print):
    """Returns {name: path} of the copied release binaries."""
    repo = Path(repo)
    if compile:
        for workspace, argv in BUILDS.items():
            log("building: " + _how(workspace))
            out = subprocess.run(argv, cwd=repo / workspace, timeout=1800, check=False)
            if out.returncode != 0:
                raise BuildError(f"`{_how(workspace)}` failed with status {out.returncode}")
    release = {workspace: target_dir(repo / workspace) / "release" for workspace in BUILDS}
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    bins = {}
    for name, workspace in BINARIES.items():
        src = release[workspace] / name
        if not src.exists():
            raise BuildError(f"{src} is missing; build with `{_how(workspace)}`")
        shutil.copy2(src, dest / name)
        bins[name] = str(dest / name)
    return bins
