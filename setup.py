"""Build hook for the one C extension; everything else about the package is in pyproject.toml.

`orbitmq._native` (services/orbitmq/native.py explains it) is declared here rather than in
pyproject.toml's `[tool.setuptools.ext-modules]` table, which setuptools still marks
experimental and warns about on every build. `optional=True`: without a C compiler the
install still succeeds and the broker runs the same rules in Python.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "orbitmq._native",
            ["services/orbitmq/_native.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
