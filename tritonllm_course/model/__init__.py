"""The reference Qwen3.5 text model (plain PyTorch) and its decode state."""
from .cache import Qwen35Cache
from .qwen35 import Qwen35Model

__all__ = ["Qwen35Cache", "Qwen35Model"]
