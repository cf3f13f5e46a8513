"""Configs, checkpoints, results, contexts, errors, flags and the storage layout.

The bottom layer: it imports nothing else from lockstep.
"""
