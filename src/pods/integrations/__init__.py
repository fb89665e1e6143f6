"""Adapters that bring PODS down-sampling to other training libraries.

Each adapter is an optional import: ``pods.integrations.trl`` needs ``pip install
'.[trl]'`` (in pods's clone); the rest of pods never imports these modules.
"""
