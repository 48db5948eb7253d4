"""Isaac Lab's ``params/env.yaml`` and ``params/agent.yaml`` read as plain data.

Isaac Lab dumps its configs with PyYAML's full dumper, so the files carry Python tags
(``!!python/tuple``, ``!!python/object/apply:builtins.slice``, ``!!python/name:...``).
``yaml.safe_load`` refuses them and ``yaml.unsafe_load`` would import and call what they name.
This loader builds nothing: a tuple becomes a list, an applied object the list (or mapping) of
its arguments, a name its dotted string. It is not a general YAML reader for other tags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tdaot.errors import InvalidArgumentError


class _DataOnlyLoader(yaml.SafeLoader):
    """A SafeLoader that reads every ``!!python/...`` tag as the data under it."""


def _python_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    value = loader.construct_scalar(node)
    # !!python/name:module.attr '' and !!python/module:name carry the name in the tag itself.
    if tag_suffix.startswith(("name:", "module:")) and value in ("", None):
        return tag_suffix.split(":", 1)[1]
    return value


_DataOnlyLoader.add_multi_constructor("tag:yaml.org,2002:python/", _python_tag)


def load_isaac_yaml(source: str | Path) -> Any:
    """The data of an Isaac Lab yaml dump (a path), Python tags read as plain data."""
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read '{path}': {exc.strerror or exc}") from None
    try:
        return yaml.load(text, Loader=_DataOnlyLoader)  # noqa: S506 - data-only loader above
    except yaml.YAMLError as exc:
        raise InvalidArgumentError(f"'{path}' is not a YAML file tdaot can read: {exc}") from None
