"""hybridplan: capacity planner and live profiler for hybrid (attention + recurrent) LLMs."""

__version__ = "0.1.0"
