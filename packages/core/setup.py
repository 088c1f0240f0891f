"""The optional compiled accelerator of ``sessionledger.model._snapshot`` (``sessionledger._freeze``).

Everything else is in pyproject.toml. The extension is optional: where it cannot be built
(no C compiler, no Python headers) the install goes on and the pure-Python fast path is
used instead, with the same results (README, "the compiled accelerator").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "sessionledger._freeze",
            ["src/sessionledger/_freeze.c"],
            optional=True,
        )
    ]
)
