"""The engine-in-the-loop replay (SPEC §3.12): vLLM's own scheduler classes,
stock and meridian.vllm.Scheduler, two steps in flight and lockstep, stepped on
the simulator's roofline clock with the trace in the model's place. Needs vLLM;
run it as `meridian engine-replay` (cli.py) or `python -m meridian.engine_replay`."""
