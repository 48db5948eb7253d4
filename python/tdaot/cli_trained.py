"""What ``tdaot build``'s trained-run flags read (``--rsl-rl``, ``--run``, ``--leapp``): the
run's or bundle's policy and example, and the build options with the contract of its deployment
file or bundle. Each says on stderr what it read; tdaot.cli builds from what they return."""

from __future__ import annotations

import sys

from tdaot.builder import BuildOptions
from tdaot.errors import CliError


def run_inputs(args, options: BuildOptions):
    """The run's policy and example, and the options with the contract of its deployment file."""
    from tdaot.trained.run import RslRlRun
    from tdaot.trained.which_run import TrainedRun

    if options.contract is not None and args.deploy is not None:
        raise CliError("give the contract once: --contract or --deploy, not both")
    checkpoint = args.checkpoint
    if checkpoint is not None and checkpoint.isdigit():
        checkpoint = int(checkpoint)  # an iteration: model_<N>.pt
    joint_names = None
    if args.joint_names is not None:
        joint_names = tuple(name.strip() for name in args.joint_names.split(","))
    run = (RslRlRun if args.rsl_rl else TrainedRun)(
        args.rsl_rl or args.run,
        checkpoint=checkpoint,
        deploy=args.deploy,
        mjcf=args.mjcf,
        joint_names=joint_names,
        find_deploy=options.contract is None,  # an explicit --contract is the contract
        supervisor=not args.no_supervisor,
    )
    module, example, contract, note = run.load()
    if contract is not None:
        options = options.replace(contract=contract)
    elif options.contract is not None:
        note = note.split("; ")[0] + "; contract from --contract" if args.run else "contract from --contract"
    print(f"{args.rsl_rl or args.run}: {module.extra_repr()}; {note}", file=sys.stderr)
    return module, example, options


def leapp_inputs(args, options: BuildOptions, *, batch_given: bool):
    """The bundle's policy and example, and the options with its contract and a static batch."""
    from tdaot.trained.leapp import from_leapp, leapp_contract

    for flag in ("checkpoint", "deploy", "mjcf", "joint_names"):
        if getattr(args, flag) is not None:
            raise CliError(f"--{flag.replace('_', '-')} belongs to --rsl-rl and --run builds, not --leapp")
    module, example = from_leapp(args.leapp)
    if options.contract is not None:
        note = "contract from --contract"
    else:
        contract = leapp_contract(module.bundle, module)
        note = "contract from the bundle's kinds and names" if contract else "no kinds or names: no contract"
        if contract is not None:
            options = options.replace(contract=contract)
    if not batch_given:
        options = options.replace(batch="static")  # the traced program's shapes are batch 1
    print(f"{args.leapp}: {module.extra_repr()}; {note}", file=sys.stderr)
    return module, example, options
