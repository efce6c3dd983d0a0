"""In-place class switches of loaded torch modules: a module becomes an instance of a subclass of its own class
that overrides forward only (so its parameters, state-dict keys and isinstance checks stay), or goes back; and
the tensors a switched forward derives from a module's weights (another layout, padded tiles), cached on the
module as plain attributes (not parameters or buffers: the state dict does not change). The codec's fused Snake
and fused decoder switches use them. Torch only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch


class ForwardSwitch:
    """One replacement forward and the subclasses made for it, one per stock class it has met."""

    def __init__(self, forward: Callable[..., Any], module_name: str, attrs: dict[str, Any] | None = None) -> None:
        self._forward = forward
        self._module_name = module_name
        self._attrs = dict(attrs or {})  # class attributes of the fused subclasses (e.g. what forward accepts)
        self._fused: dict[type[torch.nn.Module], type[torch.nn.Module]] = {}  # stock class → its fused subclass

    def stock_class(self, cls: type[torch.nn.Module]) -> type[torch.nn.Module]:
        """The class a module had before the switch (cls itself if it is not one of ours)."""
        return cls.__bases__[0] if cls in self._fused.values() else cls

    def _fused_class(self, stock: type[torch.nn.Module]) -> type[torch.nn.Module]:
        if stock not in self._fused:
            self._fused[stock] = type("Fused" + stock.__name__, (stock,),
                                      {"forward": self._forward, "__module__": self._module_name, **self._attrs})
        return self._fused[stock]

    def apply(self, model: torch.nn.Module, matches: Callable[[torch.nn.Module], bool], enabled: bool = True) -> int:
        """Switch every module under `model` that `matches` to the replacement forward, or back to its stock
        class with enabled=False → how many modules changed. Idempotent."""
        changed = 0
        for module in model.modules():
            if not matches(module):
                continue
            stock = self.stock_class(type(module))
            target = self._fused_class(stock) if enabled else stock
            if type(module) is not target:
                module.__class__ = target
                changed += 1
        return changed


T = TypeVar("T")


def derived(module: torch.nn.Module, attr: str, sources: tuple[torch.Tensor, ...], make: Callable[[], T]) -> T:
    """make()'s value (run under no_grad), cached as module.<attr> and made again when any of `sources` (the
    module's weights it is derived from) has been changed in place, replaced or moved since."""
    key = tuple((w.data_ptr(), w._version, w.device, w.dtype) for w in sources)
    cached = module.__dict__.get(attr)
    if cached is None or cached[0] != key:
        with torch.no_grad():
            cached = (key, make())
        module.__dict__[attr] = cached
    value: T = cached[1]
    return value


def drop_derived(module: torch.nn.Module, attr: str) -> None:
    """Forget a value derived() cached on the module (when its forward is switched back)."""
    module.__dict__.pop(attr, None)
