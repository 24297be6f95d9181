"""storebench: benchmarks for document, vector and graph stores."""

import sys
import types

__all__ = ["__version__", "run"]


class _Package(types.ModuleType):
    # ``storebench.run`` (the Python API) and ``__version__`` are imported on
    # first use, so the command line (``__main__``) starts before anything
    # heavy is imported; the ``run`` layer's subpackage, whose import sets
    # the same name, leaves the function in place

    @property
    def run(self) -> object:
        from storebench.api import run

        return run

    @run.setter
    def run(self, _subpackage: object) -> None:
        pass

    @property
    def __version__(self) -> str:
        from storebench.results.files import storebench_version

        return storebench_version()


sys.modules[__name__].__class__ = _Package
