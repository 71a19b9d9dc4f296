"""Identity-preserving conversion of pretrained Llama / Qwen3-family models to the delta form
of multi-head attention residuals (paper section "Mid-training").

`register()` makes `AutoConfig` / `AutoModelForCausalLM` resolve model_type `mhar_delta`.
"""

from transformers import AutoConfig, AutoModelForCausalLM

from ..model.delta_config import SUPPORTED_MODEL_TYPES, MHARDeltaConfig, default_num_blocks
from .convert import ConversionReport, convert_checkpoint, convert_model
from .errors import ConversionError
from ..model.delta_modeling import MHARDeltaForCausalLM


def register() -> None:
    """Register `MHARDeltaConfig` / `MHARDeltaForCausalLM` with transformers' Auto classes."""
    AutoConfig.register(MHARDeltaConfig.model_type, MHARDeltaConfig, exist_ok=True)
    AutoModelForCausalLM.register(MHARDeltaConfig, MHARDeltaForCausalLM, exist_ok=True)


register()

__all__ = ["SUPPORTED_MODEL_TYPES", "ConversionError", "ConversionReport", "MHARDeltaConfig",
           "MHARDeltaForCausalLM", "convert_checkpoint", "convert_model", "default_num_blocks", "register"]
