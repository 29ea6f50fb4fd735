"""One module per diagnosis area. Importing this package registers every check.

Module top levels import only the standard library and ``doctor``: what they examine (torch,
llamafactory, ...) is imported inside probe functions, which run in the isolated worker.
"""

from checks import config_lint, gpu_health, gpus, memory_fit, template_tokens, torch_build  # noqa: F401
