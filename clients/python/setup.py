"""Builds the wheel's gRPC stubs: build_py copies glimpse_client, then build_protos.py writes the
stubs of ../../proto into the build tree's glimpse_client/_proto (never into the source tree, whose
stubs may come from Debian's protoc for the Debian-package path). Configuration: pyproject.toml."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_protos  # noqa: E402


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "glimpse_client", "_proto")
        if build_protos.main(["--quiet", "--out", out]) not in (0, None):
            raise SystemExit("glimpse_client: generating the gRPC stubs failed")


setup(cmdclass={"build_py": BuildWithStubs})
