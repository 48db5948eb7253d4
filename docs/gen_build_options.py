"""The option table of docs/build-options.md, rendered from the fields of tdaot.BuildOptions.

A MkDocs hook (mkdocs.yml `hooks:`): when the site is built, the marker line in
build-options.md is replaced by the table, so the page always says what the code does and the
committed page holds no copy of it that could drift. `python docs/gen_build_options.py` prints
the table. It imports tdaot (the installed package: `make setup`, which `make docs` runs first).
"""

from __future__ import annotations

import dataclasses

MARKER = "<!-- build-options-table -->"
PAGE = "build-options.md"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "&#124;").replace("\n", " ")


def _code(text: str) -> str:
    return f"<code>{_cell(text)}</code>"


def render() -> str:
    from tdaot.builder.options import fields

    rows = [
        "| option (`tdaot.build` keyword, config key) | `tdaot build` flag | default | values | what it does |",
        "| --- | --- | --- | --- | --- |",
    ]
    for spec in fields():
        meta = spec.metadata
        flag = meta["cli_flag"] or "--" + spec.name.replace("_", "-")
        is_switch = spec.type in ("bool", bool)
        if meta["choices"]:
            values = ", ".join(_code(repr(c)) for c in meta["choices"])
        elif is_switch:
            values = "`True`, `False` (a switch on the command line)"
        elif meta["metavar"]:
            values = _code(meta["metavar"])
        else:
            values = ""
        name = _code(spec.name)
        if spec.name == "cpu_target":  # tdaot.builder.config: one build per entry of the list
            name += " (config: <code>cpu_targets</code>, a list)"
        doc = meta["doc"]
        default = spec.default if spec.default is not dataclasses.MISSING else None
        shown = meta["shown_default"] or repr(default)
        rows.append(f"| {name} | {_code(flag)} | {_code(shown)} | {values} | {_cell(doc)} |")
    return "\n".join(rows) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs hook: fill the marker of build-options.md; a page without it fails the build."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{PAGE} lost its marker {MARKER}: the option table has nowhere to go")
    return markdown.replace(MARKER, render())


if __name__ == "__main__":
    print(render(), end="")
