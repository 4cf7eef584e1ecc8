"""What tests build and share: traces, run and sweep folders, memory traces, allocator snapshots
(data only: no Qt, no torch). Each test layer imports these rather than another test module."""
