"""The real-vLLM A/B benchmark behind benchmarks/vllm_serve_bench.py (docs/benchmarks.md)."""
