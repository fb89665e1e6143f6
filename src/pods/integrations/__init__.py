"""Adapters that bring PODS down-sampling to other training libraries.

Each adapter is an optional import: ``pods.integrations.trl`` needs ``pip install
'pods-rl[trl]'``; the rest of pods never imports these modules.
"""
