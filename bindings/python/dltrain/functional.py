"""PyTorch-style name for the ops: `import dltrain.functional as F; F.cross_entropy(...)`."""
from .ops import *  # noqa: F401,F403
from .ops import __all__  # noqa: F401
