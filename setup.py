"""The compiled step core of ``replayscope trace`` (runner/trace/_stepcore.c), built when a C
compiler and Python's headers are there; without them the package installs as pure Python
(the same events, the Python core: docs/trace.md "Costs"). Everything else is in pyproject.toml.

In a source tree without pip:  python3 setup.py build_ext --inplace
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

STEP_CORE = Extension("replayscope.runner.trace._stepcore", ["runner/trace/_stepcore.c"], optional=True)


class BuildStepCore(build_ext):
    """-O2 and -Wall with gcc or clang, whatever the interpreter was built with."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for extension in self.extensions:
                extension.extra_compile_args = ["-O2", "-Wall"]
        super().build_extensions()


setup(ext_modules=[STEP_CORE], cmdclass={"build_ext": BuildStepCore})
