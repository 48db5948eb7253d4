"""What a binding's or session's supervisor of the joint targets did on the last step
(:class:`SupervisorState`), and the ``supervisor=`` argument of :meth:`tdaot.Policy.bind` and
:meth:`tdaot.Policy.session` as the native runtime takes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tdaot.contract_supervisor import Supervisor
from tdaot.errors import InvalidArgumentError

#: The modes of a row's supervisor, as SupervisorState.mode names them.
MODES = ("running", "blending", "held", "damped")


@dataclass(frozen=True)
class SupervisorState:
    """One row's supervisor after its last step: ``mode`` (``running``, ``blending``, ``held``,
    ``damped``), the scale the service applies to the contract's stiffness (``gain_scale``) and
    damping (``damping_scale``) this tick, the soft start's progress ``blend`` (0 -> 1) and the
    ``steps`` since activation or the row's reset."""

    mode: str
    gain_scale: float
    damping_scale: float
    blend: float
    steps: int


def supervisor_argument(supervisor: Any) -> None | bool | dict[str, Any]:
    """``supervisor=``: True or None (the contract's, when it has one), False (none), or a
    :class:`tdaot.Supervisor` (replacing the contract's; checked against it when bound)."""
    if supervisor is None or supervisor is True:
        return None
    if supervisor is False:
        return False
    if isinstance(supervisor, Supervisor):
        return supervisor.to_dict()
    raise InvalidArgumentError(
        f"supervisor={supervisor!r}: expected True (the contract's), False (none) or a tdaot.Supervisor"
    )
