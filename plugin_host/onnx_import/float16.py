"""The float16 names of :mod:`.float_width`, where they were first defined."""

from .float_width import DEFAULT_UPCAST_TOLERANCE, compare_float16, find_float16, upcast_float16

__all__ = ["DEFAULT_UPCAST_TOLERANCE", "find_float16", "upcast_float16", "compare_float16"]
