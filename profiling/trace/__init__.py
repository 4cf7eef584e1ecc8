"""The trace engine: the trace model, the reader, flows, merging ranks, analyses. No torch, no Qt,
and nothing from the run engine (`branchscope.profiling.run`)."""
