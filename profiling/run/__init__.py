"""The run engine: model sources, branch discovery, plans, the worker, the runner, the CPU sampler.

Only the worker's modules (`worker`, `branches`, `plans`, `model_source` once it loads a model)
import torch, and only inside the worker process; the runner and the protocol stay light.
"""
