"""Code that runs inside the examined Python, in the isolated worker (``doctor._worker_main``).

Modules here import only the standard library and the libraries they examine (torch, transformers,
llamafactory, bitsandbytes, flash_attn), never the rest of rocm-doctor: a probe must run in an
environment where rocm-doctor's own dependencies are absent, and a layering test keeps it so.
"""
