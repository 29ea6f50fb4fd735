"""rocm-doctor: preflight, fix-and-retry supervisor and support tool for LLaMA-Factory on ROCm."""

__version__ = "0.1.0"
