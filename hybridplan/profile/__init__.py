"""``hybridplan profile``: check the planner's predictions on real hardware.

Allocates exactly the pools the planner predicts (recurrent state for N slots, attention KV for a context),
runs the recurrent-layer kernels at the model's shapes, and sets predicted against measured figures.

Layout: ``arith`` (pure report arithmetic), ``nvml`` (NVIDIA's management library, imported lazily),
``shrink`` (the tiny spec for ``--interpret``), ``workload`` (the pure plan of what gets allocated and run,
each kernel row with typed dims), ``report`` (frozen results with ``to_dict``), ``backends`` (the ``Backend``
protocol: a CUDA GPU or the Triton interpreter), ``rows`` (a row's kernel call, from the shared input
builders in ``hybridplan.kernels.inputs``), ``pipeline`` (the run: size, allocate, time, free), ``render``
(rich tables) and ``command`` (the typer command). Importing this package, ``command`` or any module but
``hybridplan.kernels.inputs`` loads neither torch nor triton nor pynvml: they load when a profile runs.
"""
