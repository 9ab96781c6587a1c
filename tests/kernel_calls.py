"""Counting the calls of one compiled op, which still computes: how a test sees that a module
took the compiled path rather than its fallback."""
import types

from paddle_vit.variants import compiled


def count_calls(monkeypatch, module, op_name):
    """Make `module.kernel_library()` a library whose `op_name` counts its calls; returns the
    count ([n]), which the op's callers in `module` raise."""
    counted = [0]
    library = compiled.kernel_library()

    def counting_op(*arguments):
        counted[0] += 1
        return getattr(library, op_name)(*arguments)
    counting_library = types.SimpleNamespace(**{name: getattr(library, name) for name in dir(library)
                                                if name.startswith("paddle_vit_")})
    setattr(counting_library, op_name, counting_op)
    monkeypatch.setattr(module, "kernel_library", lambda: counting_library)
    return counted
