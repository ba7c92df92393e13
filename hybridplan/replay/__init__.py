"""`hybridplan replay`: a workload replayed through each engine's prefix cache (trace.py reads it, loop.py runs
it, the policies live in their engine packages)."""
