"""The build side of tdaot: a tensordict policy to a sealed .pt2 package.

    options -> export (export, checks, messages) -> compile (tuning, targets) -> package
    (package), with a content-addressed cache (cache); many artifacts from a CI config in
    parallel (config, jobs, factories, progress, report).

Importing ``tdaot`` does not import this package; ``tdaot.build`` does, on first use.
"""

from tdaot.builder.options import BuildOptions
from tdaot.builder.pipeline import Artifact, build, exported_program_path

__all__ = ["Artifact", "BuildOptions", "build", "exported_program_path"]
