"""Names of a package imported on first use (PEP 562): importing the package imports none of
the modules behind them, so `import paddle_vit` (and `paddle_vit.data.config`) stays free
of Paddle until a name that needs it is used."""
import importlib
import sys


def lazy_names(package, table):
    """(`__getattr__`, `__dir__`) for `package` whose names in `table` (name -> submodule) are
    imported from their submodule when first read, then kept as the package's own attribute."""
    def __getattr__(name):
        if name in table:
            value = getattr(importlib.import_module(f".{table[name]}", package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
