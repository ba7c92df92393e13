"""Mamba-1 (Jamba, FalconMamba, Mamba): the decode update of the selective state space recurrence."""
