"""What every benchmark shares: the machine's quiet (``machine``), and more as the benchmarks
are split out of ``bench/queue.py``'s harness."""
