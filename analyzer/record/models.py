"""Which modules' forward passes are timed, and under which names.

``profile(model)`` times one model; ``profile([G, D])``, ``profile({"G": G, "D": D})`` and
``profile(nn.ModuleDict(...))`` time each model under its own name (a module that has no
``forward`` of its own, like ModuleDict/ModuleList or a plain holder, stands for its children).
``profile()`` with no model finds the models itself at the first optimizer step: the outermost
modules holding parameters that an optimizer steps (``gpuanalyze run`` relies on this).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from typing import Any

Named = list[tuple[str, Any]]


def evaluating(models: Named | None, grad_enabled: bool) -> bool:
    """Evaluation, not training: gradients off and every profiled model in eval mode (a validation loop's
    ``model.eval()`` and ``torch.no_grad()``); either alone is not enough (frozen layers, a fetch under
    no_grad)."""
    if not models or grad_enabled:
        return False
    return all(not getattr(m, "training", True) for _, m in models)


def named_models(model: Any) -> Named | None:
    """(name, module) pairs for what the user passed; None means "find them" (no model given).

    Raises TypeError with what is accepted when ``model`` is something else."""
    import torch

    if model is None:
        return None
    module = torch.nn.Module
    if isinstance(model, module) and (compiled_wrapper(model) or not _is_container(model)):
        return [(display_name(model), model)]
    if isinstance(model, module):
        items: Iterable[tuple[str | None, Any]] = model.named_children()
    elif isinstance(model, Mapping):
        items = model.items()
    elif isinstance(model, list | tuple):
        items = ((None, m) for m in model)
    else:
        raise TypeError(_accepted(model))
    pairs = [(name, m) for name, m in items]
    if not pairs or not all(isinstance(m, module) for _, m in pairs):
        raise TypeError(_accepted(model))
    if not all(name is None or isinstance(name, str) for name, _ in pairs):
        raise TypeError("analyzer.profile: the keys of a dict of models must be strings (their names in the trace)")
    named = unique_names([(name or display_name(m), m) for name, m in pairs])
    if len({id(m) for _, m in named}) != len(named):
        raise TypeError("analyzer.profile: the same module is listed twice")
    return named


def unique_names(pairs: Iterable[tuple[str, Any]]) -> Named:
    """Distinct names: a repeated class name gets ``#2``, ``#3``."""
    seen: dict[str, int] = {}
    out: Named = []
    for name, m in pairs:
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", m))
    return out


def discover(optimizer: Any | None) -> Named:
    """The outermost modules holding parameters that ``optimizer`` steps (with None: that any live
    optimizer steps).

    Searches the live objects once (at the first optimizer step); a wrapper (DDP, torch.compile's
    OptimizedModule) is picked over the module it wraps, since the wrapper is what gets called."""
    import torch

    module_type, optimizer_type = torch.nn.Module, torch.optim.Optimizer
    modules, optimizers = [], [] if optimizer is None else [optimizer]
    for obj in gc.get_objects():
        kind = type(obj)  # not isinstance(): that reads __class__, which some deprecated objects warn on
        if issubclass(kind, module_type):
            modules.append(obj)
        elif optimizer is None and issubclass(kind, optimizer_type):
            optimizers.append(obj)
    stepped = {id(p) for opt in optimizers for p in _params(opt)}
    children = {id(child) for m in modules for child in m._modules.values() if child is not None}
    roots = [m for m in modules if id(m) not in children and any(id(p) in stepped for p in m.parameters())]
    return unique_names((display_name(m), m) for m in roots)


def _params(optimizer: Any) -> Iterable[Any]:
    return (p for group in optimizer.param_groups for p in group["params"])


def compiled_wrapper(model: Any) -> bool:
    """``torch.compile(module)``'s OptimizedModule: timed as itself (what is called), never taken for
    a container of its ``_orig_mod`` (its ``forward`` is an instance attribute, not a method)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # a torch without dynamo
        return False
    return isinstance(model, OptimizedModule)


def display_name(model: Any) -> str:
    """The model's class name; a compiled wrapper's is the compiled module's."""
    return type(model._orig_mod if compiled_wrapper(model) else model).__name__


def _is_container(model: Any) -> bool:
    """A module without a forward of its own (ModuleDict, ModuleList, a plain holder of models)."""
    import torch

    return type(model).forward is torch.nn.Module.forward


def _accepted(model: Any) -> str:
    return (
        "analyzer.profile: model must be a torch.nn.Module, a list or tuple of modules, a dict of named modules "
        f"or an nn.ModuleDict (or None to find the models at the first optimizer step), not {type(model).__name__}"
    )
