"""Builds holdfast and the bench tools in release mode and copies the binaries for this run.

The copies live in the session directory, so a rebuild of the work tree during a long run
does not change the binary halfway through.
"""

import json
import shutil
import subprocess
from pathlib import Path

BINARIES = ("holdfast", "bench-origin", "bench-load", "h2-floor", "floor")


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
    if compile:
        argv = ["cargo", "build", "--release", "-p", "holdfast", "-p", "holdfast-bench-tools"]
        log("building: " + " ".join(argv))
        out = subprocess.run(argv, cwd=repo, timeout=1800, check=False)
        if out.returncode != 0:
            raise BuildError(f"`{' '.join(argv)}` failed with status {out.returncode}")
    release = target_dir(repo) / "release"
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    bins = {}
    for name in BINARIES:
        src = release / name
        if not src.exists():
            raise BuildError(f"{src} is missing; build with `cargo build --release "
                             f"-p holdfast -p holdfast-bench-tools`")
        shutil.copy2(src, dest / name)
        bins[name] = str(dest / name)
    return bins
