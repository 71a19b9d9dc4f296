"""The MHAR model family: config, decoder, routing sites and the routing entry point."""

from transformers import AutoConfig, AutoModelForCausalLM

from . import errors  # noqa: F401  (bound here even when mhar_probe.errors loaded it first)

from .config import PRESETS, ConfigError, MHARConfig
from .methods import METHODS
from .modeling import MHARForCausalLM, MHARModel
from .routing import available_backends, choose_backend, route, route_reference, set_routing_backend

AutoConfig.register("mhar", MHARConfig, exist_ok=True)
AutoModelForCausalLM.register(MHARConfig, MHARForCausalLM, exist_ok=True)
# the converted (delta) form too, so that importing this package is the one registration
from .delta_config import MHARDeltaConfig  # noqa: E402
from .delta_modeling import MHARDeltaForCausalLM  # noqa: E402

AutoConfig.register(MHARDeltaConfig.model_type, MHARDeltaConfig, exist_ok=True)
AutoModelForCausalLM.register(MHARDeltaConfig, MHARDeltaForCausalLM, exist_ok=True)

__all__ = ["METHODS", "PRESETS", "ConfigError", "MHARConfig", "MHARForCausalLM", "MHARModel",
           "available_backends", "choose_backend", "route", "route_reference", "set_routing_backend"]
