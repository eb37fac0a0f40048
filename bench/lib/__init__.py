"""What the benchmark scripts share; nothing here is run by itself.

- server.py: a real `coderai run` in a temporary folder (BenchServer), CPU time of processes;
- llama_server.py: llama.cpp's `llama-server` started beside it, ready once /health says so;
- results.py: where results go (bench/results/) and how they are written;
- stats.py: percentiles;
- chat_stream.py: a streamed chat completion, timed per content delta;
- designs.py: the relay benchmark's designs (CoderAI and the baselines in
  bench/baselines/), each started as real processes;
- gpu_load.py: the GPU check's streaming load (bench/gpu_check.py; aiohttp only).
"""
