"""mhar-probe: train, capture and analyse Multi-Head Attention Residuals (MHAR) models.

Importing the package registers `MHARConfig` / `MHARForCausalLM` (and the converted
`MHARDeltaConfig` / `MHARDeltaForCausalLM`) with transformers' Auto classes, so
`AutoModelForCausalLM.from_pretrained(path)` works after `import mhar_probe`.
"""

__version__ = "0.1.0"

from .convert import register as _register_delta_conversion  # noqa: E402
from .model import MHARConfig, MHARForCausalLM  # noqa: E402  (registers the Auto classes)

_register_delta_conversion()

__all__ = ["MHARConfig", "MHARForCausalLM", "__version__"]
