"""The one error conversion raises for input the user can fix (defined beside the delta config,
which validates it, so that a saved model's own code carries it)."""

from ..model.delta_config import ConversionError

__all__ = ["ConversionError"]
