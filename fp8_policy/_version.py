"""The distribution's version, in one place: pyproject.toml reads it (`[tool.setuptools.dynamic]`), and
`fp8_policy.__version__`, `fp8-policy --version`, the client's User-Agent and the OpenAPI info import it from here.

A module of its own so that the client and the service can import it without importing the package root, whose
lazy exports name the client's modules (an import cycle otherwise)."""

__version__ = "0.1.0"
