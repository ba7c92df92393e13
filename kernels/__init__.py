"""Triton kernels for the recurrent layers of hybrid models, each beside its plain-torch reference.

Importing this package needs torch and triton (the ``gpu`` extra); the planner never imports it.
"""
