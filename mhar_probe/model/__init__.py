"""The MHAR model family: config, decoder, routing sites and the routing entry point."""

from transformers import AutoConfig, AutoModelForCausalLM

from .config import PRESETS, ConfigError, MHARConfig
from .methods import METHODS
from .modeling import MHARForCausalLM, MHARModel
from .routing import available_backends, choose_backend, route, route_reference, set_routing_backend

AutoConfig.register("mhar", MHARConfig, exist_ok=True)
AutoModelForCausalLM.register(MHARConfig, MHARForCausalLM, exist_ok=True)

__all__ = ["METHODS", "PRESETS", "ConfigError", "MHARConfig", "MHARForCausalLM", "MHARModel",
           "available_backends", "choose_backend", "route", "route_reference", "set_routing_backend"]
