"""The CUDA simulator: its own contract, and the graph semantics it must share with a GPU."""
