"""storebench: benchmarks for document, vector and graph stores."""

from storebench.api import run
from storebench.results.files import storebench_version

__version__ = storebench_version()
__all__ = ["__version__", "run"]
