"""tdaot.Signal: one key of a contract, its element names and the values that map raw numbers
to physical ones (tdaot.contract has the Contract of signals). Its own module so that the readers
of trained runs' deployment files (tdaot.trained.deploy) build signals without importing the
Contract, whose ``from_deploy`` calls them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tdaot.contract_terms import Term, Values, plain_value

VALUE_FIELDS = ("scale", "offset", "low", "high", "max_delta")
GAIN_FIELDS = ("stiffness", "damping")
SIGNAL_FIELDS = ("names", *VALUE_FIELDS, "terms", *GAIN_FIELDS, "history_layout")
#: How a signal of terms lays out history: each term's steps together, oldest first, term after
#: term (Isaac Lab's and unitree_rl_lab's deploy code). The one layout; a frame-major file (all
#: terms of one step, then the next) is refused by name rather than misread.
HISTORY_LAYOUTS = ("term-major",)


@dataclass(frozen=True)
class Signal:
    """One key of per-sample shape [n]: ``names`` (n unique strings, the policy's order) and
    ``value = clip(raw * scale + offset, low, high)``; ``max_delta`` limits an output's move per
    session step. Each number is one float or n floats; ``low``, ``high``, ``max_delta`` are
    optional. An input may give ``terms`` instead of names and values (derived from them when the
    Contract is made; ``history_layout`` says how their history is laid out, "term-major"); an
    output of joint targets may carry ``stiffness`` and ``damping``."""

    names: tuple[str, ...] = ()
    scale: Values = 1.0
    offset: Values = 0.0
    low: Values | None = None
    high: Values | None = None
    max_delta: Values | None = None
    terms: tuple[Term, ...] = ()
    stiffness: Values | None = None
    damping: Values | None = None
    history_layout: str = "term-major"

    def __post_init__(self) -> None:
        for name in ("names", "terms"):
            value = getattr(self, name)
            if not isinstance(value, str) and isinstance(value, Sequence):
                object.__setattr__(self, name, tuple(value))
        for name in (*VALUE_FIELDS, *GAIN_FIELDS):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, plain_value(value))

    def value(self, name: str, index: int) -> float | None:
        """Field ``name`` for element ``index`` (None when absent)."""
        values = getattr(self, name)
        return values[index] if isinstance(values, tuple) else values

    def apply(self, raw: torch.Tensor) -> torch.Tensor:
        """``clip(raw * scale + offset, low, high)`` on a [..., n] tensor (as compiled in)."""

        def constant(values: Values) -> torch.Tensor:
            return torch.tensor(values, dtype=raw.dtype, device=raw.device)

        value = raw
        if self.scale != 1.0:
            value = value * constant(self.scale)
        if self.offset != 0.0:
            value = value + constant(self.offset)
        if self.low is not None or self.high is not None:
            low = None if self.low is None else constant(self.low)
            high = None if self.high is None else constant(self.high)
            value = torch.clamp(value, min=low, max=high)
        return value

    def to_dict(self) -> dict[str, Any]:
        if self.terms:  # names and values are derived from the terms
            return {"terms": [term.to_dict() for term in self.terms], "history_layout": self.history_layout}
        fields = [name for name in SIGNAL_FIELDS if name not in ("terms", "history_layout")]
        data = {name: getattr(self, name) for name in fields if getattr(self, name) is not None}
        return {name: list(v) if isinstance(v, tuple) else v for name, v in data.items()}
