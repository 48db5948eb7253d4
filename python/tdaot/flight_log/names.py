"""The names of a recorded key's elements, for plots and MCAP schemas: the contract's (joints by
name, observation terms by term and element), else their indices."""

from __future__ import annotations

import math

from tdaot.flight_log.model import FlightLog


def element_names(log: FlightLog, key: str, kind: str) -> list[str]:
    """One name per element of one row of ``key`` (flattened row-major): the contract signal's
    names when it has one of the right size, else the element's index ("0", "1", ... ; "2_1"
    for a per-row shape of more than one dim)."""
    spec = log.spec(key, kind)
    per_row = spec.shape[1:]
    count = math.prod(per_row)
    contract = log.manifest.contract if log.manifest is not None else None
    signal = None
    if contract is not None:
        signal = (contract.inputs if kind == "input" else contract.outputs).get(key)
    if signal is not None and len(signal.names) == count and len(per_row) == 1:
        return list(signal.names)
    return [_index_name(i, per_row) for i in range(count)]


def _index_name(flat: int, shape: tuple[int, ...]) -> str:
    if not shape:
        return "value"
    parts = []
    for size in reversed(shape):
        parts.append(str(flat % size))
        flat //= size
    return "_".join(reversed(parts))


def term_groups(log: FlightLog, key: str, kind: str) -> list[tuple[str, list[tuple[str, int]]]] | None:
    """For an input whose contract signal is made of observation terms: the terms in order, each
    with its elements' (name within the term, flat index) ("x", "left_knee_joint@-1"); None
    otherwise. A term named twice (two joint outputs) is told apart by "#2"."""
    contract = log.manifest.contract if log.manifest is not None else None
    if contract is None or kind != "input":
        return None
    signal = contract.inputs.get(key)
    if signal is None or not signal.terms:
        return None
    names = element_names(log, key, kind)
    if names != list(signal.names):
        return None
    groups: list[tuple[str, list[tuple[str, int]]]] = []
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        term, _, element = name.partition(".")
        if not groups or groups[-1][0].split("#")[0] != term or _restarts(groups[-1], element):
            seen[term] = seen.get(term, 0) + 1
            label = term if seen[term] == 1 else f"{term}#{seen[term]}"
            groups.append((label, []))
        groups[-1][1].append((element, index))
    return groups


def _restarts(group: tuple[str, list[tuple[str, int]]], element: str) -> bool:
    """Whether ``element`` is already in ``group``: a second term of the same name begins."""
    return any(existing == element for existing, _ in group[1])
