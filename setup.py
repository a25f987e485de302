"""The compiled cores: the step core of ``replayscope trace`` (runner/trace/_stepcore*.c, _stepcore.h),
the graph runner's step core (runner/_runcore*.c, _runcore.h) and the emitter's step recorder
(runner/_recordcore.c: ``Emitter.step`` / ``step_fields``), built when a C compiler and Python's
headers are there; without them the package installs as pure Python (the same events, the Python
cores: docs/trace.md "Costs", docs/internals.md). Everything else is in pyproject.toml.

In a source tree without pip:  python3 setup.py build_ext --inplace
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Its files, one job each (the header says which); `depends` puts the header in the sdist too, and
# rebuilds the core when it changes.
STEP_CORE_SOURCES = ["runner/trace/_stepcore.c", "runner/trace/_stepcore_state.c",
                     "runner/trace/_stepcore_step_end.c", "runner/trace/_stepcore_wrappers.c"]
STEP_CORE = Extension("replayscope.runner.trace._stepcore", STEP_CORE_SOURCES,
                      depends=["runner/trace/_stepcore.h"], optional=True)
RUNNER_CORE_SOURCES = ["runner/_runcore.c", "runner/_runcore_step.c", "runner/_runcore_match.c"]
RUNNER_CORE = Extension("replayscope.runner._runcore", RUNNER_CORE_SOURCES, depends=["runner/_runcore.h"],
                        optional=True)
RECORD_CORE = Extension("replayscope.runner._recordcore", ["runner/_recordcore.c"], optional=True)


class BuildCores(build_ext):
    """-O2 and -Wall with gcc or clang, whatever the interpreter was built with."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for extension in self.extensions:
                extension.extra_compile_args = ["-O2", "-Wall"]
        super().build_extensions()


setup(ext_modules=[STEP_CORE, RUNNER_CORE, RECORD_CORE], cmdclass={"build_ext": BuildCores})
