"""mhar-probe: train, capture and analyse Multi-Head Attention Residuals (MHAR) models.

Importing the package registers `MHARConfig` / `MHARForCausalLM` with transformers' Auto
classes, so `AutoModelForCausalLM.from_pretrained(run_dir)` works after `import mhar_probe`.
"""

__version__ = "0.1.0"

from .model import MHARConfig, MHARForCausalLM  # noqa: E402  (registers the Auto classes)

__all__ = ["MHARConfig", "MHARForCausalLM", "__version__"]
