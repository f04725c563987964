#!/usr/bin/env python3
"""Clang's thread-safety analysis over every non-test translation unit of a build tree.

The project builds with GCC, which ignores ABSL_GUARDED_BY and friends; this runs clang++
-fsyntax-only -Wthread-safety -Werror=thread-safety on each source in the build's
compile_commands.json (tests, benchmarks and CUDA sources left out), so an annotation the code
breaks fails `make test`. Exit 0 when every unit is clean, 1 with clang's messages otherwise.

  tools/check_thread_safety.py BUILD_DIR [--jobs N] [--files SUBSTRING ...] [--tests] [--gcc]
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

SKIPPED_PARTS = ("/tests/", "/bench/", "/examples/", "/third_party/", "/build")


def wanted(path, root, only, tests):
    rel = os.path.relpath(path, root)
    if rel.startswith("..") or not path.endswith(".cc") or (path.endswith("_test.cc") and not tests):
        return False
    if any(part in "/" + rel for part in SKIPPED_PARTS) or "fuzz" in os.path.basename(rel):
        return False
    return not only or any(s in rel for s in only)


def compile_args(entry, gcc):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    if gcc:  # the build's own command, checked only: a quick test of an edit without a build
        i = args.index("-o")
        return [a for a in args[:i] + args[i + 2:] if a != "-c"] + ["-fsyntax-only"]
    out = ["clang++"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        # GCC's warning set is not clang's; only the analysis matters here.
        if a == "-c" or a.startswith("-W"):
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                  "-Wno-unused-result"]


def check(entry, gcc):
    result = subprocess.run(compile_args(entry, gcc), cwd=entry["directory"],
                            capture_output=True, text=True)
    return entry["file"], result.returncode, result.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--files", nargs="*", default=[],
                        help="check only sources whose path contains one of these")
    parser.add_argument("--tests", action="store_true", help="include *_test.cc sources")
    parser.add_argument("--gcc", action="store_true",
                        help="compile (syntax only) with the build's own compiler and flags instead")
    args = parser.parse_args()
    if not args.gcc and shutil.which("clang++") is None:
        sys.exit("check_thread_safety: clang++ not found (tools/setup/install_deps.sh installs it)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(args.build_dir, "compile_commands.json")) as f:
        entries = [e for e in json.load(f)
                   if wanted(os.path.abspath(e["file"]), root, args.files, args.tests)]
    # One entry per source: a file compiled into two targets is analysed once.
    entries = list({os.path.abspath(e["file"]): e for e in entries}.values())
    if not entries:
        sys.exit(f"check_thread_safety: no sources in {args.build_dir}/compile_commands.json")
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda e: check(e, args.gcc), entries)
        for done, (path, rc, err) in enumerate(results, 1):
            if rc != 0:
                failed += 1
                print(f"{os.path.relpath(path, root)}:\n{err}", file=sys.stderr)
            if sys.stderr.isatty():
                print(f"\rthread-safety: {done}/{len(entries)} sources, {failed} failing", end="",
                      file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    print(f"thread-safety: {len(entries) - failed} of {len(entries)} sources clean")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
