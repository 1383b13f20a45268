"""The virtual-time event loop, now ``loadgen.virtual_time`` (the live demo's step run uses it
too); kept under this name for the tests that import it from here."""

from infersight.loadgen.virtual_time import VirtualTimeLoop, run_in_virtual_time, serving_here

__all__ = ["VirtualTimeLoop", "run_in_virtual_time", "serving_here"]
