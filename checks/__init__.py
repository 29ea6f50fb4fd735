"""One module per ``--only`` area (``checks/<area>.py``), each declaring its ids' ``Code`` objects beside the
check that emits them. Importing this package does nothing: the runner's ``CHECK_MODULES`` lists the modules.

Module top levels import only the standard library and rocm-doctor's lower layers (registry, findings,
context, worker, and the leaves); what they examine (torch, llamafactory, ...) runs in ``doctor/probes/``,
in the isolated worker.
"""
