"""Trained runs as their frameworks leave them: rsl_rl run directories (Isaac Lab, mjlab,
unitree_rl_lab) and their deployment files, read into a tensordict policy and a tdaot contract.

Nothing here imports rsl_rl, Isaac Lab or mjlab: checkpoints and configs are read as data.
"""
